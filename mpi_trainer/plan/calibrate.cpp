#include "plan/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <vector>

#include "app/device.hpp"
#include "app/run_setup.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "ps/exchange/update_policy.hpp"

namespace mt {

namespace {

struct Spread {
  double mean = 0, cv = 0;
};

Spread spread(const std::vector<double>& v) {
  Spread s;
  for (double x : v)
    s.mean += x;
  s.mean /= double(v.size());
  double var = 0;
  for (double x : v)
    var += (x - s.mean) * (x - s.mean);
  s.cv = v.size() > 1 && s.mean > 0 ? std::sqrt(var / double(v.size() - 1)) / s.mean : 0;
  return s;
}

}  // namespace

int calibrate_command(const CalibrateConfig& c, std::ostream& out) {
  if (c.steps < 2) throw UsageError("--steps must be 2 or more");
  if (c.warmup < 0) throw UsageError("--warmup must be 0 or more");
  if (c.updates < 1) throw UsageError("--updates must be 1 or more");
  if (c.batch_size < 1 || c.batch_size > 65536) throw UsageError("--batch-size must be within 1..65536");
  if (!c.name.empty() && (c.name.find_first_of(" \t,#") != std::string::npos))
    throw UsageError("--name '" + c.name + "': a device name has no spaces, commas or '#'");
  const ResolvedDevice device = resolve_device(c.device);
  const int threads = c.threads > 0 ? c.threads : usable_cores();
  const Model model(parse_model(c.model));
  auto backend = make_backend(device, threads);
  Network net(model, *backend, static_cast<int>(c.batch_size));
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()), batch_stats(model.stats());
  model.init_params(params, stats, 1);
  // Random images and labels: the step's cost does not depend on what they show.
  Rng rng(7);
  Tensor images(Dims{c.batch_size, 3, 32, 32});
  for (float& x : images.span())
    x = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(static_cast<std::size_t>(c.batch_size));
  for (auto& l : labels)
    l = static_cast<std::int32_t>(rng.below(10));
  out << "calibrate: " << model.spec().name << " (" << model.param_count() << " parameters), batch " << c.batch_size
      << ", " << device.name << " (" << threads << " thread(s)): " << c.warmup << " warm-up and " << c.steps
      << " timed steps, " << c.updates << " parameter-server updates\n"
      << std::flush;
  std::vector<double> steps;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    const auto t0 = Clock::now();
    net.train_step(images, labels, params, grads, batch_stats);
    if (i >= c.warmup) steps.push_back(since(t0));
  }
  const Spread step = spread(steps);
  // The parameter server's work per update under the default policy (dana + gap): the gap-aware
  // penalty, the SGD update with momentum, the penalty's running mean; on host memory, one thread
  // (a shard's update loop).
  auto host = make_host_backend(ResolvedDevice{"cpu", ""}, 1);
  Sgd sgd(model.params(), SgdConfig{0.9f, 1e-4f, true});
  std::vector<float> mean_step(params.span().size(), 0.f);
  GapPenalty gap(mean_step);
  FlatTensors pulled(model.params()), before(model.params());
  std::copy(params.span().begin(), params.span().end(), pulled.span().begin());
  for (float& g : grads.span())
    g = static_cast<float>(rng.normal()) * 1e-3f;
  std::vector<double> updates;
  for (int i = 0; i < c.updates; ++i) {
    const auto t0 = Clock::now();
    gap.penalize(grads.span(), params.span(), pulled.span(), 3.0);
    std::copy(params.span().begin(), params.span().end(), before.span().begin());
    sgd.step(*host, params, grads, 0.01f, 0.9f);
    gap.track(before.span(), params.span());
    updates.push_back(since(t0));
  }
  std::sort(updates.begin(), updates.end());
  const double update = updates[updates.size() / 2];  // the median: a page fault is not the PS
  const std::string name = c.name.empty() ? device.name : c.name;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::ostringstream table;
  table << std::setprecision(4) << "# mpi_trainer calibrate, " << date << ": " << model.spec().name << ", batch "
        << c.batch_size << ", " << device.name << " with " << threads << " thread(s); " << c.steps
        << " timed steps. A device table (NAME STEP_SECONDS JITTER_CV) for\n"
        << "# `mpi_trainer plan --devices FILE --worker-types " << name << "` (with a price for '" << name
        << "': --prices, or --name one of Table II's types) and `train --emulate-device FILE`.\n"
        << name << ' ' << step.mean << ' ' << step.cv << '\n'
        << "# The parameter server's time per update (gap-aware penalty and SGD with momentum, one thread): " << update
        << " s; plan and virtual runs take it as --ps-update-seconds " << update << '\n';
  out << "  step " << std::setprecision(4) << step.mean << " s (coefficient of variation " << step.cv << ", "
      << std::setprecision(1) << std::fixed << double(c.batch_size) / step.mean << " img/s); parameter-server update "
      << std::setprecision(6) << std::defaultfloat << update << " s (" << std::fixed << std::setprecision(0)
      << 1.0 / update << " updates/s on one shard)\n"
      << std::defaultfloat;
  if (!c.out.empty()) {
    std::ofstream f(c.out);
    if (!f || !(f << table.str()) || !(f.flush()))
      throw DataError("--out " + c.out + ": cannot write the device table");
    out << "  wrote " << c.out << ": mpi_trainer plan --devices " << c.out << " --worker-types " << name
        << " --ps-update-seconds " << std::setprecision(6) << update << " ...\n";
  } else {
    out << table.str();
  }
  return 0;
}

}  // namespace mt
