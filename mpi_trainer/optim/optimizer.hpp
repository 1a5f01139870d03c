// SGD with momentum (plain or Nesterov) and per-parameter weight decay over a flat buffer.
// The update itself is the backend's sgd_update; this class owns the momentum and groups the
// flat buffer into runs that share a weight-decay setting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "nn/params.hpp"

namespace mt {

struct SgdConfig {
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  bool nesterov = false;
};

class Sgd {
 public:
  Sgd(const ParamLayout& layout, SgdConfig config);
  // Momentum in `memory`'s memory (a device backend's: then step() takes device buffers).
  Sgd(const ParamLayout& layout, SgdConfig config, Backend& memory);

  // params -= update(grads) at learning rate `lr`.
  void step(Backend& backend, FlatTensors& params, const FlatTensors& grads, float lr);
  // The same with this step's momentum instead of the configured one (the parameter server's
  // momentum for its active workers).
  void step(Backend& backend, FlatTensors& params, const FlatTensors& grads, float lr, float momentum);

  FlatTensors& velocity() { return velocity_; }
  const FlatTensors& velocity() const { return velocity_; }
  const SgdConfig& config() const { return config_; }

 private:
  Sgd(const ParamLayout& layout, SgdConfig config, FlatTensors velocity);

  struct Run {
    std::int64_t begin, end;
    bool decay;
  };
  SgdConfig config_;
  FlatTensors velocity_;
  std::vector<Run> runs_;
};

// Divergence, one rule for both trainers: a step's training loss that is not finite, or above
// `max_loss` (> 0; --max-loss), means the run diverged. Throws DataError (exit 3) naming the
// global step and the loss, before the step's state can reach a checkpoint.
void check_divergence(double loss, double max_loss, std::int64_t global_step);

}  // namespace mt
