// Wiring between the command line and the parameter-server runtime (ps/ps.hpp): flags become
// PsOptions, the app's reports (app/ps_report.hpp) and the worker's computation are plugged in.
#include "app/train_dist.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/batch_ahead.hpp"
#include "app/checkpointing.hpp"
#include "app/device.hpp"
#include "app/emulation.hpp"
#include "app/history_log.hpp"
#include "app/metrics.hpp"
#include "app/ps_report.hpp"
#include "app/run_setup.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"
#include "ps/ps.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

namespace {

// The hung parameter-server processes the survivors reported failed (ULFM, Worker::end_hung_shard):
// the runtime ends them (SIGCONT, 0.25 s, SIGTERM, 0.25 s, SIGKILL), else the launcher would wait
// for them. Not while the survivors run: continued, such a process sends what it had pending, and
// that broke a survivor's MPI library (Open MPI 5.0.11: a segmentation fault in ob1, "Send error
// after request freed"). So by the new parameter server once it is done (its summary and status
// written), or by the worker that reported it when no takeover followed.
void end_hung(const std::vector<int>& world_ranks, const std::string& label) {
  for (const int r : world_ranks) {
    std::string why;
    if (!ulfm_end_process(r, &why))
      std::cerr << "mpi_trainer: " + label + ": the hung process (rank " + std::to_string(r) +
                       ") stays until it is continued: " + why + "\n"
                << std::flush;
  }
}

// Where shard 0 writes its port for `mpi_trainer join` (--max-workers) and joiners read it.
std::string join_port_file(const TrainConfig& cfg) {
  if (!cfg.port_file.empty()) return cfg.port_file;
  if (!cfg.ckpt_dir.empty()) return (std::filesystem::path(cfg.ckpt_dir) / "ps-port").string();
  throw UsageError("elastic joins need --port-file or --ckpt-dir (the port file is <ckpt-dir>/ps-port)");
}

// The secret a joiner proves (ps/elastic/join_auth.hpp): --join-secret, else join-secret beside the port file.
std::filesystem::path join_secret_path(const TrainConfig& cfg) {
  return cfg.join_secret.empty() ? default_join_secret_path(join_port_file(cfg)) : std::filesystem::path(cfg.join_secret);
}

// How long shard 0 waits for a joiner's proof: 10 s, or MT_JOIN_AUTH_SECONDS (tests, slow links).
double join_auth_seconds() {
  const char* v = std::getenv("MT_JOIN_AUTH_SECONDS");
  if (!v) return kJoinAuthSeconds;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0 && s <= 3600))
    throw UsageError(std::string("MT_JOIN_AUTH_SECONDS='") + v + "' is not a number of seconds in (0, 3600]");
  return s;
}


int standbys(const TrainConfig& cfg, int workers) {
  return resolve_standbys(cfg.ps_standby, workers, !cfg.ckpt_dir.empty());
}

// Whether the survivors take a lost parameter server (or one lost shard) over inside the job:
// ULFM, a standby's replica to start from, no elastic joins (a joiner is connected to shard 0 alone).
bool takeover_applies(const TrainConfig& cfg, int workers) {
  return ulfm_available() && cfg.max_workers == 0 && standbys(cfg, workers) > 0;
}

PsOptions ps_options(const TrainConfig& cfg, const RunSetup& setup, std::vector<std::string> types) {
  PsOptions o;
  o.train_steps = cfg.train_steps;
  o.batch_size = cfg.batch_size;
  o.num_ps = cfg.num_ps;
  o.max_workers = cfg.max_workers;
  o.lr_scaling = parse_lr_scaling(cfg.lr_scaling);
  o.momentum_correction = parse_momentum_correction(cfg.momentum_correction);
  o.momentum = cfg.momentum;
  o.momentum_by_workers = cfg.momentum_auto;
  o.weight_decay = cfg.weight_decay;
  o.nesterov = setup.nesterov;
  o.join_warmup = cfg.join_warmup;
  o.stability = rate_stability(cfg, static_cast<int>(types.size()));
  o.max_staleness = cfg.max_staleness;
  o.max_loss = cfg.max_loss;
  o.push_norm_limit = cfg.push_norm_limit;
  o.max_rejected_pushes = cfg.max_rejected_pushes;
  o.push_precision = parse_push_precision(cfg.push_precision);
  o.failure_timeout = cfg.failure_timeout;
  o.drain_deadline = cfg.drain_deadline;
  o.ps_standby = standbys(cfg, static_cast<int>(types.size()));
  o.replica_interval = cfg.replica_interval;
  o.replica_budget = cfg.replica_budget;
  o.ckpt_every_steps = cfg.ckpt_every_steps;
  o.ckpt_every_seconds = cfg.ckpt_every_seconds;
  o.eval_every_steps = cfg.eval_every_steps;
  o.log_every_steps = cfg.log_every_steps;
  o.quiet = cfg.quiet;
  o.shm_debug = std::getenv("MT_PS_SHM_DEBUG") != nullptr;
  o.synthetic_gradients = cfg.synthetic_gradients;
  o.seed = cfg.seed;
  o.worker_types = std::move(types);
  o.join_type = cfg.instance_type;
  if (cfg.max_workers > 0) o.port_file = join_port_file(cfg);
  if (cfg.replace_workers) {
    o.replace_workers = true;
    std::error_code ec;
    o.replacement_program = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) throw Error(kExitInternal, "--replace-workers: cannot read /proc/self/exe: " + ec.message());
    o.replacement_args = replacement_arguments(cfg.command_args);
    o.replacement_limit = 4 * static_cast<int>(o.worker_types.size()) + 4;
  }
  o.takeover = takeover_applies(cfg, static_cast<int>(o.worker_types.size()));
  // --ps-handover: a notice to the parameter server alone hands it to the standby where the
  // survivors can take it over (one shard).
  o.hand_over = cfg.ps_handover != "off" && o.takeover && o.num_ps == 1;
  return o;
}

WorkerOptions worker_options(const TrainConfig& cfg) {
  WorkerOptions o;
  o.num_ps = cfg.num_ps;
  o.batch_size = cfg.batch_size;
  o.failure_timeout = cfg.failure_timeout;
  o.drain_deadline = cfg.drain_deadline;
  o.quiet = cfg.quiet;
  o.synthetic_gradients = cfg.synthetic_gradients;
  o.seed = cfg.seed;
  o.push_precision = parse_push_precision(cfg.push_precision);
  return o;
}

// A worker's step: a network on this process's device, its data slot's batches, the next batch
// staged while a step computes (so a push carries the cursor after the batch it trained).
// With an emulated device each step is padded to that device's step time (app/emulation.hpp).
class NetworkStep final : public StepComputer {
 public:
  NetworkStep(const Model& model, const RunSetup& setup, int batch, StepPacer pacer)
      : setup_(setup),
        backend_(make_backend(setup.device, setup.threads)),
        net_(model, *backend_, batch),
        pacer_(std::move(pacer)) {}

  void start(int slot, int slots, LoaderCursor from) override {
    LoaderOptions lo = setup_.loader;
    lo.shard = slot;
    lo.num_shards = slots;
    ahead_.reset();  // a rejoin starts again: the batch ahead reads the loader it replaces
    loader_.emplace(setup_.data.train, lo, from);
    ahead_.emplace(*loader_, net_);
    ahead_->advance();
  }

  Step step(const FlatTensors& params, FlatTensors& grads, FlatTensors& batch_stats) override {
    pacer_.begin();
    const BatchAhead::Staged batch = ahead_->current();
    const StepStats st =
        net_.train_step(batch.images, batch.labels, params, grads, batch_stats, [&] { ahead_->advance(); });
    return Step{st.loss, st.correct, batch.cursor, pacer_.finish()};
  }

 private:
  const RunSetup& setup_;
  std::unique_ptr<Backend> backend_;
  Network net_;
  std::optional<BatchLoader> loader_;
  std::optional<BatchAhead> ahead_;
  StepPacer pacer_;
};

TrainResult ps_role(const RunSetup& setup, const Model& model, PsReport& report, const PsOptions& opts,
                    FaultPlan plan);
TrainResult take_over(const TrainConfig& cfg, const RunSetup& setup, const Model& model, int rank, Takeover t,
                      std::ostream& log);

// `rank` names the worker (-1: a joiner); `pacer_seed` makes each worker's emulated jitter its own.
// `takeover`: this worker may take a lost parameter server over (ULFM, WorkerOptions::takeover);
// then it runs the parameter server here, on the survivors.
TrainResult worker_role(const TrainConfig& cfg, const RunSetup& setup, MPI_Comm ps, int rank, FaultPlan plan,
                        const Emulation& emulation, std::uint64_t pacer_seed, bool takeover, std::ostream& log) {
  const Model model(setup.spec);
  WorkerOptions opts = worker_options(cfg);
  opts.takeover = takeover;
  opts.push_journal = cfg.push_journal == "on";
  opts.push_faults = parse_corrupt_push(cfg.corrupt_push, rank);
  // The worker's side of the run's history (--push-log, app/history_log.hpp).
  if (!cfg.push_log.empty()) {
    auto acks = std::make_shared<AckLog>(cfg.push_log, rank);
    opts.on_acknowledged = [acks](const WorkerOptions::Ack& a) { acks->acknowledged(a); };
  }
  // A standby writes its replica of the parameter server as a checkpoint when it is lost.
  if (!cfg.ckpt_dir.empty())
    opts.on_ps_lost = [&cfg, &setup, &model, rank](const ReplicaState& r) {
      std::string steps;
      for (const std::int64_t s : r.shard_steps) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
      const ReplicaWritten w = write_replica_checkpoint(cfg, model, setup.job, r, worker_label(rank));
      std::ostringstream line;
      line << "mpi_trainer: " << worker_label(rank) << " (standby): wrote its replica of the parameter server at global step "
           << r.global_step << (r.shard_steps.size() > 1 ? " (shards at " + steps + ")" : "") << " as "
           << w.file.string() << " in " << std::fixed << std::setprecision(3) << w.seconds
           << " s: the restart resumes from it\n";
      std::cerr << line.str() << std::flush;
      // The parameter server, which writes the metrics, is gone: the standby adds this event.
      MetricsWriter(cfg.metrics)
          .write(nlohmann::ordered_json{{"event", "ps_replica_checkpoint"},
                                        {"global_step", r.global_step},
                                        {"shard_steps", r.shard_steps},
                                        {"rank", rank},
                                        {"file", w.file.string()},
                                        {"write_seconds", w.seconds},
                                        {"unix_time", unix_now()}});
      // The run's status, final now: the parameter server cannot say so when its node crashed, and
      // then Open MPI 4.1's mpirun hangs after this job's MPI_Abort (its daemon there is gone). The
      // restart loop ends the launcher --grace seconds after a final status and restarts from the
      // replica (docs/fault-model.md, "Exit codes and the status file").
      // Only over a status that says the run goes on: a final one (done, requeue) stands.
      const std::string status = run_status_path(cfg);
      if (const std::string state = read_run_state(status); !state.empty() && state != "running") return;
      write_run_status(status,
                       nlohmann::ordered_json{{"state", "lost"},
                                              {"exit_code", kExitPsLost},
                                              {"global_step", r.global_step},
                                              {"train_steps", cfg.train_steps},
                                              {"stopped_by", worker_label(rank) +
                                                                 " (standby): the parameter server was lost; "
                                                                 "its replica written as " + w.file.string()}});
    };
  WorkerResult w = run_worker(opts, model, ps, rank, std::move(plan), [&]() -> std::unique_ptr<StepComputer> {
    return std::make_unique<NetworkStep>(model, setup, cfg.batch_size, StepPacer(emulation, pacer_seed));
  });
  end_hung(w.hung, worker_label(rank));
  if (w.takeover) return take_over(cfg, setup, model, rank, std::move(*w.takeover), log);
  if (!w.refused.empty()) throw Error(kExitConfig, w.refused);  // a joiner with other flags
  if (w.push_journal_peak_bytes > 0 && !cfg.quiet)  // its memory (--push-journal; bench/faults/ps_takeover.sh)
    std::cerr << "mpi_trainer: " + worker_label(rank) + ": push journal: at most " +
                     std::to_string(w.push_journal_peak_bytes) + " bytes held (" +
                     std::to_string(w.push_journal_peak_pushes) + " pushes" +
                     (w.push_journal_dropped > 0 ? "; " + std::to_string(w.push_journal_dropped) +
                                                       " dropped past its bound of 512 MiB: no replica took them"
                                                 : std::string()) +
                     ")\n"
              << std::flush;
  TrainResult res;
  res.global_step = w.pushes;
  res.exit_code = w.exit_code;  // non-zero: the parameter server failed (its message says why)
  // The end of a clean run may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
  // Not after a rank died (a worker lost, a takeover): MPI_Finalize's PMIx fence then waits for
  // the dead rank now and then (Open MPI 4.1 and 5: 2 of 6 runs, seen with gdb) or reports an
  // error, and a rank that ends without it is one more failure the others outlive: it leaves
  // without it (docs/fault-model.md, "Ending after a loss").
  if (w.clean_end) res.finalize_timeout_s = kCleanEndFinalizeSeconds;
  res.skip_finalize = w.takeovers > 0 || w.ps_lost || w.peer_lost;
  // A silent parameter server may be hung, not dead: mpirun (or srun) would wait for it as long as it
  // hangs, and the restart with it. The standby ends the job once it has written its replica (an
  // abort by another could kill it mid-write); in a job without standbys every worker does. (Under
  // Open MPI 4.1's --enable-recovery the job ends once the other ranks have left.) A joiner's MPI
  // job is its own: nothing of the parameter server's to end.
  if (w.ps_lost && w.ps_silent && rank >= 0) {
    int size = 0;
    MT_MPI(MPI_Comm_size(ps, &size));
    res.abort_job = w.standby || standbys(cfg, size - cfg.num_ps) == 0;
  }
  return res;
}

TrainResult ps_role(const RunSetup& setup, const Model& model, PsReport& report, const PsOptions& opts,
                    FaultPlan plan) {
  // The optimizer update on host buffers: one thread is plenty.
  auto update = make_host_backend(setup.device, 1);
  int rank = 0;
  MT_MPI(MPI_Comm_rank(opts.comm, &rank));
  if (rank == 0)
    if (auto hook = plan.checkpoint_write_hook()) ckpt::set_mid_write_hook(std::move(hook));
  const PsResult r = run_ps(opts, model, setup.schedule, *update, std::move(plan), report, report);
  TrainResult res;
  if (r.handed_over || (r.takeovers > 0 && r.exit_code == kExitPsLost)) {
    // The standby goes on with the job (a handover); or another shard was lost and could not be
    // taken over: nothing here to finish, and MPI_Finalize could wait for the dead.
    res.global_step = r.global_step;
    res.exit_code = r.exit_code;
    res.skip_finalize = true;
    return res;
  }
  res.global_step = r.global_step;
  res.train_seconds = report.previous().train_seconds + r.run_seconds;
  res.images_per_second = r.images_per_second;
  res.exit_code = report.exit_code(r.exit_code);
  res.cost_usd = report.cost_usd();
  if (r.evaluated) {
    res.test_accuracy = r.evaluated->accuracy;
    res.test_loss = r.evaluated->loss;
  }
  if (r.clean_end) res.finalize_timeout_s = kCleanEndFinalizeSeconds;
  // After a worker's loss or a takeover it leaves without MPI_Finalize, as the workers do
  // (worker_role): the summary, checkpoint and status are written by now.
  res.skip_finalize = r.takeovers > 0 || r.peer_lost;
  return res;
}

// The worker that holds the newest replica of a lost parameter server becomes it, inside the job
// (ULFM; docs/fault-model.md, "Takeover under ULFM"): it writes the replica as a checkpoint
// (durable first: should this process die too, the restart resumes from it), then runs the
// parameter server on the survivors from it, the global step counting on from the highest any of
// them saw. Its own data slot rests; the other workers keep theirs.
TrainResult take_over(const TrainConfig& cfg, const RunSetup& setup, const Model& model, int rank, Takeover t,
                      std::ostream& log) {
  const std::string label = worker_label(rank);
  const ReplicaWritten written = write_replica_checkpoint(cfg, model, setup.job, t.replica, label);
  std::vector<std::string> types = worker_types(cfg, setup.prices, t.data_slots);
  PsReport report(cfg, setup, model, types, 0, log);
  report.take_over(PsReport::TakeoverReport{written.file.string(), written.seconds, label, t.replica.global_step,
                                            t.first_step, t.lost_at, t.takeovers,
                                            replica_revocations(t.replica.record),
                                            t.lost_shards.empty() ? 0 : t.lost_shards.front()});
  PsOptions opts = ps_options(cfg, setup, std::move(types));
  serve_survivors(opts, t.comm, std::move(t.worker_ranks), std::move(t.worker_slots), t.data_slots, t.first_step,
                  rank);
  opts.replay = t.replay;
  TrainResult res = ps_role(setup, model, report, opts, std::move(t.plan));
  end_hung(t.hung, "parameter server (" + label + ")");
  res.skip_finalize = true;  // as its workers (worker_role)
  return res;
}

// An MPI rank's signals (docs/fault-model.md, "Signals"): SIGTERM/SIGUSR1 notices, SIGINT once,
// and the SIGCONT with which mpirun starts ending the job.
void install_rank_signal_handlers() {
  install_notice_handlers();
  install_interrupt_handler();
  install_job_end_handler();
}

// Whether every rank is ready to train (`mine`: this rank's error, exit code 0 when none); the
// job's exit code. A failed rank prints its error in one line, except when every rank failed with
// the same message (bad data on a shared file system): then rank 0 alone prints it, once. Shard
// 0 writes the status file. A rank that never gets here (killed) is waited for as long as workers
// wait for the parameter server at start; then the others go on.
int agree_on_start(const TrainConfig& cfg, MpiSession& mpi, const ErrorReport& mine, std::ostream& log) {
  const int hash = mine.exit_code == kExitOk ? 0 : static_cast<int>(std::hash<std::string>{}(mine.what) & 0x3fffffff);
  const std::vector<int> v = max_over_ranks({mine.exit_code, -mine.exit_code, hash, -hash}, MPI_COMM_WORLD,
                                            std::max(60.0, 10 * cfg.failure_timeout))
                                 .value_or(std::vector<int>{mine.exit_code, -mine.exit_code, hash, -hash});
  const int job = v[0];
  if (job == kExitOk) return kExitOk;
  const bool everywhere_same = -v[1] != kExitOk && v[2] == -v[3];
  std::string line;
  if (mine.exit_code != kExitOk && (!everywhere_same || mpi.rank() == 0)) {
    line = "mpi_trainer: error (" +
           (everywhere_same ? std::string("every process")
                            : (mpi.rank() < cfg.num_ps ? "parameter server" : "worker") + std::string(", rank ") +
                                  std::to_string(mpi.rank())) +
           "): " + mine.what + "\n";
    std::cerr << line << std::flush;
  }
  if (mpi.rank() == 0) {
    std::string what = mine.what;
    if (mine.exit_code == kExitOk) {
      what = "another process of the job failed before training (exit " + std::to_string(job) +
             "; its message is above)";
      log << "mpi_trainer: " << what << '\n' << std::flush;
    }
    write_failed_status(cfg, job, what);
  }
  return job;
}

// Which roles share this node (MPI_COMM_TYPE_SHARED), counted once at start.
struct NodeRoles {
  int shards = 0, workers = 0;
};

NodeRoles node_roles(int num_ps, MpiSession& mpi) {
  MPI_Comm local = MPI_COMM_NULL;
  MT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi.rank(), MPI_INFO_NULL, &local));
  int n = 0, rank = mpi.rank();
  MT_MPI(MPI_Comm_size(local, &n));
  std::vector<int> ranks(static_cast<std::size_t>(n));
  MT_MPI(MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, local));
  MT_MPI(MPI_Comm_free(&local));
  NodeRoles r;
  for (const int k : ranks)
    (k < num_ps ? r.shards : r.workers) += 1;
  return r;
}

}  // namespace

TrainResult train_distributed(const TrainConfig& cfg, MpiSession& mpi, std::ostream& log) {
  // With --max-workers the parameter server may start alone: every worker joins.
  if (cfg.num_ps < 1 || cfg.num_ps > mpi.size() || (cfg.num_ps == mpi.size() && cfg.max_workers == 0))
    throw UsageError("--num-ps " + std::to_string(cfg.num_ps) + " leaves no worker among " +
                     std::to_string(mpi.size()) + " processes; use 1.." + std::to_string(std::max(1, mpi.size() - 1)) +
                     (mpi.size() == 1 ? " with --max-workers (workers join with `mpi_trainer join`)" : ""));
  if (cfg.max_workers > 0) {
    if (cfg.num_ps != 1) throw UsageError("--max-workers (elastic joins) needs --num-ps 1");
    if (cfg.max_workers < mpi.size() - cfg.num_ps)
      throw UsageError("--max-workers " + std::to_string(cfg.max_workers) + " is less than the " +
                       std::to_string(mpi.size() - cfg.num_ps) + " workers launched");
    join_port_file(cfg);
  }
  if (cfg.replace_workers && cfg.num_ps != 1)
    throw UsageError("--replace-workers needs --num-ps 1 (a replacement is connected to shard 0 alone)");
  if (cfg.replace_workers && cfg.max_workers > 0)
    throw UsageError("--replace-workers keeps the launched worker count; --max-workers admits joiners up to "
                     "its count: give one of them");
  TrainConfig c = cfg;
  resolve_policy(c);
  parse_lr_scaling(c.lr_scaling);
  parse_momentum_correction(c.momentum_correction);
  const NodeRoles here = node_roles(c.num_ps, mpi);
  if (c.threads == 0) {
    // A rank that a launcher pinned (mpirun --bind-to core, srun --cpu-bind) uses the cores it
    // was given. One that may use the whole node shares the node's cores with the other workers
    // on it. A PS shard beside them takes no core of its own: it sleeps until a push arrives
    // (ps/wire/bell.hpp). Measured (bench/perf/ps_cpu.sh, 2 cores, resnet32): 1 PS + 1 worker with 2
    // threads 423 img/s against one process's 432, with 1 thread 268.
    const int node = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int mine = usable_cores();
    c.threads = mine < node ? mine : std::max(1, node / std::max(1, here.workers));
    // Pinned while cores of the node stay unused by every rank on it: say how to use them.
    if (mine < node && (here.workers + here.shards) * mine < node && mpi.rank() >= c.num_ps && !c.quiet)
      log << "mpi_trainer: note: worker rank " << mpi.rank() << " may use " << mine << " of this node's " << node
          << " cores (the launcher pinned it; mpirun pins each rank to one core when there are 2 or fewer): "
             "mpirun --bind-to none lets the workers share the node's cores (docs/user-guide.md)\n"
          << std::flush;
  }
  // Every rank validates before any work; notices are caught from here on. Then the ranks agree
  // that every one of them is ready: a rank that failed (its data, its device, the checkpoint
  // directory) prints its error and the whole job ends with its code, no rank waiting for it.
  std::optional<FaultPlan> plan;
  std::optional<RunSetup> setup;
  std::optional<Model> model;
  std::optional<PsReport> report;
  std::vector<std::string> types;
  std::vector<Emulation> emulated;
  std::string join_secret;
  double auth_seconds = kJoinAuthSeconds;
  std::exception_ptr error;
  try {
    install_rank_signal_handlers();  // first: a notice during the set-up (data loading) is a notice
    setup.emplace(prepare_run(c));
    types = worker_types(c, setup->prices, mpi.size() - c.num_ps);
    plan = FaultPlan::make(c.revoke, c.revocation_model, c.seed, c.time_scale, c.num_ps, mpi.rank(), mpi.size(),
                           mpi.rank() < c.num_ps ? c.ps_type : types[static_cast<std::size_t>(mpi.rank() - c.num_ps)]);
    emulated = emulations(c, types);
    if (mpi.rank() == 0) check_checkpoint_dir(c);  // shard 0 writes the checkpoints
    if (mpi.rank() == 0 && c.max_workers > 0) {     // and admits joiners
      join_secret = load_or_create_join_secret(join_secret_path(c));
      auth_seconds = join_auth_seconds();
    }
    if (mpi.rank() < c.num_ps) {
      model.emplace(setup->spec);
      report.emplace(c, *setup, *model, types, mpi.rank(), log);
    }
  } catch (...) {
    error = std::current_exception();
  }
  const ErrorReport mine = error ? describe_error(error) : ErrorReport{kExitOk, {}};
  if (const int job = agree_on_start(c, mpi, mine, log); job != kExitOk) {
    TrainResult r;
    r.exit_code = job;
    return r;
  }
  precise_naps(log);
  if (mpi.rank() < c.num_ps) {
    PsOptions opts = ps_options(c, *setup, std::move(types));
    opts.join_secret = std::move(join_secret);
    opts.join_auth_seconds = auth_seconds;
    if (c.ps_handover == "on" && !opts.hand_over && mpi.rank() == 0)
      log << "mpi_trainer: warning: --ps-handover needs the ULFM build, --num-ps 1, no --max-workers and a standby "
             "(--ps-standby, --ckpt-dir): a notice to the parameter server checkpoints and stops the job instead\n"
          << std::flush;
    return ps_role(*setup, *model, *report, opts, std::move(*plan));
  }
  const bool takeover = takeover_applies(c, mpi.size() - c.num_ps);
  return worker_role(c, *setup, MPI_COMM_WORLD, mpi.rank(), std::move(*plan),
                     emulated[static_cast<std::size_t>(mpi.rank() - c.num_ps)], pacer_seed(c.seed, mpi.rank()),
                     takeover, log);
}

TrainResult join_running_job(const TrainConfig& cfg, std::ostream& log) {
  if (cfg.num_ps != 1) throw UsageError("mpi_trainer join: the job must have --num-ps 1");
  if (!cfg.revoke.empty())
    throw UsageError("mpi_trainer join: --revoke names ranks of the training job; use --revocation-model");
  // Started by a parameter server with --replace-workers: connected to it already (no port, no secret).
  const MPI_Comm parent = spawning_parameter_server();
  const std::string file = parent != MPI_COMM_NULL ? std::string() : join_port_file(cfg);
  TrainConfig c = cfg;
  // A lifetime of its own, if a model is given (drawn with its pid: joiners differ).
  const int self = c.num_ps + static_cast<int>(getpid() % 1000000);
  FaultPlan plan =
      FaultPlan::make(c.revoke, c.revocation_model, c.seed, c.time_scale, c.num_ps, self, self + 1, c.instance_type);
  install_rank_signal_handlers();
  const RunSetup setup = prepare_run(c);
  const Emulation emulation = emulations(c, {c.instance_type})[0];
  precise_naps(log);
  // MT_TEST_JOIN_SILENT (non-empty): connect and never prove the secret (the handshake's deadline, tested).
  const char* silent = std::getenv("MT_TEST_JOIN_SILENT");
  MPI_Comm ps = parent;
  if (parent != MPI_COMM_NULL)
    MT_MPI(MPI_Comm_set_errhandler(ps, MPI_ERRORS_RETURN));
  else
    ps = connect_to_parameter_server(file, join_secret_path(c).string(), !silent || !*silent);
  if (ps == MPI_COMM_NULL) {
    log << "mpi_trainer join: " << signal_name(notice_signal()) << " before joining the job: leaving; exit "
        << kExitOk << '\n'
        << std::flush;
    return TrainResult{};
  }
  if (!c.quiet)
    log << "mpi_trainer join: connected to the parameter server ("
        << (parent != MPI_COMM_NULL ? "it started this replacement worker" : file) << ")\n"
        << std::flush;
  const TrainResult r = worker_role(c, setup, ps, -1, std::move(plan), emulation, pacer_seed(c.seed, self), false, log);
  if (r.exit_code != kExitOk && r.exit_code != kExitPsLost)  // a lost one: the worker said so
    log << "mpi_trainer join: the job's parameter server failed (exit " << r.exit_code << ", see its log) after "
        << r.global_step << " pushes from this worker\n"
        << std::flush;
  else if (!c.quiet)
    log << "mpi_trainer join: done after " << r.global_step << " pushes\n" << std::flush;
  return r;
}

}  // namespace mt
