// The validated run setup every kind of run shares (app/run_setup.hpp): recipe flags, device,
// data and loader options; and test-set evaluation.
#include "app/run_setup.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "app/checkpointing.hpp"
#include "plan/cost.hpp"
#include "app/device.hpp"
#include "app/emulation.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "nn/resnet.hpp"
#include "optim/schedule.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

namespace {

bool on_off(const std::string& flag, const std::string& value, bool dflt) {
  if (value == "default") return dflt;
  if (value == "on") return true;
  if (value == "off") return false;
  throw UsageError(flag + " must be on, off or default, not '" + value + "'");
}


}  // namespace

Normalization parse_normalization(const std::string& value, bool t2t) {
  if (value == "default") return t2t ? Normalization::kPerImage : Normalization::kChannelStats;
  if (value == "channel") return Normalization::kChannelStats;
  if (value == "per-image") return Normalization::kPerImage;
  if (value == "none") return Normalization::kNone;
  throw UsageError("--normalize must be channel, per-image, none or default, not '" + value + "'");
}

// The whole test set through the training network in inference mode; a short last batch is
// padded (BN uses running statistics, so rows do not interact) and its padding ignored.
EvalResult evaluate_test_set(Network& net, const Dataset& test, const LoaderOptions& opts,
                    const FlatTensors& params, const FlatTensors& stats) {
  Batch batch;
  std::int64_t correct = 0;
  double loss = 0;
  const int b = net.batch();
  for (std::int64_t start = 0; start < test.count; start += b) {
    const auto count = std::min<std::int64_t>(b, test.count - start);
    fill_eval_batch(test, opts, start, count, batch);
    if (batch.images.dim(0) != b) {
      // Pad to the network's batch size.
      Tensor padded(Dims{b, 3, 32, 32});
      std::copy_n(batch.images.data(), batch.images.storage_size(), padded.data());
      batch.images = std::move(padded);
      batch.labels.resize(static_cast<std::size_t>(b), 0);
    }
    const auto st = net.evaluate(batch.images, batch.labels, static_cast<int>(count), params, stats);
    correct += st.correct;
    loss += st.loss;
  }
  return {double(correct) / double(test.count), loss / double(test.count)};
}

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// The warning for --threads above the cores this process may use: who pinned it, and how to
// lift the pin (mpirun binds each rank to one core when it starts 2 processes or fewer).
std::string threads_warning(int threads, int cores) {
  std::string cure;
  if (cores >= static_cast<int>(std::thread::hardware_concurrency()))
    cure = "this machine has " + std::to_string(cores) + " core(s)";
  else if (std::getenv("SLURM_JOB_ID"))
    cure = "Slurm gave this task " + std::to_string(cores) +
           " core(s): ask for more with --cpus-per-task (slurm/README.md)";
  else if (launcher_world_size() > 1)
    cure = "mpirun pinned this rank (Open MPI binds each rank to one core when it starts 2 processes or fewer): "
           "start the job with `mpirun --bind-to none`, or with launch/mpirun.sh, which does";
  else
    cure = "the process's CPU affinity allows no more (taskset, cgroups)";
  return "mpi_trainer: warning: --threads " + std::to_string(threads) + " is more than the " + std::to_string(cores) +
         " core(s) this process may use: using " + std::to_string(cores) + "; " + cure + '\n';
}

}  // namespace

// "k80,k80,p100" -> one type per worker; a single type applies to every worker. Every type must
// be priced.
std::vector<std::string> worker_types(const TrainConfig& cfg, const PriceTable& prices, int workers) {
  std::vector<std::string> types;
  if (cfg.worker_types.empty()) {
    types.assign(static_cast<std::size_t>(workers), cfg.instance_type);
  } else {
    std::stringstream ss(cfg.worker_types);
    for (std::string t; std::getline(ss, t, ',');)
      types.push_back(t);
    if (types.size() == 1) types.assign(static_cast<std::size_t>(workers), types[0]);
    if (static_cast<int>(types.size()) != workers)
      throw UsageError("--worker-types lists " + std::to_string(types.size()) + " types for " +
                       std::to_string(workers) + " workers; give one per worker, in rank order");
  }
  const bool transient = cfg.pricing == "transient";
  for (const auto& t : types)
    prices.per_hour(t, transient);
  prices.per_hour(cfg.ps_type, cfg.ps_pricing == "transient");
  if (cfg.max_workers > 0) prices.per_hour(cfg.instance_type, transient);  // joined workers are billed at it
  return types;
}

RateStability rate_stability(const TrainConfig& cfg, int workers) {
  // 50 steps a worker, at most a tenth of the run: a short run is not all warm-up.
  const std::int64_t start = std::min(50 * std::int64_t{workers}, cfg.train_steps / 10);
  return {cfg.lr_warmup_steps < 0 && workers > 1 ? start : 0, cfg.spike_guard == "on"};
}

std::vector<std::string> combination_warnings(const TrainConfig& cfg, const std::string& device) {
  std::vector<std::string> out;
  const bool emulated = !cfg.emulate_device.empty() && cfg.emulate_device != "off";
  std::vector<std::string> types;  // --worker-types when given, else --instance-type
  std::stringstream list(cfg.worker_types.empty() ? cfg.instance_type : cfg.worker_types);
  for (std::string t; std::getline(list, t, ',');)
    types.push_back(t);
  const auto gpu =
      std::find_if(types.begin(), types.end(), [](const std::string& t) { return t != "ps" && t != "cpu"; });
  if (device == "cpu" && !emulated && cfg.virtual_workers == 0 && gpu != types.end())
    out.push_back("warning: this run trains on the CPU but bills its time as " + *gpu +
                  " (--instance-type/--worker-types): the cost is what that GPU server would cost for "
                  "this run's time, at this machine's pace (--emulate-device " +
                  *gpu + " trains at its pace)");
  // The live prediction's revocation odds: --revocation-model, else Compute Engine's for transient workers.
  const std::string model = !cfg.revocation_model.empty() ? cfg.revocation_model
                            : cfg.pricing == "transient"  ? "gce"
                                                          : "";
  if (model.rfind("gce", 0) == 0 && (cfg.prices == "aws" || cfg.prices == "azure"))
    out.push_back("warning: --prices " + cfg.prices + " with Compute Engine's revocation odds (" + model +
                  (cfg.revocation_model.empty() ? ", transient pricing's default" : "") +
                  "): the predicted cost mixes two clouds" +
                  (cfg.prices == "aws" ? "; --revocation-model aws-v100 or aws-advisor gives AWS's" : ""));
  return out;
}

RunSetup prepare_run(const TrainConfig& cfg) {
  // Checkpoint flags do nothing without a directory: say so instead of silently training unsaved.
  if (cfg.ckpt_dir.empty()) {
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--ckpt-every-steps", cfg.ckpt_every_steps > 0},
                                      {"--ckpt-every-seconds", cfg.ckpt_every_seconds > 0},
                                      {"--ckpt-keep", cfg.ckpt_keep != TrainConfig{}.ckpt_keep},
                                      {"--ckpt-fail", cfg.ckpt_fail != TrainConfig{}.ckpt_fail},
                                      {"--ckpt-sync", cfg.ckpt_sync != TrainConfig{}.ckpt_sync},
                                      {"--ps-standby", cfg.ps_standby > 0}})
      if (given)
        throw UsageError(std::string(flag) + " needs --ckpt-dir (the directory the checkpoints go to); without it "
                                             "nothing is saved");
  }
  RunSetup r;
  r.spec = parse_model(cfg.model);
  r.t2t = r.spec.kind == BlockKind::kPreActivation;
  r.schedule = parse_schedule(cfg.lr_schedule, r.t2t, cfg.lr, cfg.lr_warmup_steps, cfg.train_steps);
  r.nesterov = on_off("--nesterov", cfg.nesterov, r.t2t);
  r.augment = on_off("--augment", cfg.augment, true);
  r.transient = cfg.pricing == "transient";
  if (!r.transient && cfg.pricing != "on-demand")
    throw UsageError("--pricing must be on-demand or transient, not '" + cfg.pricing + "'");
  r.ps_transient = cfg.ps_pricing == "transient";
  if (!r.ps_transient && cfg.ps_pricing != "on-demand")
    throw UsageError("--ps-pricing must be on-demand or transient, not '" + cfg.ps_pricing + "'");
  // Prices and instance types are checked before any work.
  r.prices = PriceTable::load(cfg.prices);
  if (cfg.worker_types.empty()) r.prices.per_hour(cfg.instance_type, r.transient);  // else checked per worker
  r.device = resolve_device(cfg.device);
  const int cores = usable_cores();
  r.threads = cfg.threads > 0 ? cfg.threads : cores;
  if (r.threads > cores) {
    // More threads than cores only makes OpenMP's barriers wait on each other. Said once per
    // process (a run prepares once), with the cause and the cure.
    std::cerr << threads_warning(r.threads, cores) << std::flush;
    r.threads = cores;
  }
  // Settings that cannot matter, said once, by the first process that trains: the first worker of
  // a parameter-server job (the parameter server's own node may have no GPU where the workers'
  // do), else the only process.
  if (launcher_world_size() > 1 ? launcher_rank() == cfg.num_ps : launcher_rank() <= 0) {
    auto warnings = schedule_warnings(cfg.lr_schedule, r.schedule, cfg.train_steps, cfg.lr_warmup_steps >= 0);
    for (auto& w : combination_warnings(cfg, r.device.name))
      warnings.push_back(std::move(w));
    for (const auto& w : warnings)
      std::cerr << "mpi_trainer: " << w << '\n';
  }
  r.data_dir = cfg.data.empty() ? default_data_dir().string() : cfg.data;
  r.data = load_dataset(r.data_dir);
  r.loader.batch_size = cfg.batch_size;
  r.loader.augment = r.augment;
  r.loader.normalization = parse_normalization(cfg.normalize, r.t2t);
  r.loader.stats = compute_channel_stats(r.data.train);
  r.loader.seed = cfg.seed;
  parse_resume_override(cfg.resume_override);  // a bad field name is a usage error before any work
  r.job.data = dataset_identity(r.data);
  r.job.batch_size = cfg.batch_size;
  r.job.lr_schedule = r.schedule.identity();
  r.job.input_normalization = normalization_name(r.loader.normalization);
  if (r.loader.normalization == Normalization::kChannelStats) {
    r.job.input_mean = r.loader.stats.mean;
    r.job.input_std = r.loader.stats.std;
  }
  r.job.label_names = label_names(r.data.format);
  if (r.data.train.count < cfg.batch_size)
    throw DataError(r.data_dir + ": " + std::to_string(r.data.train.count) +
                    " training images is fewer than one batch of " + std::to_string(cfg.batch_size));
  return r;
}

}  // namespace mt
