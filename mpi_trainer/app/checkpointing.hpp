// The bridge between the trainer's state and the checkpoint library: what a checkpoint holds
// and how it is put back. Parameter `stage2.block3.conv1.weight` is stored at
// /params/stage2/block3/conv1/weight, its momentum at /optimizer/momentum/..., BatchNorm
// running statistics at /bn_stats/...
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "nn/params.hpp"
#include "nn/resnet.hpp"

namespace mt {

struct TrainProgress {
  std::int64_t global_step = 0;
  std::int64_t epoch = 0;             // data cursor
  std::int64_t position = 0;          // batches consumed in the epoch
  double train_seconds = 0;           // over every attempt so far
  double cost_usd = 0;                // over every attempt so far
  std::int64_t attempts = 1;          // runs that contributed (1 + resumes)
  double lr = 0;                      // at the last step (informational)
};

// Copies the state into a checkpoint (the in-memory snapshot).
ckpt::Checkpoint make_checkpoint(const Model& model, const FlatTensors& params,
                                 const FlatTensors& momentum, const FlatTensors& bn_stats,
                                 const TrainProgress& progress, const std::string& config_json);

// Throws CheckpointError unless `c` holds exactly this model's arrays.
void check_compatible(const ckpt::Checkpoint& c, const Model& model);

// Puts a compatible checkpoint's state back; returns its progress.
TrainProgress restore_checkpoint(const ckpt::Checkpoint& c, const Model& model, FlatTensors& params,
                                 FlatTensors& momentum, FlatTensors& bn_stats);

// "stage2.block3.conv1.weight" -> "params/stage2/block3/conv1/weight" (group "params").
std::string array_path(const std::string& group, const std::string& dotted_name);

}  // namespace mt
