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
#include "optim/schedule.hpp"
#include "ps/ps.hpp"

namespace mt {

namespace {

// The arrays of `flat`, as views, in its layout's order.
ckpt::ArrayGroup arrays_of(const FlatTensors& flat) {
  ckpt::ArrayGroup g;
  g.reserve(flat.layout().entries().size());
  for (const auto& e : flat.layout().entries())
    g.push_back({e.name, e.dims, {flat.flat().data() + e.offset, static_cast<std::size_t>(e.size)}});
  return g;
}

// Throws unless `saved` (the checkpoint's group at `path`) holds each of the layout's arrays with
// its shape.
void check_group(const ckpt::ArrayGroup& saved, std::string_view path, const ParamLayout& layout,
                 const std::string& saved_model, const std::string& model) {
  for (const auto& e : layout.entries()) {
    const ckpt::NamedArray* a = ckpt::find(saved, e.name);
    if (!a)
      throw CheckpointError("checkpoint of model '" + saved_model + "' lacks /" + ckpt::array_path(path, e.name) +
                            " of model '" + model + "'");
    if (a->dims != e.dims)
      throw CheckpointError("checkpoint array /" + ckpt::array_path(path, e.name) + " has shape " +
                            dims_to_string(a->dims) + ", model '" + model + "' needs " + dims_to_string(e.dims));
  }
}

// After check_group.
void restore_group(const ckpt::ArrayGroup& saved, FlatTensors& flat) {
  for (const auto& e : flat.layout().entries()) {
    const ckpt::NamedArray* a = ckpt::find(saved, e.name);
    std::memcpy(flat.flat().data() + e.offset, a->values.data(), a->values.size() * sizeof(float));
  }
}

// A resume at another batch size (--resume-override batch_size): the data cursors count batches
// of the checkpoint's size; each becomes the batch of the new size that holds the same image.
void rescale_cursors(ckpt::CheckpointState& s, std::int64_t batch_size) {
  const std::int64_t from = s.job.batch_size;
  if (from <= 0 || from == batch_size || batch_size <= 0) return;
  const auto rescale = [&](std::int64_t position) { return position * from / batch_size; };
  s.progress.position = rescale(s.progress.position);
  for (auto& cursor : s.progress.worker_cursors) cursor[1] = rescale(cursor[1]);
  s.job.batch_size = batch_size;
}

}  // namespace

void restore_slot_momenta(const ckpt::CheckpointState& s, const FlatTensors& momentum, std::span<FlatTensors> slots) {
  // ckpt::decode checked that the checkpoint holds as many as it records.
  const bool each_own = s.slot_momenta.size() == slots.size();
  for (std::size_t j = 0; j < slots.size(); ++j) {
    if (each_own) {
      check_group(s.slot_momenta[j], ckpt::slot_momentum_group(j), slots[j].layout(), s.model, s.model);
      restore_group(s.slot_momenta[j], slots[j]);
    } else {
      std::copy_n(momentum.flat().data(), momentum.flat().numel(), slots[j].flat().data());
    }
  }
}

bool restore_gap_mean_step(const ckpt::CheckpointState& s, FlatTensors& out) {
  if (!s.gap_mean_step) {
    std::fill_n(out.flat().data(), out.flat().numel(), 0.f);
    return false;
  }
  // The writer records that it wrote them: a missing or misshapen array is damage, not another policy.
  check_group(*s.gap_mean_step, ckpt::kGapMeanStepGroup, out.layout(), s.model, s.model);
  restore_group(*s.gap_mean_step, out);
  return true;
}

ckpt::CheckpointState checkpoint_state(const Model& model, const FlatTensors& params, const FlatTensors& momentum,
                                       const FlatTensors& bn_stats, const TrainProgress& progress,
                                       const std::string& config_json, const JobIdentity& job,
                                       const ExtraOptimizerState& extra) {
  ckpt::CheckpointState s;
  s.model = model.spec().name;
  s.param_count = model.param_count();
  s.progress = progress;
  s.job = job;
  s.config_json = config_json;
  s.params = arrays_of(params);
  s.momentum = arrays_of(momentum);
  s.bn_stats = arrays_of(bn_stats);
  for (const auto& slot : extra.slot_momenta) s.slot_momenta.push_back(arrays_of(slot));
  if (extra.gap_mean_step) s.gap_mean_step = arrays_of(*extra.gap_mean_step);
  // A checkpoint never holds non-finite state: it would be resumed as the newest valid one.
  ckpt::for_each_group(s, [&](const std::string& path, const ckpt::ArrayGroup& group) {
    for (const auto& a : group)
      if (!std::all_of(a.values.begin(), a.values.end(), [](float v) { return std::isfinite(v); }))
        throw DataError("training diverged by global step " + std::to_string(progress.global_step) + ": /" + path +
                        " holds a value that is not finite; not checkpointed (the newest "
                        "checkpoint holds the last good state): lower --lr, then rerun");
  });
  return s;
}

ckpt::Checkpoint make_checkpoint(const Model& model, const FlatTensors& params,
                                 const FlatTensors& momentum, const FlatTensors& bn_stats,
                                 const TrainProgress& p, const std::string& config_json,
                                 const JobIdentity& job, ckpt::Checkpoint&& reuse,
                                 const ExtraOptimizerState& extra) {
  return ckpt::encode(checkpoint_state(model, params, momentum, bn_stats, p, config_json, job, extra),
                      std::move(reuse));
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

void check_same_job(const ckpt::CheckpointState& s, const std::string& file, const JobIdentity& now,
                    const std::vector<std::string>& overrides, std::ostream& log) {
  // Empty (0 for the batch size): not recorded, written before these attributes existed.
  const auto saved = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional(v); };
  const std::vector<std::tuple<const char*, std::optional<std::string>, std::string>> fields = {
      {"data", saved(s.job.data), now.data},
      {"batch_size", saved(s.job.batch_size > 0 ? std::to_string(s.job.batch_size) : ""),
       std::to_string(now.batch_size)},
      {"lr_schedule", saved(s.job.lr_schedule), now.lr_schedule}};
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

void check_compatible(const ckpt::CheckpointState& s, const Model& model) {
  const std::string& name = model.spec().name;
  if (s.model != name)
    throw CheckpointError("checkpoint is of model '" + s.model + "', this run trains '" + name + "'");
  if (s.param_count != model.param_count())
    throw CheckpointError("checkpoint has " + std::to_string(s.param_count) + " parameters, model '" +
                          name + "' has " + std::to_string(model.param_count()));
  check_group(s.params, ckpt::kParamsGroup, model.params(), s.model, name);
  check_group(s.momentum, ckpt::kMomentumGroup, model.params(), s.model, name);
  check_group(s.bn_stats, ckpt::kBnStatsGroup, model.stats(), s.model, name);
}

TrainProgress restore_checkpoint(const ckpt::CheckpointState& s, const Model& model, FlatTensors& params,
                                 FlatTensors& momentum, FlatTensors& bn_stats) {
  check_compatible(s, model);
  restore_group(s.params, params);
  restore_group(s.momentum, momentum);
  restore_group(s.bn_stats, bn_stats);
  return s.progress;
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
  if (!std::filesystem::is_directory(path)) return ckpt::Loaded{ckpt::read_contained(path), path};
  std::vector<std::string> skipped;
  auto found = ckpt::load_latest_valid(path, {}, &skipped);
  if (!found) throw CheckpointError(path + ": no valid checkpoint in this directory");
  return std::move(*found);
}

LoadedState load_named_state(const std::string& path) {
  ckpt::Loaded loaded = load_named_checkpoint(path);
  return LoadedState{ckpt::decode(std::move(loaded.checkpoint)), std::move(loaded.file)};
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

std::optional<LoadedState> find_resume_checkpoint(const TrainConfig& cfg, const Model& model, const JobIdentity& job,
                                                  const LrSchedule& schedule, MetricsWriter& metrics,
                                                  std::ostream& log) {
  namespace fs = std::filesystem;
  // The checkpoint found is of this job, its data cursors in batches of this run's size.
  const auto of_this_job = [&](ckpt::Checkpoint&& c, const fs::path& file) {
    LoadedState found{ckpt::decode(std::move(c)), file};
    check_compatible(found.state, model);
    JobIdentity now = job;
    const bool t2t = model.spec().kind == BlockKind::kPreActivation;
    // Written before schedules scaled with the run, by a run of this length: the same schedule.
    if (schedule.scaled && found.state.job.lr_schedule == schedule.describe()) now.lr_schedule = schedule.describe();
    check_same_job(found.state, file.string(), now, parse_resume_override(cfg.resume_override), log);
    if (schedule.scaled && found.state.job.lr_schedule == schedule.identity()) {
      // Resumed with another --train-steps: the scaled boundaries move with the run's length.
      const std::int64_t was = nlohmann::json::parse(found.state.config_json, nullptr, false).value("train_steps", 0);
      if (was > 0 && was != cfg.train_steps && !cfg.quiet) {
        const LrSchedule before = parse_schedule(cfg.lr_schedule, t2t, cfg.lr, cfg.lr_warmup_steps, was);
        log << "mpi_trainer: the learning-rate schedule is scaled to --train-steps " << cfg.train_steps
            << " (the checkpoint's run had " << was << "): " << schedule.describe() << ", was " << before.describe()
            << "; --lr-schedule " << before.flag() << " --resume-override lr_schedule keeps the checkpoint's\n";
      }
    }
    rescale_cursors(found.state, job.batch_size);
    // A checkpoint past the run's end: nothing would train, and the run would end at once.
    if (const std::int64_t at = found.state.progress.global_step; at > cfg.train_steps)
      throw UsageError("--train-steps " + std::to_string(cfg.train_steps) + " ends before the checkpoint to resume, " +
                       file.string() + ", at global step " + std::to_string(at) +
                       ": give --train-steps above " + std::to_string(at) +
                       " to train on from it, or a new --ckpt-dir (or --resume never) to start over");
    return found;
  };
  const bool have_dir = !cfg.ckpt_dir.empty() && fs::is_directory(cfg.ckpt_dir);
  if (cfg.resume == "never") {
    if (have_dir && !ckpt::list(cfg.ckpt_dir).empty())
      throw CheckpointError("--resume never, but " + cfg.ckpt_dir +
                            " already holds checkpoints that a new run would overwrite; use an empty "
                            "--ckpt-dir");
    return std::nullopt;
  }
  if (cfg.resume != "auto") return of_this_job(ckpt::read_contained(cfg.resume), cfg.resume);
  if (!have_dir) return std::nullopt;
  std::vector<std::string> skipped;
  auto found = ckpt::load_latest_valid(
      cfg.ckpt_dir, [&](const ckpt::Checkpoint& c) { check_compatible(ckpt::decode(c), model); }, &skipped);
  for (const auto& why : skipped) {
    if (!cfg.quiet) log << "mpi_trainer: skipping checkpoint: " << why << '\n';
    metrics.write(nlohmann::ordered_json{{"event", "checkpoint_skipped"}, {"reason", why}});
  }
  // Starting over beside checkpoints we cannot use would mix runs in one directory.
  if (!found && !skipped.empty()) {
    std::string reasons;  // in the message itself: --quiet prints no skipping lines
    for (std::size_t i = 0; i < skipped.size() && i < 3; ++i) reasons += "; " + skipped[i];
    if (skipped.size() > 3) reasons += "; and " + std::to_string(skipped.size() - 3) + " more";
    throw CheckpointError(cfg.ckpt_dir + ": none of its " + std::to_string(skipped.size()) +
                          " checkpoints can be resumed; use another --ckpt-dir, or move them away to start "
                          "fresh (" + reasons.substr(2) + ")");
  }
  if (!found) return std::nullopt;
  return of_this_job(std::move(found->checkpoint), found->file);
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
  ckpt::CheckpointState s =
      checkpoint_state(model, r.params, state.momentum, r.bn_stats, p, config_json, job, state.extra);
  s.written_by = label;
  ReplicaWritten w;
  w.file = ckpt::publish(cfg.ckpt_dir, ckpt::encode(s), cfg.ckpt_keep);
  w.seconds = since(t0);
  return w;
}

}  // namespace mt
