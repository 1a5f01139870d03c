// A fixed-seed training run on one backend, for comparing backends step by step.
#pragma once

#include <algorithm>
#include <array>
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

// Like trajectory(), with a new batch every step handed out through a ring of two host buffers
// (as BatchLoader does). `ahead`: each step stages the next batch from its while_running hook,
// as the trainers do; else each step uploads its own at its start. On a device backend the host
// buffer is scribbled over right after staging: the copy must have been taken by then.
struct StagedRun {
  std::vector<double> losses;
  FlatTensors params;
  int hook_calls = 0;
};
inline StagedRun staged_trajectory(Backend& be, Backend& host, const std::string& name, int batch,
                                   int steps, std::uint64_t seed, bool ahead) {
  Model model(parse_model(name));
  StagedRun run{{}, FlatTensors(model.params()), 0};
  FlatTensors stats(model.stats()), grads(model.params()), batch_stats(model.stats());
  model.init_params(run.params, stats, seed);
  Sgd sgd(model.params(), SgdConfig{0.9f, 1e-4f, false});
  Network net(model, be, batch);
  std::vector<Tensor> images;
  std::vector<std::vector<std::int32_t>> labels;
  Rng rng(seed + 1);
  for (int s = 0; s < steps; ++s) {
    images.push_back(random_tensor({batch, 3, 32, 32}, rng));
    labels.emplace_back(static_cast<std::size_t>(batch));
    for (auto& l : labels.back()) l = static_cast<std::int32_t>(rng.below(10));
  }
  std::array<Tensor, 2> ring{Tensor({batch, 3, 32, 32}), Tensor({batch, 3, 32, 32})};
  const auto fetch = [&](int s) -> Tensor& {
    Tensor& t = ring[static_cast<std::size_t>(s % 2)];
    std::copy_n(images[static_cast<std::size_t>(s)].data(), t.numel(), t.data());
    return t;
  };
  const auto scribble = [&](Tensor& t) {
    if (be.device_resident()) std::fill_n(t.data(), t.numel(), 1e6f);
  };
  Network::StagedImages staged;
  if (ahead) {
    staged = net.stage_images(fetch(0));
    scribble(ring[0]);
  }
  for (int s = 0; s < steps; ++s) {
    const auto& lab = labels[static_cast<std::size_t>(s)];
    StepStats st;
    if (ahead) {
      const Network::StagedImages now = staged;
      st = net.train_step(now, lab, run.params, grads, batch_stats, [&] {
        ++run.hook_calls;
        if (s + 1 == steps) return;
        Tensor& next = fetch(s + 1);
        staged = net.stage_images(next);
        scribble(next);
      });
    } else {
      st = net.train_step(fetch(s), lab, run.params, grads, batch_stats);
    }
    run.losses.push_back(st.loss);
    model.update_running_stats(stats, batch_stats, net.bn_counts());
    sgd.step(host, run.params, grads, 0.05f);
  }
  return run;
}

}  // namespace mt::test
