#include "ckpt/state.hpp"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace mt::ckpt {

namespace {

// The attributes of `/` beside the container's own (format_version, global_step, model,
// param_count, epoch, created_unix, config, content_crc32: ckpt/checkpoint.hpp).
constexpr const char* kCursorEpoch = "data_cursor_epoch";           // int64
constexpr const char* kCursorPosition = "data_cursor_position";     // int64
constexpr const char* kWorkers = "workers";                         // int64, with data_cursors
constexpr const char* kDataCursors = "data_cursors";                // string: JSON [[epoch, position], ...]
constexpr const char* kSlotMomenta = "slot_momenta";                // int64: slot groups written
constexpr const char* kGapMeanStep = "gap_mean_step";               // int64: 1, the group was written
constexpr const char* kAttempts = "attempts";                       // int64
constexpr const char* kTrainSeconds = "train_seconds";              // float64
constexpr const char* kCostUsd = "cost_usd";                        // float64
constexpr const char* kLr = "lr";                                   // float64
constexpr const char* kData = "data";                               // string
constexpr const char* kBatchSize = "batch_size";                    // int64
constexpr const char* kLrSchedule = "lr_schedule";                  // string
constexpr const char* kInputNormalization = "input_normalization";  // string
constexpr const char* kInputMean = "input_mean";                    // string: JSON list of 3 numbers
constexpr const char* kInputStd = "input_std";                      // string: JSON list of 3 numbers
constexpr const char* kLabelNames = "label_names";                  // string: JSON list of strings
constexpr const char* kWrittenBy = "written_by";                    // string, a standby's replica only

constexpr std::string_view kSlotMomentumGroups = "optimizer/slot_momentum";

// True when `c`'s arrays are exactly `s`'s, in order (paths and shapes).
bool same_arrays(const Checkpoint& c, const CheckpointState& s) {
  std::size_t i = 0;
  bool same = true;
  for_each_group(s, [&](const std::string& path, const ArrayGroup& group) {
    for (const auto& a : group) {
      if (!same) return;
      same = i < c.arrays.size() && c.arrays[i].dims == a.dims && c.arrays[i].path == array_path(path, a.name);
      ++i;
    }
  });
  return same && i == c.arrays.size();
}

template <class T>
T parse_json(const std::string& text, const char* attribute, const char* what) {
  try {
    return nlohmann::json::parse(text).get<T>();
  } catch (const std::exception& e) {
    throw CheckpointError(std::string("checkpoint attribute ") + attribute + " is not " + what + ": " + e.what());
  }
}

std::array<float, 3> per_channel(const Checkpoint& c, const char* attribute, std::array<float, 3> absent) {
  const auto it = c.strings.find(attribute);
  if (it == c.strings.end() || it->second.empty()) return absent;
  const auto v = parse_json<std::vector<float>>(it->second, attribute, "3 numbers");
  if (v.size() != 3) throw CheckpointError(std::string("checkpoint attribute ") + attribute + " is not 3 numbers");
  return {v[0], v[1], v[2]};
}

// The group `path` names ("params/...") and the array's name in it, or nothing for another path.
struct Place {
  ArrayGroup* group;
  std::string_view rest;
};
std::optional<Place> place_of(std::string_view path, CheckpointState& s) {
  const auto under = [&](std::string_view group) {
    return path.size() > group.size() + 1 && path.starts_with(group) && path[group.size()] == '/';
  };
  for (auto [group, into] : {std::pair{kParamsGroup, &s.params}, std::pair{kMomentumGroup, &s.momentum},
                             std::pair{kBnStatsGroup, &s.bn_stats}})
    if (under(group)) return Place{into, path.substr(group.size() + 1)};
  if (under(kGapMeanStepGroup)) {
    if (!s.gap_mean_step) s.gap_mean_step.emplace();
    return Place{&*s.gap_mean_step, path.substr(kGapMeanStepGroup.size() + 1)};
  }
  if (under(kSlotMomentumGroups)) {
    const std::string_view rest = path.substr(kSlotMomentumGroups.size() + 1);
    std::size_t slot = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), slot);
    if (ec != std::errc() || end == rest.data() || end == rest.data() + rest.size() || *end != '/' || slot > 4096)
      return std::nullopt;
    if (s.slot_momenta.size() <= slot) s.slot_momenta.resize(slot + 1);
    return Place{&s.slot_momenta[slot], rest.substr(static_cast<std::size_t>(end - rest.data()) + 1)};
  }
  return std::nullopt;
}

void decode_arrays(const Checkpoint& c, CheckpointState& s) {
  for (const auto& a : c.arrays) {
    const auto place = place_of(a.path, s);
    if (!place) continue;  // not an array of this schema
    std::string name(place->rest);
    std::replace(name.begin(), name.end(), '/', '.');
    place->group->push_back(NamedArray{std::move(name), a.dims, a.data});
  }
  // The writer records how many it wrote: fewer found means a damaged checkpoint, not another policy.
  if (const auto it = c.ints.find(kSlotMomenta);
      it != c.ints.end() && it->second != static_cast<std::int64_t>(s.slot_momenta.size()))
    throw CheckpointError("checkpoint at global step " + std::to_string(c.global_step) + " records " +
                          std::to_string(it->second) + " slot momenta (--momentum-correction dana) but holds " +
                          std::to_string(s.slot_momenta.size()) + " under /" + std::string(kSlotMomentumGroups));
  // Recorded but missing entirely: an empty group, which a restore finds lacking its arrays.
  if (const auto it = c.ints.find(kGapMeanStep); it != c.ints.end() && it->second != 0 && !s.gap_mean_step)
    s.gap_mean_step.emplace();
}

}  // namespace

std::string slot_momentum_group(std::size_t slot) {
  return std::string(kSlotMomentumGroups) + "/" + std::to_string(slot);
}

std::string array_path(std::string_view group, std::string_view name) {
  std::string p(group);
  p += '/';
  p += name;
  std::replace(p.begin() + static_cast<std::ptrdiff_t>(group.size()) + 1, p.end(), '.', '/');
  return p;
}

const NamedArray* find(const ArrayGroup& group, std::string_view name) {
  for (const auto& a : group)
    if (a.name == name) return &a;
  return nullptr;
}

void for_each_group(const CheckpointState& s,
                    const std::function<void(const std::string& path, const ArrayGroup& group)>& fn) {
  fn(std::string(kParamsGroup), s.params);
  fn(std::string(kMomentumGroup), s.momentum);
  fn(std::string(kBnStatsGroup), s.bn_stats);
  for (std::size_t j = 0; j < s.slot_momenta.size(); ++j)
    fn(slot_momentum_group(j), s.slot_momenta[j]);
  if (s.gap_mean_step) fn(std::string(kGapMeanStepGroup), *s.gap_mean_step);
}

Checkpoint encode(const CheckpointState& s, Checkpoint&& reuse) {
  const TrainProgress& p = s.progress;
  Checkpoint c;
  if (same_arrays(reuse, s)) c.arrays = std::move(reuse.arrays);
  c.global_step = p.global_step;
  c.model = s.model;
  c.param_count = s.param_count;
  c.epoch = p.epoch;
  c.created_unix = s.created_unix;
  c.config_json = s.config_json;
  c.ints[kCursorEpoch] = p.epoch;
  c.ints[kCursorPosition] = p.position;
  if (!p.worker_cursors.empty()) {
    c.ints[kWorkers] = static_cast<std::int64_t>(p.worker_cursors.size());
    c.strings[kDataCursors] = nlohmann::json(p.worker_cursors).dump();
  }
  if (!s.slot_momenta.empty()) c.ints[kSlotMomenta] = static_cast<std::int64_t>(s.slot_momenta.size());
  if (s.gap_mean_step) c.ints[kGapMeanStep] = 1;
  c.ints[kAttempts] = p.attempts;
  c.reals[kTrainSeconds] = p.train_seconds;
  c.reals[kCostUsd] = p.cost_usd;
  c.reals[kLr] = p.lr;
  const JobIdentity& job = s.job;
  c.strings[kData] = job.data;
  c.ints[kBatchSize] = job.batch_size;
  c.strings[kLrSchedule] = job.lr_schedule;
  c.strings[kInputNormalization] = job.input_normalization;
  c.strings[kInputMean] = nlohmann::json(job.input_mean).dump();
  c.strings[kInputStd] = nlohmann::json(job.input_std).dump();
  c.strings[kLabelNames] = nlohmann::json(job.label_names).dump();
  if (!s.written_by.empty()) c.strings[kWrittenBy] = s.written_by;
  // Appended in order, or overwritten in place in a reused container (same paths and shapes).
  std::size_t next = 0;
  const bool reused = !c.arrays.empty();
  for_each_group(s, [&](const std::string& path, const ArrayGroup& group) {
    for (const auto& a : group) {
      if (reused) {
        c.arrays[next].data.assign(a.values.begin(), a.values.end());
      } else {
        c.arrays.push_back(Array{array_path(path, a.name), a.dims, {a.values.begin(), a.values.end()}});
      }
      ++next;
    }
  });
  return c;
}

CheckpointState decode(const Checkpoint& c) {
  const auto int_or = [&](const char* k, std::int64_t absent) {
    const auto it = c.ints.find(k);
    return it == c.ints.end() ? absent : it->second;
  };
  const auto real_or = [&](const char* k) {
    const auto it = c.reals.find(k);
    return it == c.reals.end() ? 0.0 : it->second;
  };
  const auto string_or = [&](const char* k) {
    const auto it = c.strings.find(k);
    return it == c.strings.end() ? std::string() : it->second;
  };
  for (const char* key : {kCursorEpoch, kCursorPosition})
    if (!c.ints.count(key)) throw CheckpointError(std::string("checkpoint lacks attribute ") + key);
  CheckpointState s;
  s.model = c.model;
  s.param_count = c.param_count;
  s.config_json = c.config_json;
  s.created_unix = c.created_unix;
  TrainProgress& p = s.progress;
  p.global_step = c.global_step;
  p.epoch = c.ints.at(kCursorEpoch);
  p.position = c.ints.at(kCursorPosition);
  p.train_seconds = real_or(kTrainSeconds);
  p.cost_usd = real_or(kCostUsd);
  p.lr = real_or(kLr);
  p.attempts = int_or(kAttempts, 1);
  if (const auto it = c.strings.find(kDataCursors); it != c.strings.end())
    p.worker_cursors =
        parse_json<std::vector<std::array<std::int64_t, 2>>>(it->second, kDataCursors, "a list of [epoch, position]");
  JobIdentity& job = s.job;
  job.data = string_or(kData);
  job.batch_size = int_or(kBatchSize, 0);
  job.lr_schedule = string_or(kLrSchedule);
  job.input_normalization = string_or(kInputNormalization);
  job.input_mean = per_channel(c, kInputMean, job.input_mean);
  job.input_std = per_channel(c, kInputStd, job.input_std);
  if (const std::string labels = string_or(kLabelNames); !labels.empty())
    job.label_names = parse_json<std::vector<std::string>>(labels, kLabelNames, "a list of strings");
  s.written_by = string_or(kWrittenBy);
  decode_arrays(c, s);
  return s;
}

CheckpointState decode(Checkpoint&& c) {
  auto kept = std::make_shared<const Checkpoint>(std::move(c));
  CheckpointState s = decode(*kept);
  s.storage = std::move(kept);
  return s;
}

}  // namespace mt::ckpt
