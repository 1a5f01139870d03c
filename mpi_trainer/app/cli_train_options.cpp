#include "app/cli_train_options.hpp"

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "app/cli_help.hpp"
#include "app/emulation.hpp"
#include "ps/ps.hpp"
#include "data/dataset.hpp"
#include "nn/resnet.hpp"

namespace mt::cli {

namespace {

// CLI11's PositiveNumber and NonNegativeNumber say "Value 0 not in range 0.000000 to 17976931...";
// these say what is wrong.
std::string number_check(const std::string& s, bool allow_zero) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || *end != '\0') return "'" + s + "' is not a number";
  if (allow_zero ? v >= 0 : v > 0) return {};
  return std::string(allow_zero ? "must be 0 or more" : "must be greater than 0") + ", not " + s;
}

// A count of steps: a whole number from 1 (or 0) to kMaxSteps. Beyond it a run cannot mean it (at a
// step a microsecond, 10^12 steps take 11 days), and a 64-bit count would overflow the estimates
// that multiply it.
constexpr double kMaxSteps = 1e12;
std::string steps_check(const std::string& s, bool allow_zero) {
  if (std::string why = number_check(s, allow_zero); !why.empty()) return why;
  const double v = std::strtod(s.c_str(), nullptr);
  if (v != std::floor(v)) return "must be a whole number of steps, not " + s;
  if (v > kMaxSteps) return "must be at most 1000000000000 (10^12) steps, not " + s;
  return {};
}

// The command line's tokens, and the options whose value comes from their environment variable
// (flag -> variable), for the messages about them.
std::vector<std::string> g_args;
std::map<std::string, std::string> g_from_env;

}  // namespace

const CLI::Validator kPositive([](std::string& s) { return number_check(s, false); }, "POSITIVE", "POSITIVE");
const CLI::Validator kNonNegative([](std::string& s) { return number_check(s, true); }, "NONNEGATIVE", "NONNEGATIVE");
const CLI::Validator kSteps([](std::string& s) { return steps_check(s, false); }, "STEPS", "STEPS");
const CLI::Validator kStepsOrZero([](std::string& s) { return steps_check(s, true); }, "STEPS", "STEPS");

// Every train flag reads an environment default MT_<FLAG>, unless the flag is on the command line:
// then the variable is not read at all (an invalid value there is no error).
void env_default(CLI::Option* o, const char* name) {
  for (const auto& l : o->get_lnames()) {
    const std::string flag = "--" + l;
    for (const auto& a : g_args)
      if (a == flag || a.rfind(flag + "=", 0) == 0) return;
  }
  o->envname(name);
  if (std::getenv(name) && !o->get_lnames().empty()) g_from_env["--" + o->get_lnames().front()] = name;
}

void begin_parse(int argc, char** argv) {
  g_args.assign(argv + 1, argv + argc);
  g_from_env.clear();
}

// A parse error about a value that came from the environment names the variable.
std::string name_the_variable(std::string what) {
  for (const auto& [flag, var] : g_from_env)
    if (what.rfind(flag + ":", 0) == 0) return var + " (the environment default of " + flag + ")" + what.substr(flag.size());
  return what;
}

// A flat list of flag declarations, one statement per flag in --help's order (its groups are
// the help's sections): longer than a function should be, but read in order, not held whole.
void add_train_options(CLI::App& cmd, TrainConfig& c) {
  const auto env = env_default;
  env(cmd.add_option("--data", c.data,
                     "Data directory: CIFAR-10 binary (data_batch_1..5.bin, test_batch.bin) or "
                     "Fashion-MNIST IDX (*-idx3-ubyte[.gz]). Default: $MT_CIFAR10_DIR if set, "
                     "else /usr/share/datasets/fashion-mnist"),
      "MT_DATA");
  env(cmd.add_option("--model", c.model, "Model: " + model_choices())->capture_default_str(),
      "MT_MODEL");
  env(cmd.add_option("--train-steps", c.train_steps, "Global steps (batches) to train")
          ->capture_default_str()
          ->check(kSteps),
      "MT_TRAIN_STEPS");
  env(cmd.add_option("--batch-size", c.batch_size, "Images per step")
          ->capture_default_str()
          ->check(CLI::Range(1, 65536)),
      "MT_BATCH_SIZE");
  env(cmd.add_option("--num-ps", c.num_ps,
                     "Parameter-server shards when launched as several MPI processes: ranks "
                     "0..N-1 serve parameters, the others are workers")
          ->capture_default_str()
          ->check(CLI::Range(1, 1024)),
      "MT_NUM_PS");
  env(cmd.add_option("--lr-scaling", c.lr_scaling,
                     "Parameter server: each gradient element is divided by its gap, how far its "
                     "parameter moved since the worker pulled it in units of that parameter's usual "
                     "step (gap: gap-aware, Barkai et al. 2020), or each update's rate by the update's "
                     "staleness + 1 (staleness: staleness-aware async SGD) or its square root "
                     "(sqrt-staleness), by the number of active workers (active-workers: the paper's "
                     "adaptive rate), or not at all (none). auto (default): gap under "
                     "--momentum-correction dana, none otherwise, the best measured pairs "
                     "(docs/user-guide.md)")
          ->capture_default_str()
          ->check(CLI::IsMember({"auto", "none", "active-workers", "staleness", "sqrt-staleness", "gap"})),
      "MT_LR_SCALING");
  env(cmd.add_option("--momentum-correction", c.momentum_correction,
                     "Parameter server: dana (default; Hakimi et al. 2019) gives each worker's data "
                     "slot its own Nesterov momentum buffer, so the parameters a worker is sent "
                     "already carry every worker's next momentum step; implicit lowers the momentum "
                     "applied with N active workers to max(0, momentum - (1 - 1/N)), since asynchrony "
                     "itself acts as momentum 1 - 1/N (Mitliagkas et al. 2016); none applies "
                     "--momentum as given (TensorFlow's behaviour; diverges with 4 or more workers "
                     "at momentum 0.9). dana with --lr-scaling gap was the best measured with "
                     "2 to 8 workers and steady with resnet32 (docs/user-guide.md)")
          ->capture_default_str()
          ->check(CLI::IsMember({"dana", "implicit", "none"})),
      "MT_MOMENTUM_CORRECTION");
  env(cmd.add_option("--join-warmup", c.join_warmup,
                     "Parameter server: for N global steps after a worker joins, the rate is "
                     "multiplied by a factor rising linearly from (workers before)/(workers after) "
                     "to 1, so the grown cluster's extra staleness comes in gradually (0: none)")
          ->capture_default_str()
          ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40)),
      "MT_JOIN_WARMUP");
  env(cmd.add_option("--max-staleness", c.max_staleness,
                     "Parameter server: drop a push computed on parameters more than N updates old "
                     "(the worker gets fresh parameters and tries again; -1: no bound)")
          ->capture_default_str()
          ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40)),
      "MT_MAX_STALENESS");
  env(cmd.add_option("--spike-guard", c.spike_guard,
                     "Parameter server: when the training loss jumps (its last few pushes above 1.5 "
                     "times and 0.2 above its usual level), cap the learning rate at half the rate it "
                     "jumped at; the cap doubles over about 700 pushes; each cap is logged and counted "
                     "(lr_cuts). Asynchronous "
                     "SGD at the synchronous rate blows up now and then without it (docs/user-guide.md)")
          ->capture_default_str()
          ->check(CLI::IsMember({"on", "off"})),
      "MT_SPIKE_GUARD");
  env(cmd.add_option("--max-loss", c.max_loss,
                     "A step whose training loss is not finite or above this has diverged: the run stops "
                     "with exit 3 before anything of that state is checkpointed (cross-entropy over 10 "
                     "classes starts near 2.3; 0: stop only on a non-finite loss)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber),
      "MT_MAX_LOSS");
  env(cmd.add_option("--push-norm-limit", c.push_norm_limit,
                     "Parameter server: reject a push whose gradient norm is above this many times the "
                     "median of the last 64 accepted (each shard judges its part; 0: off). A push with a "
                     "value that is not finite is always rejected. A rejected push is not applied, is "
                     "logged with its worker and counted (rejected_pushes)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber),
      "MT_PUSH_NORM_LIMIT");
  env(cmd.add_option("--max-rejected-pushes", c.max_rejected_pushes,
                     "Parameter server: a worker whose pushes are rejected this many times in a row is "
                     "stopped and dropped like a lost one; the run goes on (0: never)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber),
      "MT_MAX_REJECTED_PUSHES");
  env(cmd.add_option("--push-precision", c.push_precision,
                     "The values workers push and are sent: fp32, or bf16 (half the bytes each way; the "
                     "parameter server keeps and updates fp32 state, and under --lr-scaling gap measures "
                     "how far a parameter moved on its own fp32 values). Every worker and `join` must "
                     "give the job's (docs/user-guide.md, \"Train with a parameter server\")")
          ->capture_default_str()
          ->check(CLI::IsMember({"fp32", "bf16"})),
      "MT_PUSH_PRECISION");
  env(cmd.add_option("--device", c.device,
                     "cpu, cuda or auto (auto: a GPU when this build has the CUDA backend and the "
                     "runtime sees one). Each process takes GPU <node-local rank> mod <GPUs visible>, "
                     "so several workers may share one; cuda without a usable GPU exits 3")
          ->capture_default_str()
          ->check(CLI::IsMember({"cpu", "cuda", "auto"})),
      "MT_DEVICE");
  env(cmd.add_option("--threads", c.threads, "Compute threads (0: every core this process may use; under MPI, unpinned workers share their node's cores)")
          ->capture_default_str()
          ->check(CLI::Range(0, 4096)),
      "MT_THREADS");
  env(cmd.add_option("--seed", c.seed, "Seed for initialization, data order and augmentation")
          ->capture_default_str(),
      "MT_SEED");
  env(cmd.add_option("--lr-schedule", c.lr_schedule,
                     "default (the model's recipe), step[:B1,B2,..] (x0.1 at each boundary; "
                     "default at half and three quarters of --train-steps: 32000,48000 of 64000), "
                     "cosine[:DECAY_STEPS] (100-step warm-up; default 1.875 x --train-steps: "
                     "120000 of 64000), or constant. A resume with another --train-steps moves "
                     "the default boundaries with it")
          ->capture_default_str(),
      "MT_LR_SCHEDULE");
  env(cmd.add_option("--lr", c.lr, "Base learning rate (0: the schedule's own: 0.1 step, 0.4 cosine)")
          ->capture_default_str()
          ->check(kNonNegative),
      "MT_LR");
  env(cmd.add_option("--lr-warmup-steps", c.lr_warmup_steps,
                     "Linear warm-up of the learning rate over the first N global steps (-1: the "
                     "schedule's own, 100 for cosine and none otherwise, lengthened to 50 steps per "
                     "worker when several workers train asynchronously)")
          ->capture_default_str()
          ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40)),
      "MT_LR_WARMUP_STEPS");
  c.momentum_auto = true;  // the command line's default: auto
  env(cmd.add_option_function<std::string>(
             "--momentum",
             [&c](const std::string& v) {
               c.momentum_auto = v == "auto";
               if (!c.momentum_auto) c.momentum = std::stod(v);  // the check has made it a number in [0, 1]
             },
             "SGD momentum, 0 to 1, or auto: 0.9, and on the parameter server under the default policy "
             "(--momentum-correction dana, --lr-scaling gap) raised with more than 4 active workers to "
             "1 - 0.4/N, at most 0.95 (8 workers and more), the best measured with 8 workers; a number is "
             "applied as given (docs/user-guide.md)")
          ->default_str("auto")
          ->check(CLI::Validator(
              [](std::string& v) {
                if (v == "auto") return std::string();
                char* end = nullptr;
                const double m = std::strtod(v.c_str(), &end);
                if (v.empty() || end == v.c_str() || *end != '\0') return "must be auto or a number, not '" + v + "'";
                return m >= 0 && m <= 1 ? std::string() : "must be between 0 and 1, not " + v;
              },
              "auto|[0 - 1]")),
      "MT_MOMENTUM");
  env(cmd.add_option("--weight-decay", c.weight_decay, "L2 weight decay")
          ->capture_default_str()
          ->check(kNonNegative),
      "MT_WEIGHT_DECAY");
  env(cmd.add_option("--nesterov", c.nesterov, "Nesterov momentum: on, off, default (on for -t2t)")
          ->capture_default_str()
          ->check(CLI::IsMember({"on", "off", "default"})),
      "MT_NESTEROV");
  env(cmd.add_option("--augment", c.augment,
                     "Pad-4 random crop + horizontal flip: on, off, default (on)")
          ->capture_default_str()
          ->check(CLI::IsMember({"on", "off", "default"})),
      "MT_AUGMENT");
  env(cmd.add_option("--normalize", c.normalize,
                     "Input normalization: channel (training-set mean/std), per-image "
                     "(standardization), none, default (per-image for -t2t, else channel)")
          ->capture_default_str()
          ->check(CLI::IsMember({"channel", "per-image", "none", "default"})),
      "MT_NORMALIZE");
  env(cmd.add_option("--metrics", c.metrics,
                     "Append JSON Lines metrics to this file; the last line is the summary"),
      "MT_METRICS");
  env(cmd.add_option("--tensorboard", c.tensorboard,
                     "Also write the metrics' scalars (loss, accuracy, lr, throughput, staleness, active "
                     "workers, cost; per worker) as TensorBoard event files into this directory, as the "
                     "run goes (a resumed run adds a file: TensorBoard shows one run); watch with "
                     "'tensorboard --logdir DIR'"),
      "MT_TENSORBOARD");
  env(cmd.add_option("--eval-every-steps", c.eval_every_steps,
                     "Evaluate on the test set every N steps (0: only at the end)")
          ->capture_default_str()
          ->check(kStepsOrZero),
      "MT_EVAL_EVERY_STEPS");
  env(cmd.add_option("--log-every-steps", c.log_every_steps, "Progress line every N steps")
          ->capture_default_str()
          ->check(kSteps),
      "MT_LOG_EVERY_STEPS");
  env(cmd.add_option("--instance-type", c.instance_type,
                     "Instance type billed for each worker (or the single process, or a worker that "
                     "joins with `join`): a type of the price table (Table II: k80, p100, v100, ps)")
          ->capture_default_str(),
      "MT_INSTANCE_TYPE");
  env(cmd.add_option("--worker-types", c.worker_types,
                     "Parameter server: one instance type per worker, comma-separated in rank "
                     "order (e.g. k80,k80,p100,v100); default: --instance-type for all"),
      "MT_WORKER_TYPES");
  env(cmd.add_option("--ps-type", c.ps_type, "Parameter server: instance type billed for each shard")
          ->capture_default_str(),
      "MT_PS_TYPE");
  env(cmd.add_option("--prices", c.prices,
                     "Price table file replacing the paper's Table II: lines 'TYPE ON_DEMAND "
                     "TRANSIENT' in $/hour, '#' comments (see docs/user-guide.md)"),
      "MT_PRICES");
  env(cmd.add_option("--emulate-device", c.emulate_device,
                     "Emulate a device's speed (real compute, MPI and kills; each step padded to the "
                     "device's step time): a device of the shipped table (k80, p100, v100; "
                     "'mpi_trainer devices' lists them with their sources) for every worker, "
                     "'worker-types' for each worker's --worker-types entry, or a table FILE of your "
                     "own ('NAME STEP_SECONDS [JITTER_CV]' lines), looked up by worker type; off by default"),
      "MT_EMULATE_DEVICE");
  env(cmd.add_option("--emulate-scale", c.emulate_scale,
                     "Multiply emulated step times by this (the table's are ResNet-32 at batch 128)")
          ->capture_default_str()
          ->check(kPositive),
      "MT_EMULATE_SCALE");
  env(cmd.add_option("--push-log", c.push_log,
                     "Parameter server and virtual runs: the run's history, a CSV line per push that made a "
                     "global step (step,rank,pulled,staleness,seconds,slot,push_id,epoch,kind), each parameter "
                     "server's start and published checkpoints, and each worker's acknowledged pushes in FILE.acks/; "
                     "checked by bench/faults/history_check.py"),
      "MT_PUSH_LOG");
  env(cmd.add_option("--virtual-workers", c.virtual_workers,
                     "Virtual-clock run in this one process: N logical workers against an in-process "
                     "parameter server, real gradients on real data, step times from --emulate-device "
                     "(default: each worker's --worker-types entry), links and updates timed on a "
                     "virtual clock; what N workers would do, without a cluster (docs/user-guide.md)")
          ->check(CLI::Range(1, 4096)),
      "MT_VIRTUAL_WORKERS");
  env(cmd.add_option("--worker-links", c.worker_links,
                     "Virtual runs: each worker's link to the parameter server, LATENCY_MS/GBIT_PER_S, one "
                     "for all or one per worker (default 0.1/10: one cloud zone)"),
      "MT_WORKER_LINKS");
  env(cmd.add_option("--ps-link", c.ps_link, "Virtual runs: " + std::string(kPsLinkHelp)), "MT_PS_LINK");
  env(cmd.add_option("--virtual-joins", c.virtual_joins,
                     "Virtual runs: workers that join later, TYPE@step=N or TYPE@TIME (s, m, h), "
                     "comma-separated (e.g. k80@step=16000,k80@step=32000)"),
      "MT_VIRTUAL_JOINS");
  env(cmd.add_option("--ps-update-seconds", c.ps_update_seconds,
                     "Virtual runs: the parameter server's time per update (default: 0.11 ms per ResNet-32 "
                     "update, measured, in proportion to the model's parameters)")
          ->check(kNonNegative),
      "MT_PS_UPDATE_SECONDS");
  env(cmd.add_option("--pricing", c.pricing, "The workers' (or a single process's) prices: on-demand or transient")
          ->capture_default_str()
          ->check(CLI::IsMember({"on-demand", "transient"})),
      "MT_PRICING");
  env(cmd.add_option("--ps-pricing", c.ps_pricing,
                     "The parameter-server shards' prices: on-demand (the paper's setup: a revoked PS stops the job) "
                     "or transient")
          ->capture_default_str()
          ->check(CLI::IsMember({"on-demand", "transient"})),
      "MT_PS_PRICING");
  env(cmd.add_option("--ckpt-dir", c.ckpt_dir,
                     "Write HDF5 checkpoints here (atomically; LATEST names the newest) and "
                     "resume from here"),
      "MT_CKPT_DIR");
  env(cmd.add_option("--ckpt-every-steps", c.ckpt_every_steps,
                     "Checkpoint every N global steps (0: only at the end)")
          ->capture_default_str()
          ->check(kStepsOrZero),
      "MT_CKPT_EVERY_STEPS");
  env(cmd.add_option("--ckpt-every-seconds", c.ckpt_every_seconds,
                     "Checkpoint every S seconds of wall time (0: off)")
          ->capture_default_str()
          ->check(kNonNegative),
      "MT_CKPT_EVERY_SECONDS");
  env(cmd.add_option("--ckpt-keep", c.ckpt_keep, "Checkpoints kept, newest first (0: all)")
          ->capture_default_str()
          ->check(CLI::Range(0, 1000000)),
      "MT_CKPT_KEEP");
  env(cmd.add_option("--ckpt-fail", c.ckpt_fail,
                     "When writing a checkpoint fails (disk full, I/O error): continue training and try "
                     "again at the next interval, the previous checkpoints untouched, and exit 4 at the "
                     "end (continue); or stop at once with exit 4 (stop)")
          ->capture_default_str()
          ->check(CLI::IsMember({"continue", "stop"})),
      "MT_CKPT_FAIL");
  env(cmd.add_option("--ckpt-sync", c.ckpt_sync,
                     "Whether training waits until each checkpoint is durable (a pause of the write's time, "
                     "~10 ms for a resnet32 checkpoint on a local SSD), so that a lost process loses at most one "
                     "checkpoint interval: on (always; workers take a parameter server silent past "
                     "--failure-timeout as lost, so keep the write well under it), off (the write overlaps "
                     "training: a loss in the middle of a write also loses the steps trained meanwhile), or auto "
                     "(waits up to a quarter of --failure-timeout, at most 1 s, then lets the write overlap). "
                     "--ckpt-sync alone: on")
          ->capture_default_str()
          ->expected(0, 1)
          ->default_str("auto")
          ->check(CLI::Validator(
              [](std::string& v) {
                return v.empty() || v == "on" || v == "off" || v == "auto" ? std::string()
                                                                            : "must be on, off or auto, not '" + v + "'";
              },
              "on|off|auto")),
      "MT_CKPT_SYNC");
  env(cmd.add_option("--resume", c.resume,
                     "auto: continue from the newest valid checkpoint in --ckpt-dir (falling back "
                     "past damaged ones) if there is one; never: start fresh; PATH: from that file")
          ->capture_default_str(),
      "MT_RESUME");
  env(cmd.add_option("--resume-override", c.resume_override,
                     "A resume checks that the checkpoint is of this job: the same data (format, sizes, "
                     "fingerprint), --batch-size and learning-rate schedule, and stops with exit 4 naming "
                     "the field that differs. FIELDS (comma-separated: data, batch_size, lr_schedule) are "
                     "accepted when they differ, with a warning")
          ->type_name("FIELDS"),
      "MT_RESUME_OVERRIDE");
  env(cmd.add_option("--failure-timeout", c.failure_timeout,
                     "Fault tolerance: a worker silent this long (no push, no heartbeat; workers send "
                     "one every timeout/5 s) is dropped as revoked, and a worker whose parameter server "
                     "does not answer this long exits 10")
          ->capture_default_str()
          ->check(CLI::Range(0.05, 3600.0)),
      "MT_FAILURE_TIMEOUT");
  env(cmd.add_option("--drain-deadline", c.drain_deadline,
                     "Fault tolerance: after SIGTERM or SIGUSR1 a worker finishes its step, pushes it "
                     "and leaves (exit 0), or abandons the step and leaves at this deadline; a "
                     "parameter server waits this long at most for its workers before exiting 75")
          ->capture_default_str()
          ->check(CLI::Range(0.0, 3600.0)),
      "MT_DRAIN_DEADLINE");
  env(cmd.add_option("--ps-standby", c.ps_standby,
                     "Fault tolerance: workers that keep a replica of the parameter server in host "
                     "memory (the lowest-ranked live ones; each shard streams its state to them every "
                     "--replica-interval updates). When the parameter server is lost, a standby writes "
                     "its replica as a checkpoint before exiting 10, so the restart resumes from it "
                     "instead of the last periodic checkpoint (needs --ckpt-dir); under ULFM it takes the lost "
                     "parameter server (or one lost shard) over inside the job instead. -1 (default): 1 when "
                     "there are 2 or more workers and a --ckpt-dir, else 0")
          ->capture_default_str()
          ->check(CLI::Range(-1, 64)),
      "MT_PS_STANDBY");
  env(cmd.add_option("--replica-interval", c.replica_interval,
                     "Fault tolerance: updates between two replicas a shard sends its standbys, at "
                     "least (a replica still in flight is not overtaken: the next one waits). Each goes "
                     "in slices of 60 KB, a few after each update over the interval and never more bytes "
                     "than the update's reply, so that replicas take at most half the shard's link (a larger "
                     "one is spread further): a parameter server's loss with a standby costs up to about "
                     "2 x this - 2 updates (plan prints the bound), more where the shard's link is full "
                     "(the replicas then space out: the summary's ps_standby says how far)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000000)),
      "MT_REPLICA_INTERVAL");
  env(cmd.add_option("--push-journal", c.push_journal,
                     "Fault tolerance, ULFM build, standbys: each worker keeps its pushes (gradient and "
                     "the parameters it was computed on) until every shard reports a newer replica held by "
                     "the standbys; a takeover replays them after the replica, so that the loss of the "
                     "parameter server (or one shard) loses no update (docs/fault-model.md, \"Zero-loss "
                     "takeover\"). Memory: twice the model per journaled push, up to about 2 x --replica-interval / "
                     "workers + 1 pushes per worker (each prints its peak at the end). off: a takeover resumes "
                     "from the replica alone")
          ->capture_default_str()
          ->check(CLI::IsMember({"on", "off"})),
      "MT_PUSH_JOURNAL");
  env(cmd.add_option("--replica-budget", c.replica_budget,
                     "Fault tolerance: the share of a shard's time its replicas may take at most (each "
                     "replica's copy is timed); when the shard is the bottleneck, replicas are spaced "
                     "further apart than --replica-interval rather than slowing training (1: never)")
          ->capture_default_str()
          ->check(CLI::Range(0.001, 1.0)),
      "MT_REPLICA_BUDGET");
  env(cmd.add_option("--ps-handover", c.ps_handover,
                   "Fault tolerance, ULFM build, one shard, a standby: a notice (SIGTERM, SIGUSR1) to "
                   "the parameter server alone (a cloud preempting that server) hands it over to its "
                   "standby, which takes it over inside the job with nothing lost, instead of "
                   "checkpointing and stopping the job (exit 75). A notice that reaches every process "
                   "of the job (Slurm preemption, a signal to mpirun or to the launcher's group) still "
                   "stops the job: the standby, which gets it too, refuses the handover. auto (default): "
                   "on where it applies; on (or the bare flag): also warn where it cannot; off: a notice "
                   "to the parameter server always checkpoints and stops the job")
          ->expected(0, 1)
          ->check(CLI::Validator(
              [](std::string& v) {
                // The bare flag (an empty value) is "on", fixed after parsing; 1/true, 0/false too.
                if (v == "1" || v == "true" || v == "yes") v = "on";
                if (v == "0" || v == "false" || v == "no") v = "off";
                return v == "auto" || v == "on" || v == "off" ? std::string()
                                                               : "must be auto, on or off, not '" + v + "'";
              },
              "auto|on|off")),
      "MT_PS_HANDOVER");
  env(cmd.add_flag("--replace-workers", c.replace_workers,
                   "Fault tolerance, one shard: the parameter server starts a new worker process "
                   "(MPI_Comm_spawn, placed by the launcher: give mpirun slots or --oversubscribe) for "
                   "each worker it drops (killed, revoked, cut off, silent past --failure-timeout), "
                   "which joins in the dropped worker's data slot, so that the run keeps its worker "
                   "count instead of shrinking until a restart (both MPI builds; not under srun's "
                   "direct launch, which cannot spawn: the job then goes on without). At most 4 per "
                   "launched worker + 4 in a run"),
      "MT_REPLACE_WORKERS");
  env(cmd.add_option("--status-file", c.status_file,
                     "Parameter server: JSON run state for launchers (state, exit_code, global_step); "
                     "default <ckpt-dir>/run-status.json. mpirun --enable-recovery always exits 0, so "
                     "launch/restart_loop.sh reads the exit code here"),
      "MT_STATUS_FILE");
  env(cmd.add_option("--revoke", c.revoke,
                     "Revocation injection: 'rank=2@30s,rank=3@step=400' makes those ranks SIGKILL "
                     "themselves after 30 s of run time / at global step 400; ':TERM' or ':USR1' "
                     "after an entry sends that notice instead; 'rank=0@ckpt=2' kills the parameter "
                     "server in the middle of writing its 2nd checkpoint, 'rank=0@replica=5' as its 5th "
                     "replica to the standby leaves (--ps-standby), 'rank=2@takeover=1' kills worker 2 inside its "
                     "first takeover of a lost parameter server (ULFM), 'rank=1@replay=1' kills worker 1 halfway "
                     "through replaying the push journals after it took the parameter server over (ULFM)"),
      "MT_REVOKE");
  env(cmd.add_option("--corrupt-push", c.corrupt_push,
                     "Fault injection: 'rank=2@push=30:nan' makes worker rank 2 put NaN in its 30th "
                     "push; ':huge' multiplies that push's gradient by 1e6; ':zero' sends zeros; "
                     "':discard' sends it marked not to be applied (the reference a rejected push is "
                     "compared with)")
          ->check([](const std::string& v) {
            try {
              (void)parse_corrupt_push(v, -1);
              return std::string();
            } catch (const std::exception& e) {
              return std::string(e.what());
            }
          }),
      "MT_CORRUPT_PUSH");
  env(cmd.add_option("--revocation-model", c.revocation_model,
                     "Revocation injection: each worker samples its lifetime from this model and "
                     "SIGKILLs itself when it ends: 'gce' (built in: GCE preemptible servers, ~20% "
                     "revoked within 2 h, none living past 24 h), aws-v100 (built in: AWS spot V100s, "
                     "public traces of 2023, half revoked within 40 min), aws-advisor[:REGION] (the AWS "
                     "interruption band of --instance-type there), aws-band:BAND (<5%, 5-10%, 10-15%, "
                     "15-20% or a percentage revoked a month, a constant hazard) or a table file HOURS,FRACTION"),
      "MT_REVOCATION_MODEL");
  env(cmd.add_option("--time-scale", c.time_scale,
                     "Revocation model hours per real hour (3600: one model hour per second)")
          ->capture_default_str()
          ->check(CLI::Range(1e-6, 1e9)),
      "MT_TIME_SCALE");
  env(cmd.add_option("--max-workers", c.max_workers,
                     "Elastic joins (the paper's sparse mapping): worker slots; workers started later "
                     "with `mpi_trainer join` take free ones (0: only the launched workers; with slots the "
                     "parameter server may also start alone, mpirun -np 1, and wait for joins; needs "
                     "--num-ps 1 and mpirun --ompi-server, docs/fault-model.md)")
          ->capture_default_str()
          ->check(CLI::Range(0, 100000)),
      "MT_MAX_WORKERS");
  env(cmd.add_option("--port-file", c.port_file,
                     "Elastic joins: where shard 0 writes its MPI port and `join` reads it (default "
                     "<ckpt-dir>/ps-port)"),
      "MT_PORT_FILE");
  env(cmd.add_option("--join-secret", c.join_secret,
                     "Elastic joins: the file of the secret a joiner must prove (an HMAC of a nonce; "
                     "docs/fault-model.md). The job creates it (32 random bytes, mode 0600) if missing and "
                     "keeps it across restarts; a file you make must be yours, mode 0600 or 0400, 16 bytes "
                     "or more (default: join-secret beside the port file)"),
      "MT_JOIN_SECRET");
  env(cmd.add_flag("--quiet", c.quiet, "No progress lines (metrics and errors only)"), "MT_QUIET");
  // Benchmark mode for bench/perf/ps_throughput.sh: workers push a fixed gradient without computing.
  cmd.add_flag("--synthetic-gradients", c.synthetic_gradients)->group("");
  assign_train_sections(cmd);
}

}  // namespace mt::cli
