#include "app/checkpointing.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/clock.hpp"
#include "ps/ps.hpp"

namespace mt {

namespace {

constexpr const char* kParams = "params";
constexpr const char* kMomentum = "optimizer/momentum";
// --momentum-correction dana: data slot j's momentum under kSlotMomentum/j (kMomentum: their mean).
constexpr const char* kSlotMomentum = "optimizer/slot_momentum";
std::string slot_group(std::size_t j) { return std::string(kSlotMomentum) + "/" + std::to_string(j); }
// --lr-scaling gap: each parameter's running mean step (GapPenalty).
constexpr const char* kGapMeanStep = "optimizer/gap_mean_step";
constexpr const char* kBnStats = "bn_stats";

// Appends the group's arrays at c.arrays[*next...], or overwrites them in place when the
// arrays there already have these paths (a reused checkpoint).
void add_group(ckpt::Checkpoint& c, std::size_t* next, const std::string& group, const FlatTensors& flat) {
  for (const auto& e : flat.layout().entries()) {
    const float* src = flat.flat().data() + e.offset;
    if (*next < c.arrays.size()) {
      c.arrays[*next].data.assign(src, src + e.size);  // same path and size: checked by the caller
    } else {
      ckpt::Array a;
      a.path = array_path(group, e.name);
      a.dims = e.dims;
      a.data.assign(src, src + e.size);
      c.arrays.push_back(std::move(a));
    }
    ++*next;
  }
}

// True when `c`'s arrays are exactly these groups' arrays, in order.
bool same_arrays(const ckpt::Checkpoint& c, const std::vector<std::pair<std::string, const FlatTensors*>>& groups) {
  std::size_t i = 0;
  for (const auto& [group, flat] : groups)
    for (const auto& e : flat->layout().entries()) {
      if (i >= c.arrays.size() || c.arrays[i].dims != e.dims ||
          c.arrays[i].path != array_path(group, e.name))
        return false;
      ++i;
    }
  return i == c.arrays.size();
}

void check_group(const ckpt::Checkpoint& c, const std::string& group, const ParamLayout& layout,
                 const std::string& model) {
  for (const auto& e : layout.entries()) {
    const std::string path = array_path(group, e.name);
    const ckpt::Array* a = c.find(path);
    if (!a)
      throw CheckpointError("checkpoint of model '" + c.model + "' lacks /" + path + " of model '" +
                            model + "'");
    if (a->dims != e.dims)
      throw CheckpointError("checkpoint array /" + path + " has shape " + dims_to_string(a->dims) +
                            ", model '" + model + "' needs " + dims_to_string(e.dims));
  }
}

void restore_group(const ckpt::Checkpoint& c, const std::string& group, FlatTensors& flat) {
  for (const auto& e : flat.layout().entries()) {
    const ckpt::Array* a = c.find(array_path(group, e.name));
    std::memcpy(flat.flat().data() + e.offset, a->data.data(), a->data.size() * sizeof(float));
  }
}

// A resume at another batch size (--resume-override batch_size): the data cursors count batches
// of the checkpoint's size; each becomes the batch of the new size that holds the same image.
void rescale_cursors(ckpt::Checkpoint& c, std::int64_t batch_size) {
  const auto saved = c.ints.find("batch_size");
  if (saved == c.ints.end() || saved->second <= 0 || saved->second == batch_size || batch_size <= 0) return;
  const std::int64_t from = saved->second;
  const auto rescale = [&](std::int64_t position) { return position * from / batch_size; };
  if (auto p = c.ints.find("data_cursor_position"); p != c.ints.end()) p->second = rescale(p->second);
  if (auto it = c.strings.find("data_cursors"); it != c.strings.end()) {
    auto cursors = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (cursors.is_array()) {
      for (auto& cur : cursors)
        if (cur.is_array() && cur.size() == 2 && cur[1].is_number_integer())
          cur[1] = rescale(cur[1].get<std::int64_t>());
      it->second = cursors.dump();
    }
  }
  saved->second = batch_size;
}

}  // namespace

void restore_slot_momenta(const ckpt::Checkpoint& c, const FlatTensors& momentum, std::span<FlatTensors> slots) {
  std::size_t saved = 0;
  while (!slots.empty() && c.find(array_path(slot_group(saved), slots[0].layout().entries().front().name))) ++saved;
  // The writer records how many it wrote: fewer found means a damaged checkpoint, not another policy.
  if (const auto it = c.ints.find("slot_momenta"); it != c.ints.end() && it->second != static_cast<std::int64_t>(saved))
    throw CheckpointError("checkpoint at global step " + std::to_string(c.global_step) + " records " +
                          std::to_string(it->second) + " slot momenta (--momentum-correction dana) but holds " +
                          std::to_string(saved) + " under /" + kSlotMomentum);
  for (std::size_t j = 0; j < slots.size(); ++j) {
    if (saved == slots.size()) {
      check_group(c, slot_group(j), slots[j].layout(), c.model);
      restore_group(c, slot_group(j), slots[j]);
    } else {
      std::copy_n(momentum.flat().data(), momentum.flat().numel(), slots[j].flat().data());
    }
  }
}

bool restore_gap_mean_step(const ckpt::Checkpoint& c, FlatTensors& out) {
  const bool recorded = c.ints.count("gap_mean_step") != 0 && c.ints.at("gap_mean_step") != 0;
  if (!recorded && !c.find(array_path(kGapMeanStep, out.layout().entries().front().name))) {
    std::fill_n(out.flat().data(), out.flat().numel(), 0.f);
    return false;
  }
  // The writer records that it wrote them: a missing or misshapen array is damage, not another policy.
  check_group(c, kGapMeanStep, out.layout(), c.model);
  restore_group(c, kGapMeanStep, out);
  return true;
}

std::string array_path(const std::string& group, const std::string& dotted_name) {
  std::string p = dotted_name;
  std::replace(p.begin(), p.end(), '.', '/');
  return group + "/" + p;
}

ckpt::Checkpoint make_checkpoint(const Model& model, const FlatTensors& params,
                                 const FlatTensors& momentum, const FlatTensors& bn_stats,
                                 const TrainProgress& p, const std::string& config_json,
                                 const JobIdentity& job, ckpt::Checkpoint&& reuse,
                                 const ExtraOptimizerState& extra) {
  std::vector<std::pair<std::string, const FlatTensors*>> groups = {
      {kParams, &params}, {kMomentum, &momentum}, {kBnStats, &bn_stats}};
  for (std::size_t j = 0; j < extra.slot_momenta.size(); ++j) groups.emplace_back(slot_group(j), &extra.slot_momenta[j]);
  if (extra.gap_mean_step) groups.emplace_back(kGapMeanStep, extra.gap_mean_step);
  ckpt::Checkpoint c;
  if (same_arrays(reuse, groups)) c.arrays = std::move(reuse.arrays);
  c.global_step = p.global_step;
  c.model = model.spec().name;
  c.param_count = model.param_count();
  c.epoch = p.epoch;
  c.config_json = config_json;
  c.ints["data_cursor_epoch"] = p.epoch;
  c.ints["data_cursor_position"] = p.position;
  if (!p.worker_cursors.empty()) {
    c.ints["workers"] = static_cast<std::int64_t>(p.worker_cursors.size());
    c.strings["data_cursors"] = nlohmann::json(p.worker_cursors).dump();
  }
  if (!extra.slot_momenta.empty()) c.ints["slot_momenta"] = static_cast<std::int64_t>(extra.slot_momenta.size());
  if (extra.gap_mean_step) c.ints["gap_mean_step"] = 1;
  c.ints["attempts"] = p.attempts;
  c.reals["train_seconds"] = p.train_seconds;
  c.reals["cost_usd"] = p.cost_usd;
  c.reals["lr"] = p.lr;
  c.strings["data"] = job.data;
  c.ints["batch_size"] = job.batch_size;
  c.strings["lr_schedule"] = job.lr_schedule;
  c.strings["input_normalization"] = job.normalization;
  c.strings["input_mean"] = nlohmann::json(job.stats.mean).dump();
  c.strings["input_std"] = nlohmann::json(job.stats.std).dump();
  c.strings["label_names"] = nlohmann::json(job.labels).dump();
  // A checkpoint never holds non-finite state: it would be resumed as the newest valid one.
  for (const auto& [group, flat] : groups) {
    const float* v = flat->flat().data();
    const std::int64_t n = flat->flat().numel();
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(v[i]))
        throw DataError("training diverged by global step " + std::to_string(p.global_step) + ": /" +
                        group + " holds a value that is not finite; not checkpointed (the newest "
                        "checkpoint holds the last good state): lower --lr, then rerun");
  }
  std::size_t next = 0;
  for (const auto& [group, flat] : groups) add_group(c, &next, group, *flat);
  return c;
}

std::optional<std::string> recorded(const ckpt::Checkpoint& c, const char* key) {
  if (const auto it = c.strings.find(key); it != c.strings.end() && !it->second.empty()) return it->second;
  return std::nullopt;
}

std::vector<std::string> parse_resume_override(const std::string& text) {
  std::vector<std::string> fields;
  std::stringstream ss(text);
  for (std::string f; std::getline(ss, f, ',');) {
    if (f.empty()) continue;
    if (std::find_if(std::begin(kOverridableFields), std::end(kOverridableFields),
                     [&](const char* k) { return f == k; }) == std::end(kOverridableFields)) {
      std::string valid;
      for (const char* k : kOverridableFields) valid += (valid.empty() ? "" : ", ") + std::string(k);
      throw UsageError("--resume-override: '" + f + "' is not a field a resume checks; use " + valid +
                       (f == "model" ? " (a checkpoint of another model cannot be resumed at all)" : ""));
    }
    fields.push_back(f);
  }
  return fields;
}

void check_same_job(const ckpt::Checkpoint& c, const std::string& file, const JobIdentity& now,
                    const std::vector<std::string>& overrides, std::ostream& log) {
  const auto batch = c.ints.find("batch_size");
  const std::optional<std::string> saved_batch =
      batch == c.ints.end() || batch->second <= 0 ? std::nullopt : std::optional(std::to_string(batch->second));
  const std::vector<std::tuple<const char*, std::optional<std::string>, std::string>> fields = {
      {"data", recorded(c, "data"), now.data},
      {"batch_size", saved_batch, std::to_string(now.batch_size)},
      {"lr_schedule", recorded(c, "lr_schedule"), now.lr_schedule}};
  std::vector<std::string> unrecorded;
  for (const auto& [name, saved, here] : fields) {
    if (!saved) {
      unrecorded.push_back(name);
      continue;
    }
    if (*saved == here) continue;
    if (std::find(overrides.begin(), overrides.end(), name) != overrides.end()) {
      log << "mpi_trainer: warning: resuming " << file << " with " << name << " '" << here << "' (it was trained with '"
          << *saved << "'), as --resume-override asks\n";
      continue;
    }
    throw CheckpointError(file + " is of another job: its " + name + " is '" + *saved + "', this run's is '" + here +
                          "'; run with the job's flags, or add --resume-override " + name + " to resume anyway");
  }
  if (!unrecorded.empty()) {
    std::string list;
    for (const auto& f : unrecorded) list += (list.empty() ? "" : ", ") + f;
    log << "mpi_trainer: warning: " << file << " does not record its " << list
        << " (written by an older version): not checked against this run\n";
  }
}

void check_compatible(const ckpt::Checkpoint& c, const Model& model) {
  const std::string& name = model.spec().name;
  if (c.model != name)
    throw CheckpointError("checkpoint is of model '" + c.model + "', this run trains '" + name + "'");
  if (c.param_count != model.param_count())
    throw CheckpointError("checkpoint has " + std::to_string(c.param_count) + " parameters, model '" +
                          name + "' has " + std::to_string(model.param_count()));
  check_group(c, kParams, model.params(), name);
  check_group(c, kMomentum, model.params(), name);
  check_group(c, kBnStats, model.stats(), name);
  for (const char* key : {"data_cursor_epoch", "data_cursor_position"})
    if (!c.ints.count(key)) throw CheckpointError(std::string("checkpoint lacks attribute ") + key);
}

TrainProgress restore_checkpoint(const ckpt::Checkpoint& c, const Model& model, FlatTensors& params,
                                 FlatTensors& momentum, FlatTensors& bn_stats) {
  check_compatible(c, model);
  restore_group(c, kParams, params);
  restore_group(c, kMomentum, momentum);
  restore_group(c, kBnStats, bn_stats);
  TrainProgress p;
  p.global_step = c.global_step;
  p.epoch = c.ints.at("data_cursor_epoch");
  p.position = c.ints.at("data_cursor_position");
  auto real = [&](const char* k) { const auto i = c.reals.find(k); return i == c.reals.end() ? 0.0 : i->second; };
  p.train_seconds = real("train_seconds");
  p.cost_usd = real("cost_usd");
  p.lr = real("lr");
  if (const auto it = c.strings.find("data_cursors"); it != c.strings.end()) {
    try {
      p.worker_cursors = nlohmann::json::parse(it->second).get<std::vector<std::array<std::int64_t, 2>>>();
    } catch (const std::exception& e) {
      throw CheckpointError("checkpoint attribute data_cursors is not a list of [epoch, position]: " +
                            std::string(e.what()));
    }
  }
  const auto a = c.ints.find("attempts");
  p.attempts = a == c.ints.end() ? 1 : a->second;
  return p;
}

std::vector<LoaderCursor> start_cursors(const TrainProgress& p, int workers) {
  std::vector<std::array<std::int64_t, 2>> saved = p.worker_cursors;
  if (saved.empty() && (p.global_step > 0 || p.epoch > 0 || p.position > 0)) saved.push_back({p.epoch, p.position});
  std::vector<LoaderCursor> out(static_cast<std::size_t>(workers));
  if (saved.empty()) return out;
  if (saved.size() == out.size()) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = LoaderCursor{saved[i][0], saved[i][1]};
    return out;
  }
  std::int64_t furthest = 0;
  for (const auto& c : saved) furthest = std::max(furthest, c[1] > 0 ? c[0] + 1 : c[0]);
  for (auto& c : out) c = LoaderCursor{furthest, 0};
  return out;
}

std::vector<ckpt::Written> CheckpointTally::report(std::vector<ckpt::Written> done, const TrainConfig& cfg,
                                                   MetricsWriter& metrics, std::ostream& log) {
  std::vector<ckpt::Written> published;
  for (auto& w : done) {
    if (!w.ok()) {
      ++failures;
      log << "mpi_trainer: checkpoint failed: " << w.error
          << (cfg.ckpt_fail == "stop" ? "; stopping (--ckpt-fail stop)"
                                      : "; training goes on and tries again at the next checkpoint")
          << '\n' << std::flush;
      metrics.write(nlohmann::ordered_json{
          {"event", "checkpoint_failed"}, {"global_step", w.global_step}, {"error", w.error}});
      continue;
    }
    durable_step = w.global_step;
    metrics.write(nlohmann::ordered_json{{"event", "checkpoint"}, {"global_step", w.global_step},
                                         {"file", w.file.string()}, {"write_seconds", w.stats.write_seconds},
                                         {"sync_seconds", w.stats.sync_seconds},
                                         {"durable_seconds", w.stats.durable_seconds}, {"bytes", w.stats.bytes}});
    published.push_back(std::move(w));
  }
  return published;
}

void CheckpointTally::summarize(const TrainConfig& cfg, std::ostream& log) const {
  if (failures == 0) return;
  log << "mpi_trainer: " << failures << " checkpoint write(s) failed; "
      << (durable_step >= 0 ? "the newest checkpoint written by this run is step " + std::to_string(durable_step)
                            : std::string("this run wrote no checkpoint"))
      << " in " << cfg.ckpt_dir << "; exit " << kExitCheckpoint << '\n' << std::flush;
}

ckpt::Loaded load_named_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) throw CheckpointError(path + ": not found");
  if (!std::filesystem::is_directory(path)) return ckpt::Loaded{ckpt::read(path), path};
  std::vector<std::string> skipped;
  auto found = ckpt::load_latest_valid(path, {}, &skipped);
  if (!found) throw CheckpointError(path + ": no valid checkpoint in this directory");
  return std::move(*found);
}

double ckpt_sync_bound(const TrainConfig& cfg) { return std::min(1.0, cfg.failure_timeout / 4); }

bool wait_until_durable(ckpt::AsyncWriter& writer, const TrainConfig& cfg) {
  if (cfg.ckpt_sync == "off") return false;
  if (cfg.ckpt_sync == "on" || cfg.ckpt_sync.empty()) {  // --ckpt-sync alone: on
    writer.flush();
    return true;
  }
  return writer.flush_for(ckpt_sync_bound(cfg));
}

void check_checkpoint_dir(const TrainConfig& cfg) {
  if (cfg.ckpt_dir.empty()) return;
  if (const std::string why = probe_writable_directory(cfg.ckpt_dir); !why.empty())
    throw DataError("--ckpt-dir: checkpoints cannot be written: " + why);
}

std::optional<ckpt::Loaded> find_resume_checkpoint(const TrainConfig& cfg, const Model& model, const JobIdentity& job,
                                                   MetricsWriter& metrics, std::ostream& log) {
  namespace fs = std::filesystem;
  // The checkpoint found is of this job, its data cursors in batches of this run's size.
  const auto same_job = [&](ckpt::Checkpoint& c, const std::string& file) {
    check_same_job(c, file, job, parse_resume_override(cfg.resume_override), log);
    rescale_cursors(c, job.batch_size);
  };
  const bool have_dir = !cfg.ckpt_dir.empty() && fs::is_directory(cfg.ckpt_dir);
  if (cfg.resume == "never") {
    if (have_dir && !ckpt::list(cfg.ckpt_dir).empty())
      throw CheckpointError("--resume never, but " + cfg.ckpt_dir +
                            " already holds checkpoints that a new run would overwrite; use an empty "
                            "--ckpt-dir");
    return std::nullopt;
  }
  if (cfg.resume != "auto") {
    ckpt::Checkpoint c = ckpt::read(cfg.resume);
    check_compatible(c, model);
    same_job(c, cfg.resume);
    return ckpt::Loaded{std::move(c), cfg.resume};
  }
  if (!have_dir) return std::nullopt;
  std::vector<std::string> skipped;
  auto found = ckpt::load_latest_valid(
      cfg.ckpt_dir, [&](const ckpt::Checkpoint& c) { check_compatible(c, model); }, &skipped);
  for (const auto& why : skipped) {
    if (!cfg.quiet) log << "mpi_trainer: skipping checkpoint: " << why << '\n';
    metrics.write(nlohmann::ordered_json{{"event", "checkpoint_skipped"}, {"reason", why}});
  }
  // Starting over beside checkpoints we cannot use would mix runs in one directory.
  if (!found && !skipped.empty())
    throw CheckpointError(cfg.ckpt_dir + ": none of its " + std::to_string(skipped.size()) +
                          " checkpoints can be resumed (reasons above); use another "
                          "--ckpt-dir, or move them away to start fresh");
  if (found) same_job(found->checkpoint, found->file.string());
  return found;
}

}  // namespace mt

namespace mt {

std::string replica_record_json(const TrainProgress& p, const std::string& config_json, int revocations) {
  nlohmann::ordered_json j{{"epoch", p.epoch},
                           {"position", p.position},
                           {"train_seconds", p.train_seconds},
                           {"cost_usd", p.cost_usd},
                           {"attempts", p.attempts},
                           {"lr", p.lr},
                           {"worker_cursors", p.worker_cursors},
                           {"config", config_json},
                           {"revocations", revocations}};
  return j.dump();
}

int replica_revocations(const std::string& record) {
  try {
    const auto j = nlohmann::json::parse(record);
    return j.contains("revocations") ? j.at("revocations").get<int>() : 0;
  } catch (const nlohmann::json::exception&) {
    return 0;  // write_replica_checkpoint says what is wrong with the record
  }
}

std::string replica_writer(const ckpt::Checkpoint& c) {
  const auto it = c.strings.find("written_by");
  return it == c.strings.end() ? "" : it->second;
}

ReplicaWritten write_replica_checkpoint(const TrainConfig& cfg, const Model& model, const JobIdentity& job,
                                        const ReplicaState& r, const std::string& label) {
  const auto t0 = Clock::now();
  if (cfg.ckpt_dir.empty()) throw CheckpointError("a replica checkpoint needs --ckpt-dir");
  TrainProgress p;
  std::string config_json = "{}";
  try {
    const auto j = nlohmann::json::parse(r.record);
    p.epoch = j.at("epoch").get<std::int64_t>();
    p.position = j.at("position").get<std::int64_t>();
    p.train_seconds = j.at("train_seconds").get<double>();
    p.cost_usd = j.at("cost_usd").get<double>();
    p.attempts = j.at("attempts").get<std::int64_t>();
    p.lr = j.at("lr").get<double>();
    p.worker_cursors = j.at("worker_cursors").get<std::vector<std::array<std::int64_t, 2>>>();
    config_json = j.at("config").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(std::string("the replica's progress record is unreadable: ") + e.what());
  }
  p.global_step = r.global_step;
  const bool gap = parse_lr_scaling(cfg.lr_scaling) == LrScaling::kGap;
  const int momenta = static_cast<int>(r.state.size()) - (gap ? 1 : 0);
  if (momenta < 1) throw CheckpointError("the replica holds no momentum");
  FlatTensors mean(model.params());
  const StateView state = view_state(r.state, momenta, gap, mean);
  ckpt::Checkpoint c = make_checkpoint(model, r.params, state.momentum, r.bn_stats, p, config_json, job, {}, state.extra);
  c.strings["written_by"] = label;
  ReplicaWritten w;
  w.file = ckpt::publish(cfg.ckpt_dir, c, cfg.ckpt_keep);
  w.seconds = since(t0);
  return w;
}

}  // namespace mt
