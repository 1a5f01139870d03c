// What the single-process trainer and the distributed roles share: the validated run setup
// (recipe, device, data, loader options) and test-set evaluation.
#pragma once

#include <string>
#include <vector>

#include "app/checkpointing.hpp"
#include "app/config.hpp"
#include "plan/cost.hpp"
#include "app/device.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "nn/resnet.hpp"
#include "optim/schedule.hpp"
#include "ps/ps.hpp"

namespace mt {

struct RunSetup {
  ModelSpec spec;
  bool t2t = false;
  LrSchedule schedule;
  bool nesterov = false;
  bool augment = true;
  bool transient = false;     // --pricing: the workers'
  bool ps_transient = false;  // --ps-pricing
  ResolvedDevice device;
  int threads = 1;
  std::string data_dir;
  DataSplit data;
  LoaderOptions loader;
  PriceTable prices;
  JobIdentity job;  // what checkpoints record and a resume checks
};

// --normalize: channel | per-image | none | default (per-image for the T2T models, channel
// statistics for the others). Throws UsageError.
Normalization parse_normalization(const std::string& value, bool t2t);

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();

// Validates the recipe flags and loads the data. Throws UsageError / DataError.
// What keeps a run of `workers` (data slots) stable: --spike-guard, and when --lr-warmup-steps is
// left at -1 and several workers train asynchronously, a start-up warm-up of 50 global steps per
// worker, at most a tenth of --train-steps (docs/user-guide.md, "Defaults that learn"). A function of the global step, so a resume
// continues it where it was.
RateStability rate_stability(const TrainConfig& cfg, int workers);

// One line each, starting "warning: ", for combinations that mislead without an error: a CPU run
// billed as a GPU server (no --emulate-device), AWS or Azure prices with Compute Engine's
// revocation odds. `device`: the resolved one (cpu or cuda).
std::vector<std::string> combination_warnings(const TrainConfig& cfg, const std::string& device);

RunSetup prepare_run(const TrainConfig& cfg);

// "k80,k80,p100" -> one instance type per worker (a single type: every worker; none:
// --instance-type); every type and --ps-type must be priced. Throws UsageError.
std::vector<std::string> worker_types(const TrainConfig& cfg, const PriceTable& prices, int workers);

struct EvalResult {
  double accuracy = 0, loss = 0;
};

// The whole test set through `net` in inference mode (running statistics).
EvalResult evaluate_test_set(Network& net, const Dataset& test, const LoaderOptions& opts,
                             const FlatTensors& params, const FlatTensors& stats);

}  // namespace mt
