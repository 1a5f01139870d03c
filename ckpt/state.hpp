// What a training checkpoint holds, typed: the one place that names its arrays and attributes
// (their paths, names and types; docs/checkpoint-format.md describes them). The trainer fills a
// CheckpointState and encode()s it into the container that publish() writes
// (ckpt/checkpoint.hpp); read() and decode() give it back.
//
// Arrays are named as the trainer names them (`stage2.block3.conv1.weight`) and stored under their
// group with the dots as slashes (/params/stage2/block3/conv1/weight). A state's arrays are views:
// of the trainer's buffers when it is encoded, of the container's arrays when it is decoded.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "core/tensor.hpp"

namespace mt::ckpt {

// The groups of arrays: parameters, each one's SGD momentum (under --momentum-correction dana the
// mean of the slots'), BatchNorm running statistics, each data slot's own momentum (dana only:
// slot_momentum_group(j), 0-based), each parameter's running mean step (--lr-scaling gap only).
inline constexpr std::string_view kParamsGroup = "params";
inline constexpr std::string_view kMomentumGroup = "optimizer/momentum";
inline constexpr std::string_view kBnStatsGroup = "bn_stats";
inline constexpr std::string_view kGapMeanStepGroup = "optimizer/gap_mean_step";
std::string slot_momentum_group(std::size_t slot);  // "optimizer/slot_momentum/<slot>"

// array_path("params", "stage2.block3.conv1.weight") == "params/stage2/block3/conv1/weight".
std::string array_path(std::string_view group, std::string_view name);

// One array of a group: product(dims) floats, not owned.
struct NamedArray {
  std::string name;  // the trainer's dotted name
  Dims dims;
  std::span<const float> values;
};
// A group's arrays, in the order they are written (decoded: in the file's order, by path).
using ArrayGroup = std::vector<NamedArray>;
// The array of that name, or nullptr.
const NamedArray* find(const ArrayGroup& group, std::string_view name);

// Where training stands. Attributes global_step; epoch, data_cursor_epoch, data_cursor_position
// (both epoch attributes hold `epoch`); workers and data_cursors (only when worker_cursors is not
// empty); attempts; train_seconds, cost_usd, lr.
struct TrainProgress {
  std::int64_t global_step = 0;
  std::int64_t epoch = 0;     // data cursor
  std::int64_t position = 0;  // batches consumed in the epoch
  double train_seconds = 0;   // over every attempt so far
  double cost_usd = 0;        // over every attempt so far
  std::int64_t attempts = 1;  // runs that contributed (1 + resumes); 1 when not recorded
  double lr = 0;              // at the last step (informational)
  // Parameter server: each worker's data cursor (epoch, position) after its last applied push,
  // in worker order. Empty for the single process (epoch/position above are its cursor).
  std::vector<std::array<std::int64_t, 2>> worker_cursors;

  bool operator==(const TrainProgress&) const = default;
};

// What a checkpoint records of the job that wrote it, so that a resume can check it is the same
// job (data, batch size, learning-rate schedule; the model is checked by its arrays), and of its
// input, so that the checkpoint alone is enough to use the model. Attributes data, batch_size,
// lr_schedule, input_normalization, input_mean and input_std (JSON lists, per channel),
// label_names (JSON list, labels 0..9). Decoded from a checkpoint written before they existed:
// empty strings, batch size 0, the defaults below, no labels.
struct JobIdentity {
  std::string data;  // the data set's identity: format, sizes, fingerprint
  std::int64_t batch_size = 0;
  std::string lr_schedule;                            // as the run describes it
  std::string input_normalization;                    // channel-stats, per-image or none
  std::array<float, 3> input_mean{0.0f, 0.0f, 0.0f};  // of pixel / 255 (channel-stats)
  std::array<float, 3> input_std{1.0f, 1.0f, 1.0f};
  std::vector<std::string> label_names;

  bool operator==(const JobIdentity&) const = default;
};

struct CheckpointState {
  std::string model;  // attribute model, e.g. "resnet32"
  std::int64_t param_count = 0;
  TrainProgress progress;
  JobIdentity job;
  std::string config_json = "{}";  // attribute config: the run's configuration
  std::string written_by;          // a standby's replica only: who wrote it ("worker rank 1")
  double created_unix = 0;         // decoded: when the snapshot was taken; encoded: 0 is publish()'s time

  ArrayGroup params;                        // /params
  ArrayGroup momentum;                      // /optimizer/momentum
  ArrayGroup bn_stats;                      // /bn_stats
  std::vector<ArrayGroup> slot_momenta;     // /optimizer/slot_momentum/<slot>; attribute slot_momenta
  std::optional<ArrayGroup> gap_mean_step;  // /optimizer/gap_mean_step; attribute gap_mean_step = 1

  // A state decoded from a checkpoint handed over (decode(Checkpoint&&)) keeps it here: the arrays
  // view it. Empty otherwise.
  std::shared_ptr<const Checkpoint> storage;
};

// Each group of `s` with its path, in the order encode() writes them: params, optimizer/momentum,
// bn_stats, every optimizer/slot_momentum/<slot>, optimizer/gap_mean_step.
void for_each_group(const CheckpointState& s,
                    const std::function<void(const std::string& path, const ArrayGroup& group)>& fn);

// The container for publish(). `reuse`, a container encoded earlier from a state with the same
// arrays (paths and shapes, in order; AsyncWriter::take_spare), is filled in place without
// allocating its arrays; anything else is rebuilt.
Checkpoint encode(const CheckpointState& s, Checkpoint&& reuse = {});

// The state `c` holds; its arrays view c's (valid while `c` lives unchanged). Attributes written
// before they existed take the defaults above. Throws CheckpointError when a required attribute is
// missing (data_cursor_epoch, data_cursor_position), one is malformed (data_cursors, input_mean,
// input_std, label_names), or the slot momenta are not as many as recorded.
CheckpointState decode(const Checkpoint& c);
// The same, the state keeping `c` (its `storage`), so it and its copies stand alone.
CheckpointState decode(Checkpoint&& c);

}  // namespace mt::ckpt
