// A fixed-seed training run on one backend, for comparing backends step by step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "test_util.hpp"

namespace mt::test {

// Runs `steps` SGD steps of `name` on one fixed random batch; returns the loss of each step.
// The network computes on `be`; the optimizer updates the host parameters with `host`
// (the same backend for host backends, the CPU beside a device backend).
inline std::vector<double> trajectory(Backend& be, Backend& host, const std::string& name, int batch,
                                      int steps, std::uint64_t seed) {
  Model model(parse_model(name));
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()),
      batch_stats(model.stats());
  model.init_params(params, stats, seed);
  Sgd sgd(model.params(), SgdConfig{0.9f, 1e-4f, false});
  Network net(model, be, batch);
  Rng rng(seed + 1);
  Tensor images = random_tensor({batch, 3, 32, 32}, rng);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(10));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    losses.push_back(net.train_step(images, labels, params, grads, batch_stats).loss);
    model.update_running_stats(stats, batch_stats, net.bn_counts());
    sgd.step(host, params, grads, 0.05f);
  }
  return losses;
}

inline std::vector<double> trajectory(Backend& be, const std::string& name, int batch, int steps,
                                      std::uint64_t seed) {
  return trajectory(be, be, name, batch, steps, seed);
}

}  // namespace mt::test
