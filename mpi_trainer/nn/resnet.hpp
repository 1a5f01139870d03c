// The CIFAR ResNets of docs/architecture.md ("Models") and their execution on a Backend.
//
// Model: the architecture (names, shapes, parameter layout), independent of any backend, so
// model-info, the parameter server and checkpoints need no compute. Network: one model bound
// to a backend and a batch size, with every primitive and activation buffer made up front.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/rng.hpp"
#include "nn/params.hpp"

namespace mt {

enum class BlockKind {
  kPostActivation,  // He et al. 2015: conv-BN-ReLU-conv-BN, + shortcut, ReLU; option-A shortcut
  kPreActivation,   // Tensor2Tensor resnet_cifar: BN-ReLU-conv-BN-ReLU-conv + shortcut; 1x1 proj
};

struct ModelSpec {
  std::string name;
  BlockKind kind = BlockKind::kPostActivation;
  int blocks_per_stage = 5;
  int stem_kernel = 3;
  int stem_width = 16;
  std::vector<int> widths{16, 32, 64};
  std::vector<int> strides{1, 2, 2};
  int classes = 10;
  float bn_eps = 1e-5f;
  float bn_momentum = 0.1f;  // running = (1 - m) * running + m * batch
};

// Accepts resnetN (N = 6n+2: resnet8, resnet20, resnet32, ...) and resnetN-t2t (N = 6n+2).
// Throws UsageError listing the choices for anything else.
ModelSpec parse_model(const std::string& name);
std::string model_choices();

struct ConvDef {
  ConvSpec spec;
  int weight = -1;
};
struct BnDef {
  int channels = 0;
  int gamma = -1, beta = -1;  // in params()
  int stats = -1;             // mean at stats().at(stats), variance at stats + 1
  bool relu = false;
};
struct BlockDef {
  int in_channels = 0, out_channels = 0, stride = 1;
  BnDef bn_in;  // pre-activation only
  ConvDef conv1, conv2;
  BnDef bn1, bn2;  // bn2: post-activation only
  bool has_projection = false;  // pre-activation: 1x1 conv + BN on the first block of a stage
  ConvDef proj;
  BnDef proj_bn;
};

class Model {
 public:
  explicit Model(ModelSpec spec);

  const ModelSpec& spec() const { return spec_; }
  const ParamLayout& params() const { return params_; }
  // BatchNorm statistics: for each BN, `<bn>.running_mean` then `<bn>.running_var`.
  const ParamLayout& stats() const { return stats_; }
  // Trainable parameters (excludes alignment gaps in the flat layout).
  std::int64_t param_count() const;

  // He-normal convolutions, PyTorch-default linear layer, BN gamma 1 / beta 0; running
  // mean 0 / variance 1. Deterministic in `seed`.
  void init_params(FlatTensors& params, FlatTensors& stats, std::uint64_t seed) const;

  // running = (1 - m) * running + m * batch, with the batch variance made unbiased over
  // `count` values per channel (count = batch * H * W of that layer, see Network).
  void update_running_stats(FlatTensors& running, const FlatTensors& batch,
                            std::span<const std::int64_t> counts) const;

  const ConvDef& stem_conv() const { return stem_conv_; }
  const BnDef& stem_bn() const { return stem_bn_; }
  const std::vector<BlockDef>& blocks() const { return blocks_; }
  int fc_weight() const { return fc_weight_; }
  int fc_bias() const { return fc_bias_; }
  // All BN definitions in forward order, for statistics bookkeeping.
  std::vector<const BnDef*> batchnorms() const;
  // Values each BN normalizes over per channel (batch * H * W), in batchnorms() order.
  std::vector<std::int64_t> bn_counts(int batch) const;

 private:
  ConvDef add_conv(const std::string& name, int in, int out, int k, int stride);
  BnDef add_bn(const std::string& name, int channels, bool relu);

  ModelSpec spec_;
  ParamLayout params_;
  ParamLayout stats_;
  ConvDef stem_conv_;
  BnDef stem_bn_;
  std::vector<BlockDef> blocks_;
  int fc_weight_ = -1, fc_bias_ = -1;
};

struct StepStats {
  float loss = 0.f;
  int correct = 0;
};

// A model bound to a backend and a fixed batch size. Not thread-safe; one per thread.
class Network {
 public:
  Network(const Model& model, Backend& backend, int batch);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  int batch() const { return batch_; }

  // A batch's images handed to the network ahead of its step (stage_images).
  struct StagedImages {
    const Tensor* host = nullptr;  // host backends: the caller's tensor, read by the step
    int slot = -1;                 // device backends: the device buffer holding them
    std::uint64_t generation = 0;
  };

  // images: (B, 3, 32, 32) plain. On a device backend they are uploaded now, on a copy queue
  // that runs beside the device's current work (call it from a step's `while_running` to hide
  // the upload behind that step), and `images` may be reused when this returns; on a host
  // backend the step reads `images` itself, so it must stay valid until then. At most one
  // batch may wait staged beside the step that is running.
  StagedImages stage_images(const Tensor& images);

  // labels: B. Writes every gradient into `grads` (overwrite) and the batch statistics of every
  // BN into `batch_stats` (same layout as running stats). `while_running`, when given, is
  // called once the step's work is queued and before waiting for it: on a device backend it
  // runs while the device computes (fetch and stage the next batch there).
  StepStats train_step(const StagedImages& images, std::span<const std::int32_t> labels,
                       const FlatTensors& params, FlatTensors& grads, FlatTensors& batch_stats,
                       const std::function<void()>& while_running = {});
  // The same with images staged now.
  StepStats train_step(const Tensor& images, std::span<const std::int32_t> labels,
                       const FlatTensors& params, FlatTensors& grads, FlatTensors& batch_stats);

  // Inference with running statistics. Rows >= `valid` of the batch are ignored (a padded
  // last batch). Returns the summed loss and the correct count over the valid rows.
  StepStats evaluate(const Tensor& images, std::span<const std::int32_t> labels, int valid,
                     const FlatTensors& params, const FlatTensors& running_stats);

  // Elements per channel each BN normalizes over, in stats() order (one per BN).
  std::span<const std::int64_t> bn_counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int batch_;
};

}  // namespace mt
