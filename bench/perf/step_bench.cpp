// Times full training steps (forward, loss, backward, SGD) of a model on random data.
//
//   step_bench --model resnet32 --batch-size 128 --threads 2 --steps 20 --warmup 3 [--device cuda]
//       one JSON line per step, then a summary line with the median. On CUDA the step is the
//       single-process trainer's: parameters, gradients and momentum stay on the GPU, the images
//       are uploaded and the batch statistics downloaded every step, and the step is timed to
//       the end of its GPU work. Like the trainer, each step stages the next batch's images
//       while the GPU computes (--overlap off: uploads them at the start of their own step).
//   step_bench ... --serve
//       side-by-side mode for bench/perf/speed_vs_pytorch.py: after the warm-up, reads lines
//       "STEP k" from stdin, runs k timed steps, answers {"images_per_second_each": [...]};
//       "QUIT" ends it. The PyTorch reference speaks the same protocol.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/rng.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"

using namespace mt;

int main(int argc, char** argv) {
  CLI::App app{"Training-step benchmark"};
  std::string model_name = "resnet32";
  int batch = 128, threads = 2, steps = 20, warmup = 3;
  bool serve = false;
  std::string device = "cpu", overlap = "on";
  app.add_option("--model", model_name);
  app.add_option("--device", device)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--batch-size", batch);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_flag("--serve", serve);
  app.add_option("--overlap", overlap, "stage the next batch during the step (on) or at its start (off)")
      ->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Backend> backend;
  try {
    backend = device == "cuda" ? make_cuda_backend(0) : make_cpu_backend(threads);
  } catch (const std::exception& e) {
    std::cerr << "step_bench: " << e.what() << '\n';
    return 3;
  }
  Model model(parse_model(model_name));
  FlatTensors host_params(model.params()), stats(model.stats()), batch_stats(model.stats());
  model.init_params(host_params, stats, 1);
  const auto flat = [&](const ParamLayout& l) {
    return FlatTensors(l, backend->make_tensor(Dims{l.total()}, Layout::kPlain));
  };
  FlatTensors params = flat(model.params()), grads = flat(model.params());
  backend->upload(host_params.span(), params.flat());
  const bool t2t = model.spec().kind == BlockKind::kPreActivation;
  Sgd sgd(model.params(), SgdConfig{0.9f, 1e-4f, t2t}, *backend);
  Network net(model, *backend, batch);
  Rng rng(2);
  // Two batches, alternating, as a loader hands them out.
  std::array<Tensor, 2> images{Tensor(Dims{batch, 3, 32, 32}), Tensor(Dims{batch, 3, 32, 32})};
  for (auto& im : images)
    for (auto& v : im.span()) v = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(10));
  const bool ahead = overlap == "on";
  int next = 0;
  Network::StagedImages staged = net.stage_images(images[0]);
  const auto stage_next = [&] {
    next ^= 1;
    staged = net.stage_images(images[static_cast<std::size_t>(next)]);
  };

  auto step = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    if (ahead) {
      const Network::StagedImages now = staged;
      net.train_step(now, labels, params, grads, batch_stats, stage_next);
    } else {
      next ^= 1;
      net.train_step(images[static_cast<std::size_t>(next)], labels, params, grads, batch_stats);
    }
    model.update_running_stats(stats, batch_stats, net.bn_counts());
    sgd.step(*backend, params, grads, 0.1f);
    backend->synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < warmup; ++i) step();

  if (serve) {
    std::cerr << nlohmann::json{{"event", "ready"}}.dump() << std::endl;
    std::string cmd;
    while (std::cin >> cmd) {
      if (cmd == "QUIT") break;
      int k = 0;
      std::cin >> k;
      std::vector<double> ips;
      for (int i = 0; i < k; ++i) ips.push_back(batch / step());
      std::cout << nlohmann::json{{"images_per_second_each", ips}}.dump() << std::endl;
    }
    return 0;
  }
  std::vector<double> ips;
  for (int i = 0; i < steps; ++i) {
    const double t = step();
    ips.push_back(batch / t);
    std::cout << nlohmann::json{{"step", i}, {"seconds", t}, {"images_per_second", batch / t}}.dump() << '\n';
  }
  std::sort(ips.begin(), ips.end());
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::cout << nlohmann::json{{"event", "summary"}, {"model", model_name}, {"batch", batch},
                              {"backend", backend->name()}, {"overlap", overlap},
                              {"threads", threads}, {"median_images_per_second", ips[ips.size() / 2]},
                              {"peak_rss_mib", double(ru.ru_maxrss) / 1024.0}}
                   .dump()
            << std::endl;
  return 0;
}
