#include "app/train_dist.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "app/background_eval.hpp"
#include "app/batch_ahead.hpp"
#include "app/checkpointing.hpp"
#include "app/cost.hpp"
#include "app/metrics.hpp"
#include "app/run_setup.hpp"
#include "ckpt/async_writer.hpp"
#include "core/error.hpp"
#include "dist/faults.hpp"
#include "dist/mpi_env.hpp"
#include "dist/partition.hpp"
#include "dist/protocol.hpp"
#include "dist/shm.hpp"
#include "dist/ulfm.hpp"
#include "nn/resnet.hpp"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void nap_microseconds(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

// Waiting for messages without spinning (MPI's blocking waits poll and would take the core from
// the ranks that share it). Naps double from `floor` up to a cap that follows how long these waits
// usually last: a tenth of their recent mean, within [floor, ceiling]. So a fast exchange (a
// benchmark's precomputed gradients, a fraction of a millisecond) is not slowed down by long naps,
// and a slow one (a real training step, a tenth of a second and more) wakes the core rarely; a
// message waits at most about a tenth of the usual wait for the nap to end.
class Backoff {
 public:
  Backoff(long floor_us, long ceiling_us) : floor_(floor_us), ceiling_(ceiling_us), nap_(floor_us) {}
  // Nothing arrived yet: sleep a little longer each time.
  void idle() {
    nap_microseconds(nap_);
    nap_ = std::min(nap_ * 2, cap());
  }
  // The wait is over: remember how long it took and start the next one.
  void done() {
    const auto now = Clock::now();
    const double us = std::chrono::duration<double, std::micro>(now - since_).count();
    mean_us_ = mean_us_ < 0 ? us : 0.9 * mean_us_ + 0.1 * us;
    since_ = now;
    nap_ = floor_;
  }
  void restart() { since_ = Clock::now(); nap_ = floor_; }

 private:
  long cap() const { return std::clamp(static_cast<long>(mean_us_ / 10), floor_, ceiling_); }
  long floor_, ceiling_, nap_;
  double mean_us_ = -1;
  Clock::time_point since_ = Clock::now();
};

// Linux lets a sleep overrun by the thread's timer slack, 50 us by default: longer than the short
// naps of the polling loops, which would turn every nap into 50+ us of added latency per message.
// Failure is harmless (naps are just longer), so it is reported and ignored.
void precise_naps(std::ostream& log) {
#ifdef PR_SET_TIMERSLACK
  if (prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) != 0)
    log << "mpi_trainer: warning: prctl(PR_SET_TIMERSLACK): " << std::strerror(errno) << '\n';
#else
  (void)log;
#endif
}

// Polls `req` with naps until it completes or `seconds` pass. False: it did not complete; the
// peer is presumed lost, and the caller abandons the request and its buffer (never reused:
// Open MPI 4.1 neither completes nor cancels a request to a dead peer, DESIGN.md section 7).
bool wait_for(MPI_Request* req, double seconds) {
  const auto t0 = Clock::now();
  Backoff backoff(5, 1000);
  for (;;) {
    int done = 0;
    MT_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (since(t0) >= seconds) return false;
    backoff.idle();
  }
}

// Run state for launchers, replaced atomically (mpirun --enable-recovery always exits 0, so
// launch/restart_loop.sh takes the exit code from here).
void write_status(const std::string& path, const nlohmann::ordered_json& j) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << '\n';
    out.flush();
    if (!out) throw Error(kExitCheckpoint, tmp + ": cannot write the run status file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(kExitCheckpoint, "rename " + tmp + " -> " + path + ": " + std::strerror(errno));
}

// Where shard 0 writes its port for `mpi_trainer join` (--max-workers) and joiners read it.
std::string join_port_file(const TrainConfig& cfg) {
  if (!cfg.port_file.empty()) return cfg.port_file;
  if (!cfg.ckpt_dir.empty()) return (std::filesystem::path(cfg.ckpt_dir) / "ps-port").string();
  throw UsageError("elastic joins need --port-file or --ckpt-dir (the port file is <ckpt-dir>/ps-port)");
}

// How messages name a worker: its world rank, or (rank -1) a worker that joined with
// `mpi_trainer join`, which has no rank in the training job.
std::string worker_label(int rank) {
  return rank >= 0 ? "worker rank " + std::to_string(rank)
                   : "joined worker (pid " + std::to_string(static_cast<long>(getpid())) + ")";
}

// What --revoke and --revocation-model ask of this rank.
struct FaultPlan {
  std::vector<RevokeEntry> entries;  // this rank's, each fired once
  double lifetime_seconds = -1;      // from the model (workers); negative: none
  Clock::time_point start = Clock::now();

  // The process signals itself: SIGKILL ends it here, a notice sets the notice flag.
  static void fire(int rank, int signo, const std::string& why) {
    std::cout << std::flush;
    std::cerr << "mpi_trainer: " << (rank >= 0 ? "rank " + std::to_string(rank) : worker_label(rank)) << ": revoked ("
              << why << "): " << signal_name(signo)
              << " to itself at unix " << std::fixed << std::setprecision(3) << unix_now() << '\n'
              << std::flush;
    if (std::raise(signo) != 0) std::_Exit(kExitInternal);
  }
  // The global step this run started from: entries at or below it were for an earlier attempt.
  void started_at(std::int64_t step) {
    for (auto& e : entries)
      if (e.step > 0 && e.step <= step) e.step = -1;
  }
  // Entries due at this global step (workers see the step jump by several between replies).
  void at_step(int rank, std::int64_t step) {
    for (auto& e : entries)
      if (e.step > 0 && step >= e.step) {
        e.step = -1;
        fire(rank, e.signal, "--revoke at global step " + std::to_string(step));
      }
  }
  // Entries due by now (run time), and the model's lifetime.
  void at_time(int rank) {
    const double t = since(start);
    for (auto& e : entries)
      if (e.seconds >= 0 && t >= e.seconds) {
        e.seconds = -1;
        fire(rank, e.signal, "--revoke after " + std::to_string(t).substr(0, 6) + " s");
      }
    if (lifetime_seconds >= 0 && t >= lifetime_seconds) {
      lifetime_seconds = -1;
      fire(rank, SIGKILL, "--revocation-model lifetime ended after " + std::to_string(t).substr(0, 6) + " s");
    }
  }
};

FaultPlan fault_plan(const TrainConfig& cfg, int rank, int size) {
  FaultPlan plan;
  for (const auto& e : parse_revoke(cfg.revoke)) {
    if (e.rank >= size)
      throw UsageError("--revoke: rank " + std::to_string(e.rank) + " is not in this job of " + std::to_string(size) +
                       " processes");
    if (e.rank == rank) plan.entries.push_back(e);
  }
  if (!cfg.revocation_model.empty()) {
    const auto model = RevocationModel::load(cfg.revocation_model);
    // Each attempt of launch/restart_loop.sh runs on new servers: a new draw.
    std::uint64_t seed = cfg.seed;
    if (const char* a = std::getenv("MT_RESTART_ATTEMPT")) seed += 7919 * std::strtoull(a, nullptr, 10);
    if (rank >= cfg.num_ps) plan.lifetime_seconds = sampled_lifetime_seconds(model, seed, rank, cfg.time_scale);
  }
  return plan;
}

// `--revoke rank=0@ckpt=N`: the Nth checkpoint write of this process is killed half-way.
std::atomic<std::int64_t> g_kill_in_ckpt_write{-1};
void kill_in_ckpt_write(std::int64_t global_step) {
  static std::atomic<std::int64_t> writes{0};
  if (++writes == g_kill_in_ckpt_write.load())
    FaultPlan::fire(0, SIGKILL, "--revoke in the middle of writing checkpoint " + std::to_string(writes.load()) +
                                    " (global step " + std::to_string(global_step) + ")");
}

// A message buffer of header + `payload` floats; or, once shared with a same-node peer
// (dist/shm.hpp), the header alone here and the payload in the pair's segment.
struct Buffer {
  std::vector<float> data;
  std::shared_ptr<ShmSegment> segment;
  float* shared = nullptr;
  explicit Buffer(std::int64_t payload = 0) : data(static_cast<std::size_t>(kHeaderFloats + payload)) {}
  MsgView view() { return MsgView{data.data()}; }
  MsgHeader& header() { return view().header(); }
  float* payload() { return shared ? shared : view().payload(); }
  // Floats an MPI message of this buffer carries at most.
  int count() const { return shared ? static_cast<int>(kHeaderFloats) : static_cast<int>(data.size()); }
  // The payload lives at `offset` floats into `seg` from now on (no receive may be pending).
  void share(std::shared_ptr<ShmSegment> seg, std::size_t offset) {
    shared = seg->floats() + offset;
    segment = std::move(seg);
    data.resize(static_cast<std::size_t>(kHeaderFloats));
    data.shrink_to_fit();
  }
};

// Sends `buf` (header + `payload` floats; the header alone when the payload is shared) without
// blocking.
void isend(Buffer& buf, std::int64_t payload, int dest, int tag, MPI_Request* req, MPI_Comm comm = MPI_COMM_WORLD) {
  const std::int64_t count = buf.shared ? kHeaderFloats : kHeaderFloats + payload;
  MT_MPI(MPI_Isend(buf.data.data(), static_cast<int>(count), MPI_FLOAT, dest, tag, comm, req));
}

// One (worker, shard) pair's segment: the push payload, then (64-byte aligned) the reply's.
std::size_t shm_reply_offset(std::int64_t push_floats) { return static_cast<std::size_t>((push_floats + 15) / 16 * 16); }
std::size_t shm_bytes(std::int64_t push_floats, std::int64_t reply_floats) {
  return (shm_reply_offset(push_floats) + static_cast<std::size_t>(reply_floats)) * sizeof(float);
}

void irecv(Buffer& buf, int source, int tag, MPI_Request* req, MPI_Comm comm = MPI_COMM_WORLD) {
  MT_MPI(MPI_Irecv(buf.data.data(), buf.count(), MPI_FLOAT, source, tag, comm, req));
}

// Elastic joins (--max-workers): shard 0 accepts connections from `mpi_trainer join` processes
// on a thread (MPI_Comm_accept blocks; MPI_THREAD_MULTIPLE) and hands each new communicator to
// the training loop. The thread is never joined: it stays blocked in MPI_Comm_accept until the
// process ends (MPI_Finalize returns with it blocked, measured with Open MPI 4.1; connecting to
// one's own port to wake it hangs), so what it uses is shared and outlives the shard.
struct JoinQueue {
  std::mutex mutex;
  std::vector<MPI_Comm> comms;
  std::atomic<int> pending{0};
  std::string port;
  std::string error;
};

void accept_joins(std::shared_ptr<JoinQueue> q) {
  std::vector<char> port(q->port.begin(), q->port.end());
  port.push_back('\0');
  for (;;) {
    MPI_Comm inter = MPI_COMM_NULL;
    const int rc = MPI_Comm_accept(port.data(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    std::lock_guard<std::mutex> lock(q->mutex);
    if (rc != MPI_SUCCESS) {
      q->error = "MPI_Comm_accept failed (error " + std::to_string(rc) + "): no more joins";
      q->pending += 1;
      return;
    }
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    q->comms.push_back(inter);
    q->pending += 1;
  }
}

// "k80,k80,p100" -> one type per worker; a single type applies to every worker.
std::vector<std::string> worker_types(const TrainConfig& cfg, const PriceTable& prices, int workers) {
  std::vector<std::string> types;
  if (cfg.worker_types.empty()) {
    types.assign(static_cast<std::size_t>(workers), cfg.instance_type);
  } else {
    std::stringstream ss(cfg.worker_types);
    for (std::string t; std::getline(ss, t, ',');) types.push_back(t);
    if (types.size() == 1) types.assign(static_cast<std::size_t>(workers), types[0]);
    if (static_cast<int>(types.size()) != workers)
      throw UsageError("--worker-types lists " + std::to_string(types.size()) + " types for " +
                       std::to_string(workers) + " workers; give one per worker, in rank order");
  }
  for (const auto& t : types) prices.at(t);
  prices.at(cfg.ps_type);
  if (cfg.max_workers > 0) prices.at(cfg.instance_type);  // joined workers are billed at it
  return types;
}

// ------------------------------------------------------------------------------- PS shard

enum Purpose : unsigned { kForCheckpoint = 1, kForEval = 2 };

struct WorkerState {
  int rank = 0;                       // world rank; joined workers: numbered after the world's ranks
  MPI_Comm comm = MPI_COMM_WORLD;     // joined workers: the intercommunicator of their connection
  int peer = 0;                       // its rank in `comm`
  int slot = 0;                       // data shard (0..slots-1)
  std::string type;
  Buffer recv, send, hb{0};
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL, hbreq = MPI_REQUEST_NULL;
  bool done = false;
  bool joined = false;
  bool heard = false;                 // any message yet (before: the start-up grace applies)
  bool lost = false, left = false;    // revoked: silent past --failure-timeout / left on a notice
  Clock::time_point last_heard{}, last_reply{};
  std::int64_t pushes = 0, dropped = 0;
  double staleness_sum = 0;
  Clock::time_point joined_at{};
  double active_seconds = 0;
  LoaderCursor cursor;                         // after its last applied push
  std::int64_t window_pushes = 0, window_images = 0;
  double window_staleness = 0;

  double seconds_active() const { return done ? active_seconds : joined ? since(joined_at) : 0.0; }
};

class Shard {
 public:
  Shard(const TrainConfig& cfg, const RunSetup& setup, MpiSession& mpi, FaultPlan plan, std::ostream& log)
      : plan_(std::move(plan)), cfg_(cfg), setup_(setup), log_(log), shards_(cfg.num_ps), shard_(mpi.rank()),
        workers_(mpi.size() - cfg.num_ps), slots_(std::max(workers_, cfg.max_workers)), model_(setup.spec), part_(model_.params(), shards_),
        mine_(part_.floats(shard_)), stats_floats_(shard_ == 0 ? model_.stats().total() : 0),
        metrics_(shard_ == 0 ? cfg.metrics : std::string()),
        backend_(make_host_backend(setup.device, 1)),  // the optimizer update on host buffers: one thread is plenty
        full_(model_.params()), velocity_full_(model_.params()), stats_(model_.stats()),
        batch_stats_(model_.stats()), params_(static_cast<std::size_t>(mine_)),
        velocity_(params_.size(), 0.f), runs_(part_.runs(shard_)), counts_(model_.bn_counts(cfg.batch_size)),
        types_(worker_types(cfg, setup.prices, workers_)),
        status_path_(!cfg.status_file.empty() ? cfg.status_file
                     : cfg.ckpt_dir.empty()   ? std::string()
                                              : (std::filesystem::path(cfg.ckpt_dir) / "run-status.json").string()) {}

  TrainResult run();

 private:
  bool lead() const { return shard_ == 0; }
  // The momentum applied now: --momentum less the implicit momentum of the active workers'
  // asynchrony (1 - 1/N) under --momentum-correction implicit.
  double momentum_now() const {
    if (cfg_.momentum_correction != "implicit" || active_ <= 1) return cfg_.momentum;
    return std::max(0.0, cfg_.momentum - (1.0 - 1.0 / active_));
  }
  void start_state();
  void handle_worker(WorkerState& s);
  bool apply_push(WorkerState& s, const MsgHeader& h);
  void accept_segment(WorkerState& s, const MsgHeader& h);
  // The worker's previous reply is complete, within --failure-timeout; false: the worker is
  // dropped as lost (its buffers abandoned).
  bool settle_send(WorkerState& s);
  bool reply(WorkerState& s, MsgKind kind);
  // Fault tolerance.
  enum class Departure { kLost, kLeft };
  void drop(WorkerState& s, Departure how, const std::string& detail, int signo = 0);
  void detect_failures();
  void check_notice();
  void begin_stop(const std::string& why);
  void write_run_status(const std::string& state, int exit_code);
  void open_for_joins();
  void take_joins();
  double lr_divisor() const { return cfg_.lr_scaling == "active-workers" ? std::max(1, active_) : 1; }
  double startup_grace() const { return std::max(60.0, 10 * cfg_.failure_timeout); }
  // Shards wait for each other with this deadline: a lost shard is a lost parameter server.
  double shard_deadline() const { return std::max(60.0, cfg_.drain_deadline + 10 * cfg_.failure_timeout); }
  Error shard_lost(int k) const {
    return Error(kExitPsLost, "parameter-server shard " + std::to_string(k) + " did not answer within " +
                                  std::to_string(static_cast<int>(shard_deadline())) + " s: the parameter server is lost");
  }
  void wait_shard(MPI_Request* req, int k) const {
    if (!wait_for(req, shard_deadline())) throw shard_lost(k);
  }
  void after_step(double lr);
  void log_progress(double lr);
  // Shard 0: checkpoints, evaluation.
  void request_snapshot(unsigned purposes);
  void poll_background();
  void finish_gather();
  TrainProgress progress_now() const;
  // Every shard for `run_seconds` of this attempt, each worker for its active seconds.
  double cost_so_far(double run_seconds) const;
  void report_written();
  void report_evals(const std::vector<BackgroundEval::Done>& done);
  // Shards > 0.
  void answer_request(const MsgHeader& request);
  void send_state(Buffer& buf, int tag, MsgKind kind, std::int64_t id, MPI_Request* req);
  TrainResult finish();

  FaultPlan plan_;
  const TrainConfig& cfg_;
  const RunSetup& setup_;
  std::ostream& log_;
  const int shards_, shard_, workers_;
  const int slots_;  // data shards: the launched workers, or --max-workers
  const Model model_;
  const Partition part_;
  const std::int64_t mine_, stats_floats_;
  MetricsWriter metrics_;
  std::unique_ptr<Backend> backend_;
  FlatTensors full_, velocity_full_, stats_, batch_stats_;
  // This shard's part, packed. The newest parameters live in `current_`: at first in params_,
  // then in the reply buffer of the worker whose push was applied last (each update reads the
  // newest parameters and writes the updated ones straight into the next reply, so a reply costs
  // no copy). A buffer with a send in flight is only read, never written.
  std::vector<float> params_, velocity_;
  float* current_ = nullptr;
  std::span<const float> current() const { return {current_, static_cast<std::size_t>(mine_)}; }
  const std::vector<Partition::Run> runs_;
  const std::vector<std::int64_t> counts_;
  const std::vector<std::string> types_;
  const std::string status_path_;

  // Fault tolerance: buffers handed to lost workers (MPI may still write or read them: kept
  // alive, never reused), the stop on a notice.
  std::vector<Buffer> abandoned_;
  int lost_ = 0, left_ = 0, joined_ = 0;
  int shm_workers_ = 0;  // workers whose pushes to this shard travel through shared memory
  std::shared_ptr<JoinQueue> joins_;  // shard 0 with --max-workers
  std::vector<LoaderCursor> slot_cursors_;  // each data shard's cursor after its last applied push
  bool stopping_ = false;          // a notice or no worker left: apply no more pushes
  int notice_ = 0;                 // the notice signal
  std::string stop_reason_;
  int exit_code_ = kExitOk;
  Clock::time_point stop_at_{};
  std::int64_t stop_step_ = -1, last_ckpt_step_ = -1;
  bool stop_durable_reported_ = false;

  TrainProgress prev_;  // what earlier attempts did (a resume)
  std::vector<LoaderCursor> start_cursors_;
  std::string config_json_ = "{}";
  std::int64_t step_ = 0;
  int active_ = 0;
  std::vector<WorkerState> ws_;
  Clock::time_point t0_, window_start_, last_ckpt_;
  double window_loss_ = 0;
  std::int64_t window_pushes_ = 0, window_correct_ = 0, window_images_ = 0, total_images_ = 0;
  std::int64_t dropped_ = 0;
  double max_staleness_ = 0;

  // Shard 0: state being assembled for a checkpoint and/or an evaluation.
  std::optional<ckpt::AsyncWriter> writer_;
  std::optional<BackgroundEval> eval_;
  bool gathering_ = false;
  unsigned gather_purposes_ = 0, pending_purposes_ = 0;
  std::int64_t gather_id_ = 0;
  double gather_stall_ = 0;
  Clock::time_point gather_started_{};
  FlatTensors snap_params_{model_.params()}, snap_velocity_{model_.params()}, snap_stats_{model_.stats()};
  TrainProgress snap_progress_;
  std::vector<Buffer> gather_bufs_, request_bufs_;
  std::vector<MPI_Request> gather_reqs_, request_sreqs_;
  // Shards > 0: requests from shard 0 and the answers.
  Buffer control_{0}, snapshot_;
  MPI_Request control_req_ = MPI_REQUEST_NULL, snapshot_req_ = MPI_REQUEST_NULL;
};

// Every shard starts from the same state: shard 0 resumes (or initializes) and hands each shard
// its part, with the global step. Blocking calls are fine here: no worker is served yet.
void Shard::start_state() {
  model_.init_params(full_, stats_, cfg_.seed);
  if (lead()) {
    if (auto found = find_resume_checkpoint(cfg_, model_, metrics_, log_)) {
      prev_ = restore_checkpoint(found->checkpoint, model_, full_, velocity_full_, stats_);
      prev_.attempts += 1;
      if (!cfg_.quiet)
        log_ << "mpi_trainer: resumed from " << found->file.string() << " at global step " << prev_.global_step
             << " (attempt " << prev_.attempts << ")\n";
      metrics_.write(nlohmann::ordered_json{{"event", "resume"}, {"file", found->file.string()},
                                            {"global_step", prev_.global_step}, {"attempt", prev_.attempts},
                                            {"saved_workers", prev_.worker_cursors.size()}});
    }
    start_cursors_ = start_cursors(prev_, slots_);
    for (int k = 1; k < shards_; ++k) {
      Buffer b(2 * part_.floats(k));
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kParams;
      b.header().step = prev_.global_step;
      b.header().payload = 2 * part_.floats(k);
      part_.pack(k, full_, std::span<float>(b.payload(), static_cast<std::size_t>(part_.floats(k))));
      part_.pack(k, velocity_full_,
                 std::span<float>(b.payload() + part_.floats(k), static_cast<std::size_t>(part_.floats(k))));
      MT_MPI(MPI_Send(b.data.data(), b.count(), MPI_FLOAT, k, kTagControl, MPI_COMM_WORLD));
    }
    part_.pack(0, full_, params_);
    part_.pack(0, velocity_full_, velocity_);
  } else {
    Buffer b(2 * mine_);
    MT_MPI(MPI_Recv(b.data.data(), b.count(), MPI_FLOAT, 0, kTagControl, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    if (const auto bad = check_header(b.header(), 2 * mine_); !bad.empty())
      throw Error(kExitInternal, "parameter server shard " + std::to_string(shard_) + ": bad start state: " + bad);
    prev_.global_step = b.header().step;
    std::copy_n(b.payload(), mine_, params_.data());
    std::copy_n(b.payload() + mine_, mine_, velocity_.data());
  }
  step_ = prev_.global_step;
  current_ = params_.data();
  plan_.started_at(step_);
}

// The worker has the previous reply (it sent again), so this send is done or nearly.
bool Shard::settle_send(WorkerState& s) {
  if (wait_for(&s.sreq, cfg_.failure_timeout)) return true;
  drop(s, Departure::kLost, "its previous reply was not taken within --failure-timeout");
  return false;
}

bool Shard::reply(WorkerState& s, MsgKind kind) {
  if (!settle_send(s)) return false;
  MsgHeader& h = s.send.header();
  h = MsgHeader{};
  h.kind = kind;
  h.step = step_;
  h.model_version = step_;
  h.payload = kind == MsgKind::kParams ? mine_ : 0;
  if (kind == MsgKind::kParams && current_ != s.send.payload())
    std::copy_n(current_, mine_, s.send.payload());  // a join or a dropped push; updates write in place
  if (!s.joined) {  // the reply to a join: where its data starts, its data shard of how many
    h.cursor_epoch = s.cursor.epoch;
    h.cursor_position = s.cursor.position;
    h.correct = s.slot;
    h.batch = slots_;
    if (s.send.shared) h.reserved = kShmAccepted;
  } else if (kind == MsgKind::kStop && lost_ == 0) {
    h.reserved = kCleanEnd;
  }
  isend(s.send, h.payload, s.peer, kTagToWorker, &s.sreq, s.comm);
  s.last_reply = Clock::now();
  return true;
}

bool Shard::apply_push(WorkerState& s, const MsgHeader& h) {
  const float* g = s.recv.payload();
  const double staleness = double(step_ - h.model_version);
  double lr = setup_.schedule.lr_at(step_);
  if (cfg_.lr_scaling == "active-workers")
    lr /= std::max(1, active_);
  else if (cfg_.lr_scaling == "staleness")
    lr /= 1.0 + staleness;
  const double momentum = momentum_now();
  // The worker's previous reply is complete (it pushed again), so its buffer takes the update.
  if (!settle_send(s)) return false;
  const std::span<float> out(s.send.payload(), static_cast<std::size_t>(mine_));
  for (const auto& r : runs_) {
    const auto o = static_cast<std::size_t>(r.offset), len = static_cast<std::size_t>(r.length);
    backend_->sgd_update_to(current().subspan(o, len), std::span<const float>(g + o, len),
                            std::span<float>(velocity_).subspan(o, len), out.subspan(o, len),
                            SgdSpec{static_cast<float>(lr), static_cast<float>(momentum),
                                    r.decay ? static_cast<float>(cfg_.weight_decay) : 0.f, setup_.nesterov});
  }
  current_ = out.data();
  if (lead()) {
    std::copy(g + mine_, g + mine_ + stats_floats_, batch_stats_.flat().data());
    model_.update_running_stats(stats_, batch_stats_, counts_);
    s.cursor = LoaderCursor{h.cursor_epoch, h.cursor_position};
    slot_cursors_[static_cast<std::size_t>(s.slot)] = s.cursor;
  }
  ++step_;
  if (lead() && step_ == prev_.global_step + 1)  // bench/fault_bench.sh: restart to first step
    metrics_.write(nlohmann::ordered_json{{"event", "first_step"}, {"global_step", step_}, {"unix_time", unix_now()},
                                          {"seconds_since_start", since(t0_)}});
  ++s.pushes;
  s.staleness_sum += staleness;
  ++s.window_pushes;
  s.window_images += h.batch;
  s.window_staleness += staleness;
  window_loss_ += h.loss;
  window_correct_ += h.correct;
  window_images_ += h.batch;
  total_images_ += h.batch;
  max_staleness_ = std::max(max_staleness_, staleness);
  ++window_pushes_;
  const bool replied = reply(s, MsgKind::kParams);
  if (lead()) after_step(lr);
  plan_.at_step(shard_, step_);
  return replied;
}

// A joining worker on this node offered a segment for this pair: map it and move both buffers'
// payloads there. A worker on another node (no such segment here) keeps plain messages.
void Shard::accept_segment(WorkerState& s, const MsgHeader& h) {
  const auto* chars = reinterpret_cast<const char*>(s.recv.payload());
  const std::string name(chars, strnlen(chars, static_cast<std::size_t>(h.payload) * sizeof(float)));
  std::string why;
  auto seg = ShmSegment::open(name, shm_bytes(mine_ + stats_floats_, mine_), &why);
  if (!seg) {
    if (std::getenv("MT_PS_SHM_DEBUG"))
      log_ << "mpi_trainer: shard " << shard_ << ": worker rank " << s.rank << ": plain messages (" << why << ")\n";
    return;
  }
  s.recv.share(seg, 0);
  s.send.share(seg, shm_reply_offset(mine_ + stats_floats_));
  ++shm_workers_;
}

void Shard::handle_worker(WorkerState& s) {
  const MsgHeader h = s.recv.header();
  if (const auto bad = check_header(h, mine_ + stats_floats_); !bad.empty())
    throw Error(kExitInternal, "parameter server: malformed message from rank " + std::to_string(s.rank) + ": " + bad);
  s.last_heard = Clock::now();
  s.heard = true;
  switch (h.kind) {
    case MsgKind::kJoin:
      if (h.model_version != model_.param_count() || h.batch != cfg_.batch_size) {
        // A worker started with another model or batch size (a `join` with other flags).
        if (lead())
          log_ << "mpi_trainer: worker rank " << s.rank << " refused: it trains a model of " << h.model_version
               << " parameters with batch " << h.batch << ", this job " << model_.param_count() << " with batch "
               << cfg_.batch_size << " (give it the job's --model and --batch-size)\n" << std::flush;
        if (!reply(s, MsgKind::kStop)) return;
        s.done = true;
        --active_;
        return;
      }
      if (h.reserved == kShmOffer && h.payload > 0 && shm_transport_enabled()) accept_segment(s, h);
      if (!reply(s, MsgKind::kParams)) return;
      s.joined = true;
      s.joined_at = Clock::now();
      break;
    case MsgKind::kPush:
      if (step_ >= cfg_.train_steps || stopping_) {
        // The end, or a notice: this push is not applied.
        if (!reply(s, MsgKind::kStop)) return;
        s.done = true;
        s.active_seconds = since(s.joined_at);
        --active_;
        return;  // no new receive
      }
      if (cfg_.max_staleness >= 0 && step_ - h.model_version > cfg_.max_staleness) {
        // Too stale: not applied; the worker gets the current parameters and computes again.
        ++s.dropped;
        ++dropped_;
        if (!reply(s, MsgKind::kParams)) return;
        break;
      }
      if (!apply_push(s, h)) return;
      break;
    case MsgKind::kLeave:
      // A preemption notice reached the worker: it pushed its last step and is gone.
      drop(s, Departure::kLeft, "left on a preemption notice", h.reserved);
      return;
    case MsgKind::kStop:
      // Another shard ended training for this worker first; it sends no more pushes.
      s.done = true;
      s.active_seconds = since(s.joined_at);
      --active_;
      return;
    default:
      throw Error(kExitInternal, "parameter server: unexpected message kind from rank " + std::to_string(s.rank));
  }
  irecv(s.recv, s.peer, kTagToPs, &s.rreq, s.comm);
}

// A worker is gone: lost (silent past --failure-timeout: revoked, killed, or cut off) or left on a
// notice. The learning-rate policy and the momentum correction follow the new worker count.
void Shard::drop(WorkerState& s, Departure how, const std::string& detail, int signo) {
  const auto now = Clock::now();
  const bool lost = how == Departure::kLost;
  s.done = true;
  // Billed until its last sign of life.
  s.active_seconds = s.joined ? std::max(0.0, seconds_between(s.joined_at, lost ? s.last_heard : now)) : 0.0;
  --active_;
  if (lost) {
    s.lost = true;
    ++lost_;
    // The newest parameters may live in its reply buffer, which is abandoned now.
    if (current_ == s.send.payload()) {
      std::copy_n(current_, mine_, params_.data());
      current_ = params_.data();
    }
    abandoned_.push_back(std::move(s.recv));
    abandoned_.push_back(std::move(s.send));
    abandoned_.push_back(std::move(s.hb));
    s.rreq = s.sreq = s.hbreq = MPI_REQUEST_NULL;  // never waited for, never cancelled
  } else {
    s.left = true;
    ++left_;
  }
  if (!lead()) return;
  const double silent = s.heard ? seconds_between(s.last_heard, now) : since(t0_);
  // A lost worker was computing on the parameters of its last reply: that step is lost.
  const bool computing = lost && s.joined;
  metrics_.write(nlohmann::ordered_json{
      {"event", "revocation"}, {"global_step", step_}, {"rank", s.rank}, {"instance_type", s.type},
      {"cause", lost ? "lost" : "notice"}, {"detail", detail},
      {"signal", signo > 0 ? nlohmann::ordered_json(signal_name(signo)) : nlohmann::ordered_json()},
      {"silent_seconds", silent}, {"unix_time", unix_now()}, {"elapsed_seconds", since(t0_)},
      {"work_lost_steps", computing ? 1 : 0},
      {"work_lost_seconds", computing ? std::max(0.0, seconds_between(s.last_reply, s.last_heard)) : 0.0},
      {"active_seconds", s.active_seconds}, {"active_workers", active_}, {"lr_divisor", lr_divisor()},
      {"momentum", momentum_now()}});
  if (!cfg_.quiet)
    log_ << "revocation: worker rank " << s.rank << " (" << s.type << ") " << (lost ? "lost" : "left") << " at global step "
         << step_ << ": " << detail << (lost ? " (silent for " + std::to_string(silent).substr(0, 4) + " s)" : std::string())
         << "; " << active_ << " worker(s) remain"
         << (cfg_.lr_scaling == "active-workers" && active_ > 0 ? ", learning rate / " + std::to_string(active_) : std::string())
         << '\n' << std::flush;
  if (active_ == 0 && step_ < cfg_.train_steps && !stopping_) {
    if (cfg_.max_workers > 0)
      log_ << "mpi_trainer: no worker left at global step " << step_ << ": waiting for workers to join\n" << std::flush;
    else
      begin_stop("every worker was revoked");
  }
}

void Shard::detect_failures() {
  const auto now = Clock::now();
  for (auto& s : ws_) {
    if (s.done) continue;
    const double silent = seconds_between(s.heard ? s.last_heard : t0_, now);
    if (silent > (s.heard ? cfg_.failure_timeout : startup_grace()))
      drop(s, Departure::kLost, s.heard ? "no push or heartbeat within --failure-timeout" : "never joined");
    else if (stopping_ && seconds_between(stop_at_, now) > cfg_.drain_deadline)
      drop(s, Departure::kLost, "did not stop within --drain-deadline");
  }
}

void Shard::check_notice() {
  if (notice_) return;
  if (const int sig = notice_signal()) {
    notice_ = sig;
    if (!stopping_) begin_stop(signal_name(sig));
  }
}

// A notice (or the loss of every worker): checkpoint at once, refuse further pushes (each worker
// is told to stop at its next push), then end with exit 75, so that a launcher reruns the job.
void Shard::begin_stop(const std::string& why) {
  stopping_ = true;
  stop_reason_ = why;
  exit_code_ = kExitRequeue;
  stop_at_ = Clock::now();
  stop_step_ = step_;
  if (!cfg_.quiet)
    log_ << "mpi_trainer: parameter server shard " << shard_ << ": " << why << " at global step " << step_
         << (lead() ? (writer_ ? ": checkpointing now, stopping the workers" : ": stopping the workers (no --ckpt-dir: nothing is saved)")
                    : ": stopping the workers")
         << '\n' << std::flush;
  if (!lead()) return;
  metrics_.write(nlohmann::ordered_json{{"event", "stop"}, {"reason", why}, {"global_step", step_},
                                        {"unix_time", unix_now()}, {"active_workers", active_}});
  if (writer_) request_snapshot(kForCheckpoint);
  for (int k = 1; k < shards_; ++k) {
    const auto i = static_cast<std::size_t>(k - 1);
    wait_shard(&request_sreqs_[i], k);  // a 64-byte message sent long ago
    request_bufs_[i].header() = MsgHeader{};
    request_bufs_[i].header().kind = MsgKind::kDrain;
    isend(request_bufs_[i], 0, k, kTagControl, &request_sreqs_[i]);
  }
}

void Shard::write_run_status(const std::string& state, int exit_code) {
  if (!lead() || status_path_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(status_path_).parent_path(), ec);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  write_status(status_path_, nlohmann::ordered_json{
                                 {"state", state}, {"exit_code", state == "running" ? nlohmann::ordered_json() : nlohmann::ordered_json(exit_code)},
                                 {"global_step", step_}, {"train_steps", cfg_.train_steps}, {"attempt", prev_.attempts},
                                 {"stopped_by", stop_reason_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(stop_reason_)},
                                 {"revocations", lost_ + left_}, {"pid", static_cast<long>(getpid())}, {"host", host},
                                 {"unix_time", unix_now()}});
}

// --max-workers: a port for `mpi_trainer join`, written to the port file, and the accept thread.
void Shard::open_for_joins() {
  char port[MPI_MAX_PORT_NAME] = {};
  MT_MPI(MPI_Open_port(MPI_INFO_NULL, port));
  joins_ = std::make_shared<JoinQueue>();
  joins_->port = port;
  const std::string file = join_port_file(cfg_);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
  write_status(file, nlohmann::ordered_json{{"port", joins_->port}, {"pid", static_cast<long>(getpid())},
                                            {"model", setup_.spec.name}, {"batch_size", cfg_.batch_size},
                                            {"max_workers", cfg_.max_workers}});
  std::thread(accept_joins, joins_).detach();
  if (!cfg_.quiet)
    log_ << "mpi_trainer: accepting up to " << cfg_.max_workers << " workers: `mpi_trainer join --port-file " << file
         << "` (under mpirun --ompi-server, docs/fault-model.md)\n" << std::flush;
}

void Shard::take_joins() {
  std::vector<MPI_Comm> comms;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(joins_->mutex);
    comms.swap(joins_->comms);
    error.swap(joins_->error);
    joins_->pending = 0;
  }
  if (!error.empty()) log_ << "mpi_trainer: warning: " << error << '\n' << std::flush;
  for (const MPI_Comm comm : comms) {
    std::vector<bool> used(static_cast<std::size_t>(slots_), false);
    for (const auto& w : ws_)
      if (!w.done) used[static_cast<std::size_t>(w.slot)] = true;
    const auto free_slot = std::find(used.begin(), used.end(), false);
    if (stopping_ || active_ >= cfg_.max_workers || free_slot == used.end()) {
      // Full (or stopping): the joiner's join is answered with stop.
      abandoned_.emplace_back(0);
      Buffer& b = abandoned_.back();
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kStop;
      MPI_Request req = MPI_REQUEST_NULL;
      isend(b, 0, 0, kTagToWorker, &req, comm);
      MT_MPI(MPI_Request_free(&req));
      log_ << "mpi_trainer: a worker asked to join, but " << (stopping_ ? "the job is stopping" : "every slot is taken")
           << " (--max-workers " << cfg_.max_workers << ")\n" << std::flush;
      continue;
    }
    WorkerState& s = ws_.emplace_back();
    s.comm = comm;
    s.peer = 0;
    s.rank = shards_ + workers_ + joined_;
    s.slot = static_cast<int>(free_slot - used.begin());
    s.type = cfg_.instance_type;
    s.recv = Buffer(mine_ + stats_floats_);
    s.send = Buffer(mine_);
    s.cursor = slot_cursors_[static_cast<std::size_t>(s.slot)];
    s.last_heard = Clock::now();
    irecv(s.recv, s.peer, kTagToPs, &s.rreq, s.comm);
    irecv(s.hb, s.peer, kTagHeartbeat, &s.hbreq, s.comm);
    ++active_;
    ++joined_;
    metrics_.write(nlohmann::ordered_json{{"event", "join"}, {"global_step", step_}, {"rank", s.rank},
                                          {"slot", s.slot}, {"instance_type", s.type}, {"active_workers", active_},
                                          {"lr_divisor", lr_divisor()}, {"momentum", momentum_now()},
                                          {"unix_time", unix_now()}});
    if (!cfg_.quiet)
      log_ << "join: worker rank " << s.rank << " (" << s.type << ") joined at global step " << step_ << " in data slot "
           << s.slot << "; " << active_ << " worker(s)"
           << (cfg_.lr_scaling == "active-workers" ? ", learning rate / " + std::to_string(active_) : std::string())
           << '\n' << std::flush;
  }
}

void Shard::after_step(double lr) {
  const auto log_every = std::max<std::int64_t>(1, cfg_.log_every_steps);
  if (step_ % log_every == 0 || step_ == cfg_.train_steps) log_progress(lr);
  if (step_ >= cfg_.train_steps || stopping_) return;  // the final checkpoint and evaluation follow
  unsigned want = 0;
  if (writer_ && ((cfg_.ckpt_every_steps > 0 && step_ % cfg_.ckpt_every_steps == 0) ||
                  (cfg_.ckpt_every_seconds > 0 && since(last_ckpt_) >= cfg_.ckpt_every_seconds)))
    want |= kForCheckpoint;
  if (eval_ && cfg_.eval_every_steps > 0 && step_ % cfg_.eval_every_steps == 0) {
    if (eval_->busy() || (gathering_ && (gather_purposes_ & kForEval))) {
      metrics_.write(nlohmann::ordered_json{{"event", "eval_skipped"}, {"global_step", step_},
                                            {"reason", "the previous evaluation is still running"}});
    } else {
      want |= kForEval;
    }
  }
  if (want) request_snapshot(want);
}

void Shard::log_progress(double lr) {
  const double dt = since(window_start_), ips = double(window_images_) / std::max(dt, 1e-9);
  const double mean_loss = window_loss_ / double(std::max<std::int64_t>(window_pushes_, 1));
  const double mean_stale = [&] {
    double sum = 0;
    for (const auto& w : ws_) sum += w.window_staleness;
    return sum / double(std::max<std::int64_t>(window_pushes_, 1));
  }();
  const double done_fraction = double(step_ - prev_.global_step) / double(std::max<std::int64_t>(cfg_.train_steps - prev_.global_step, 1));
  const double eta = done_fraction > 0 ? since(t0_) * (1 - done_fraction) / done_fraction : -1;
  if (!cfg_.quiet) {
    log_ << "step " << step_ << "/" << cfg_.train_steps << "  loss " << std::fixed << std::setprecision(4)
         << mean_loss << "  lr " << lr << "  img/s " << std::setprecision(1) << ips << "  workers "
         << active_ << "  staleness " << mean_stale << "  eta ";
    if (eta >= 0)
      log_ << static_cast<long long>(eta + 0.5) << " s";
    else
      log_ << '?';
    log_ << '\n' << std::flush;
  }
  nlohmann::ordered_json per_worker = nlohmann::ordered_json::array();
  for (auto& w : ws_) {
    per_worker.push_back(nlohmann::ordered_json{
        {"rank", w.rank}, {"instance_type", w.type}, {"pushes", w.window_pushes},
        {"images_per_second", double(w.window_images) / std::max(dt, 1e-9)},
        {"mean_staleness", w.window_pushes ? w.window_staleness / double(w.window_pushes) : 0.0},
        {"active", w.joined && !w.done}});
    w.window_pushes = w.window_images = 0;
    w.window_staleness = 0;
  }
  metrics_.write(nlohmann::ordered_json{
      {"event", "progress"}, {"global_step", step_}, {"loss", mean_loss},
      {"train_accuracy", double(window_correct_) / double(std::max<std::int64_t>(window_images_, 1))},
      {"lr", lr}, {"momentum", momentum_now()}, {"images_per_second", ips}, {"active_workers", active_},
      {"mean_staleness", mean_stale},
      {"dropped_stale_pushes", dropped_}, {"elapsed_seconds", since(t0_)}, {"workers", per_worker}});
  window_start_ = Clock::now();
  window_loss_ = 0;
  window_pushes_ = window_correct_ = window_images_ = 0;
}

double Shard::cost_so_far(double run_seconds) const {
  double c = prev_.cost_usd + shards_ * setup_.prices.cost_usd(cfg_.ps_type, setup_.transient, run_seconds);
  for (const auto& w : ws_) c += setup_.prices.cost_usd(w.type, setup_.transient, w.seconds_active());
  return c;
}

TrainProgress Shard::progress_now() const {
  TrainProgress p = prev_;
  p.global_step = step_;
  p.worker_cursors.clear();
  for (const auto& c : slot_cursors_) p.worker_cursors.push_back({c.epoch, c.position});
  p.epoch = ws_.front().cursor.epoch;
  p.position = ws_.front().cursor.position;
  const double run_seconds = since(t0_);
  p.train_seconds = prev_.train_seconds + run_seconds;
  p.cost_usd = cost_so_far(run_seconds);
  p.lr = setup_.schedule.lr_at(std::max<std::int64_t>(step_ - 1, 0));
  return p;
}

// Shard 0: copies its own part now and asks the other shards for theirs; the snapshot is
// complete when every part arrived (poll_background). Only this copy stalls training.
void Shard::request_snapshot(unsigned purposes) {
  if (gathering_) {
    pending_purposes_ |= purposes;
    return;
  }
  const auto t = Clock::now();
  gathering_ = true;
  gather_purposes_ = purposes;
  gather_started_ = t;
  ++gather_id_;
  part_.unpack(0, current(), snap_params_);
  part_.unpack(0, velocity_, snap_velocity_);
  std::copy_n(stats_.flat().data(), stats_.flat().numel(), snap_stats_.flat().data());
  snap_progress_ = progress_now();
  for (int k = 1; k < shards_; ++k) {
    const auto i = static_cast<std::size_t>(k - 1);
    wait_shard(&request_sreqs_[i], k);  // a 64-byte message sent long ago
    request_bufs_[i].header() = MsgHeader{};
    request_bufs_[i].header().kind = MsgKind::kSnapshotRequest;
    request_bufs_[i].header().model_version = gather_id_;
    isend(request_bufs_[i], 0, k, kTagControl, &request_sreqs_[i]);
    irecv(gather_bufs_[i], k, kTagSnapshot, &gather_reqs_[i]);
  }
  gather_stall_ = since(t);
  if (shards_ == 1) finish_gather();
}

void Shard::finish_gather() {
  const auto t = Clock::now();
  for (int k = 1; k < shards_; ++k) {
    Buffer& b = gather_bufs_[static_cast<std::size_t>(k - 1)];
    if (const auto bad = check_header(b.header(), 2 * part_.floats(k)); !bad.empty())
      throw Error(kExitInternal, "parameter server: bad snapshot from shard " + std::to_string(k) + ": " + bad);
    const auto n = static_cast<std::size_t>(part_.floats(k));
    part_.unpack(k, std::span<const float>(b.payload(), n), snap_params_);
    part_.unpack(k, std::span<const float>(b.payload() + n, n), snap_velocity_);
  }
  if (gather_purposes_ & kForCheckpoint) {
    writer_->submit(make_checkpoint(model_, snap_params_, snap_velocity_, snap_stats_, snap_progress_, config_json_,
                                    writer_->take_spare()));
    last_ckpt_ = Clock::now();
    last_ckpt_step_ = snap_progress_.global_step;
  }
  if (gather_purposes_ & kForEval) eval_->start(snap_progress_.global_step, snap_params_, snap_stats_);
  const double stall = gather_stall_ + since(t);
  if (gather_purposes_ & kForCheckpoint)
    metrics_.write(nlohmann::ordered_json{{"event", "checkpoint_snapshot"}, {"global_step", snap_progress_.global_step},
                                          {"stall_seconds", stall}, {"gather_seconds", since(gather_started_)}});
  gathering_ = false;
  if (const unsigned next = std::exchange(pending_purposes_, 0u)) request_snapshot(next);
}

void Shard::report_written() {
  if (!writer_) return;
  for (const auto& w : writer_->take_written()) {
    metrics_.write(nlohmann::ordered_json{
        {"event", "checkpoint"}, {"global_step", w.global_step}, {"file", w.file.string()},
        {"write_seconds", w.stats.write_seconds}, {"sync_seconds", w.stats.sync_seconds}, {"bytes", w.stats.bytes}});
    if (stopping_ && !stop_durable_reported_ && w.global_step >= stop_step_) {
      // The stop's checkpoint is on disk (fsync'ed and published): the figure the cloud's grace
      // period (30 s on GCE, 2 min on EC2) must cover.
      stop_durable_reported_ = true;
      const double dt = since(stop_at_);
      metrics_.write(nlohmann::ordered_json{{"event", "stop_checkpoint_durable"}, {"global_step", w.global_step},
                                            {"seconds_after_stop", dt}, {"file", w.file.string()}});
      if (!cfg_.quiet)
        log_ << "mpi_trainer: checkpoint of global step " << w.global_step << " durable " << std::setprecision(3)
             << dt << " s after the " << stop_reason_ << '\n' << std::flush;
    }
  }
}

void Shard::report_evals(const std::vector<BackgroundEval::Done>& done) {
  for (const auto& d : done) {
    if (!cfg_.quiet)
      log_ << "eval step " << d.step << "  test_acc " << std::setprecision(4) << d.result.accuracy
           << "  test_loss " << d.result.loss << "  (" << std::setprecision(1) << d.seconds << " s, in the background)\n"
           << std::flush;
    metrics_.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", d.step}, {"test_accuracy", d.result.accuracy},
                                          {"test_loss", d.result.loss}, {"eval_seconds", d.seconds},
                                          {"background", true}});
  }
}

void Shard::poll_background() {
  if (!lead()) return;
  if (gathering_ && shards_ > 1) {
    int all = 0;
    MT_MPI(MPI_Testall(static_cast<int>(gather_reqs_.size()), gather_reqs_.data(), &all, MPI_STATUSES_IGNORE));
    if (all) finish_gather();
  }
  if (writer_ && cfg_.ckpt_every_seconds > 0 && !gathering_ && step_ < cfg_.train_steps &&
      since(last_ckpt_) >= cfg_.ckpt_every_seconds)
    request_snapshot(kForCheckpoint);
  report_written();
  if (eval_) report_evals(eval_->take_done());
}

void Shard::send_state(Buffer& buf, int tag, MsgKind kind, std::int64_t id, MPI_Request* req) {
  buf.header() = MsgHeader{};
  buf.header().kind = kind;
  buf.header().step = step_;
  buf.header().model_version = id;
  buf.header().payload = 2 * mine_;
  std::copy_n(current_, mine_, buf.payload());
  std::copy(velocity_.begin(), velocity_.end(), buf.payload() + mine_);
  if (req)
    isend(buf, 2 * mine_, 0, tag, req);
  else
    MT_MPI(MPI_Send(buf.data.data(), buf.count(), MPI_FLOAT, 0, tag, MPI_COMM_WORLD));
}

// Shards > 0: shard 0 asked for this shard's part (it took the previous answer before asking).
void Shard::answer_request(const MsgHeader& request) {
  wait_shard(&snapshot_req_, 0);
  send_state(snapshot_, kTagSnapshot, MsgKind::kSnapshot, request.model_version, &snapshot_req_);
}

TrainResult Shard::run() {
  start_state();
  if (lead()) {
    const nlohmann::ordered_json config{
        {"event", "config"}, {"model", setup_.spec.name}, {"parameters", model_.param_count()},
        {"data", setup_.data_dir}, {"data_format", setup_.data.format}, {"train_steps", cfg_.train_steps},
        {"batch_size", cfg_.batch_size}, {"num_ps", shards_}, {"workers", workers_},
        {"lr_schedule", setup_.schedule.describe()}, {"momentum", cfg_.momentum},
        {"nesterov", setup_.nesterov}, {"weight_decay", cfg_.weight_decay}, {"seed", cfg_.seed},
        {"lr_scaling", cfg_.lr_scaling}, {"momentum_correction", cfg_.momentum_correction},
        {"max_staleness", cfg_.max_staleness},
        {"worker_types", types_}, {"ps_type", cfg_.ps_type}, {"pricing", cfg_.pricing},
        {"prices", setup_.prices.source()}, {"ckpt_dir", cfg_.ckpt_dir}, {"resume", cfg_.resume},
        {"synthetic_gradients", cfg_.synthetic_gradients}, {"processes", workers_ + shards_}};
    metrics_.write(config);
    config_json_ = config.dump();
    if (!cfg_.quiet)
      log_ << "mpi_trainer: parameter server: " << shards_ << " shard(s), " << workers_ << " worker(s), "
           << setup_.spec.name << " (" << model_.param_count() << " parameters) on " << setup_.data.format
           << ", " << cfg_.train_steps << " global steps of " << cfg_.batch_size << ", lr "
           << setup_.schedule.describe() << ", lr scaling " << cfg_.lr_scaling << ", momentum " << cfg_.momentum
           << (cfg_.momentum_correction == "implicit" && workers_ > 1
                   ? " (applied with " + std::to_string(workers_) + " workers: " +
                         std::to_string(std::max(0.0, cfg_.momentum - (1.0 - 1.0 / workers_))).substr(0, 5) + ")"
                   : std::string())
           << '\n' << std::flush;
    if (!cfg_.ckpt_dir.empty()) {
      writer_.emplace(cfg_.ckpt_dir, cfg_.ckpt_keep);
      // The first snapshot's memory, allocated now rather than in the first checkpoint's stall.
      writer_->give_spare(make_checkpoint(model_, full_, velocity_full_, stats_, prev_, config_json_));
    }
    if (cfg_.eval_every_steps > 0) eval_.emplace(model_, setup_, cfg_.batch_size, 1);
    for (int k = 1; k < shards_; ++k) {
      gather_bufs_.emplace_back(2 * part_.floats(k));
      request_bufs_.emplace_back(0);
    }
    gather_reqs_.assign(gather_bufs_.size(), MPI_REQUEST_NULL);
    request_sreqs_.assign(gather_bufs_.size(), MPI_REQUEST_NULL);
  } else {
    snapshot_ = Buffer(2 * mine_);
    irecv(control_, 0, kTagControl, &control_req_);
  }

  if (lead()) slot_cursors_ = start_cursors_;
  ws_.resize(static_cast<std::size_t>(workers_));
  for (int w = 0; w < workers_; ++w) {
    auto& s = ws_[static_cast<std::size_t>(w)];
    s.rank = s.peer = shards_ + w;
    s.slot = w;
    s.type = types_[static_cast<std::size_t>(w)];
    s.recv = Buffer(mine_ + stats_floats_);
    s.send = Buffer(mine_);
    if (lead()) s.cursor = start_cursors_[static_cast<std::size_t>(w)];
    irecv(s.recv, s.peer, kTagToPs, &s.rreq, s.comm);
    irecv(s.hb, s.peer, kTagHeartbeat, &s.hbreq, s.comm);
  }
  active_ = workers_;
  t0_ = window_start_ = last_ckpt_ = Clock::now();
  if (lead() && cfg_.max_workers > 0) open_for_joins();
  write_run_status("running", 0);
  if (lead())
    for (const auto& e : plan_.entries)
      if (e.ckpt_write > 0) {
        g_kill_in_ckpt_write = e.ckpt_write;
        ckpt::set_mid_write_hook(kill_in_ckpt_write);
      }

  // Workers' messages, their heartbeats, then (shards > 0) the control channel from shard 0.
  // One receive per worker (never MPI_ANY_SOURCE: a worker killed in the middle of a message
  // can leave an any-source receive hung, DESIGN.md section 7).
  std::vector<MPI_Request> rreqs;
  std::vector<int> ready;
  Backoff backoff(10, 1000);  // the time between messages from any worker
  // Heartbeats, failure detection and timed revocations are checked every 10 ms, not at every
  // message: testing twice the requests per push cost up to a fifth of the PS's throughput with
  // 8 workers (bench/ps_throughput.sh), and detection works at a scale of seconds.
  constexpr auto kSlowPoll = std::chrono::milliseconds(10);
  auto next_slow_poll = Clock::now();
  // With --max-workers the parameter server also waits, with no worker at all, for joins.
  while (active_ > 0 || (cfg_.max_workers > 0 && !stopping_ && step_ < cfg_.train_steps)) {
    if (joins_ && joins_->pending.load() > 0) take_joins();
    const std::size_t nw = ws_.size();  // grows when workers join
    const bool slow_poll = Clock::now() >= next_slow_poll;
    // [workers' pushes][control from shard 0, shards > 0][heartbeats, on a slow poll]
    const std::size_t nc = lead() ? 0 : 1, nh = slow_poll ? nw : 0;
    rreqs.resize(nw + nc + nh);
    ready.resize(rreqs.size());
    for (std::size_t i = 0; i < nw; ++i) rreqs[i] = ws_[i].rreq;
    if (nc) rreqs[nw] = control_req_;
    for (std::size_t i = 0; i < nh; ++i) rreqs[nw + nc + i] = ws_[i].hbreq;
    int n = 0;
    if (const int rc = MPI_Testsome(static_cast<int>(rreqs.size()), rreqs.data(), &n, ready.data(), MPI_STATUSES_IGNORE);
        rc != MPI_SUCCESS) {
      // With an ULFM MPI (cmake/ULFMProbe.cmake) a dead peer's request fails: the failed workers
      // are dropped at once instead of after --failure-timeout. Any other error is an error.
      bool handled = false;
      for (const int r : ulfm_failed_ranks(MPI_COMM_WORLD))
        for (auto& w : ws_)
          if (w.rank == r && !w.done) {
            drop(w, Departure::kLost, "the MPI library (ULFM) reported the process failed");
            handled = true;
          }
      if (!handled) MT_MPI(rc);
      n = 0;
    }
    for (std::size_t i = 0; i < nw; ++i) ws_[i].rreq = rreqs[i];
    if (nc) control_req_ = rreqs[nw];
    for (std::size_t i = 0; i < nh; ++i) ws_[i].hbreq = rreqs[nw + nc + i];
    if (n == MPI_UNDEFINED) n = 0;
    int pushes = 0;
    for (int k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(ready[static_cast<std::size_t>(k)]);
      if (i < nw) {
        handle_worker(ws_[i]);
        ++pushes;
      } else if (i >= nw + nc) {
        auto& w = ws_[i - nw - nc];
        w.last_heard = Clock::now();
        w.heard = true;
        if (!w.done) irecv(w.hb, w.peer, kTagHeartbeat, &w.hbreq, w.comm);
      } else {
        if (control_.header().kind == MsgKind::kDrain) {
          if (!stopping_) begin_stop("shard 0 stops on a notice");
        } else {
          answer_request(control_.header());
        }
        irecv(control_, 0, kTagControl, &control_req_);
      }
    }
    if (slow_poll) {
      next_slow_poll = Clock::now() + kSlowPoll;
      check_notice();
      detect_failures();
      plan_.at_time(shard_);
    }
    poll_background();
    if (pushes == 0)
      backoff.idle();
    else
      backoff.done();
  }
  for (auto& s : ws_) {
    if (s.lost) continue;
    if (!wait_for(&s.sreq, cfg_.failure_timeout)) abandoned_.push_back(std::move(s.send));
    if (s.hbreq != MPI_REQUEST_NULL) {
      MT_MPI(MPI_Cancel(&s.hbreq));
      if (!wait_for(&s.hbreq, cfg_.failure_timeout)) abandoned_.push_back(std::move(s.hb));
    }
  }
  return finish();
}

TrainResult Shard::finish() {
  const double run_seconds = since(t0_);
  TrainResult res;
  res.global_step = step_;
  res.train_seconds = prev_.train_seconds + run_seconds;
  res.images_per_second = double(total_images_) / std::max(run_seconds, 1e-9);
  res.exit_code = exit_code_;
  if (!lead()) {
    // Final state to shard 0, then answer its requests until it says stop.
    Buffer final_state(2 * mine_);
    MPI_Request final_req = MPI_REQUEST_NULL;
    send_state(final_state, kTagFinal, MsgKind::kSnapshot, 0, &final_req);
    wait_shard(&final_req, 0);
    for (;;) {
      wait_shard(&control_req_, 0);
      if (control_.header().kind == MsgKind::kStop) {
        if (control_.header().reserved == kCleanEnd && lost_ == 0) res.finalize_timeout_s = kCleanEndFinalizeSeconds;
        break;
      }
      if (control_.header().kind != MsgKind::kDrain) answer_request(control_.header());
      irecv(control_, 0, kTagControl, &control_req_);
    }
    wait_shard(&snapshot_req_, 0);
    return res;
  }

  // Shard 0: the final state of every shard, then no more requests.
  part_.unpack(0, current(), full_);
  part_.unpack(0, velocity_, velocity_full_);
  for (int k = 1; k < shards_; ++k) {
    Buffer b(2 * part_.floats(k));
    MPI_Request req = MPI_REQUEST_NULL;
    irecv(b, k, kTagFinal, &req);
    wait_shard(&req, k);
    const auto n = static_cast<std::size_t>(part_.floats(k));
    part_.unpack(k, std::span<const float>(b.payload(), n), full_);
    part_.unpack(k, std::span<const float>(b.payload() + n, n), velocity_full_);
  }
  for (int k = 1; k < shards_; ++k) {
    const auto i = static_cast<std::size_t>(k - 1);
    wait_shard(&request_sreqs_[i], k);
    request_bufs_[i].header() = MsgHeader{};
    request_bufs_[i].header().kind = MsgKind::kStop;
    if (lost_ == 0) request_bufs_[i].header().reserved = kCleanEnd;
    MT_MPI(MPI_Send(request_bufs_[i].data.data(), request_bufs_[i].count(), MPI_FLOAT, k, kTagControl, MPI_COMM_WORLD));
  }
  if (gathering_) {  // superseded by the final state
    for (std::size_t i = 0; i < gather_reqs_.size(); ++i) wait_shard(&gather_reqs_[i], static_cast<int>(i) + 1);
    gathering_ = false;
  }
  res.cost_usd = cost_so_far(run_seconds);
  if (writer_ && step_ > prev_.global_step && step_ != last_ckpt_step_) {
    const auto t = Clock::now();
    TrainProgress p = progress_now();
    p.train_seconds = res.train_seconds;
    p.cost_usd = res.cost_usd;
    writer_->submit(make_checkpoint(model_, full_, velocity_full_, stats_, p, config_json_, writer_->take_spare()));
    metrics_.write(nlohmann::ordered_json{{"event", "checkpoint_snapshot"}, {"global_step", step_},
                                          {"stall_seconds", since(t)}, {"final", true}});
  }
  if (writer_) {
    writer_->flush();
    report_written();
  }
  if (eval_) report_evals(eval_->wait());

  std::optional<EvalResult> ev;
  double eval_seconds = 0;
  if (!cfg_.synthetic_gradients && !stopping_) {  // after a notice, time is short: no evaluation
    // The workers are gone: the whole node is the evaluator's.
    auto eval_backend = make_backend(setup_.device, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    Network net(model_, *eval_backend, cfg_.batch_size);
    const auto t_eval = Clock::now();
    ev = evaluate_test_set(net, setup_.data.test, setup_.loader, full_, stats_);
    eval_seconds = since(t_eval);
    res.test_accuracy = ev->accuracy;
    res.test_loss = ev->loss;
    metrics_.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", step_}, {"test_accuracy", ev->accuracy},
                                          {"test_loss", ev->loss}, {"eval_seconds", eval_seconds}});
  }
  nlohmann::ordered_json per_worker = nlohmann::ordered_json::array();
  for (const auto& w : ws_) {
    per_worker.push_back(nlohmann::ordered_json{
        {"rank", w.rank}, {"instance_type", w.type}, {"pushes", w.pushes}, {"dropped_stale", w.dropped},
        {"active_seconds", w.active_seconds},
        {"images_per_second", double(w.pushes) * cfg_.batch_size / std::max(w.active_seconds, 1e-9)},
        {"mean_staleness", w.pushes ? w.staleness_sum / double(w.pushes) : 0.0},
        {"cost_usd", setup_.prices.cost_usd(w.type, setup_.transient, w.active_seconds)}});
  }
  metrics_.write(nlohmann::ordered_json{{"event", "workers"}, {"workers", per_worker}});
  nlohmann::ordered_json summary{
      {"event", "summary"}, {"global_step", step_}, {"train_seconds", res.train_seconds},
      {"test_accuracy", ev ? nlohmann::ordered_json(ev->accuracy) : nlohmann::ordered_json()},
      {"cost_usd", res.cost_usd}, {"revocations", lost_ + left_}, {"workers_start", workers_},
      {"workers_end", workers_ + joined_ - lost_ - left_},
      {"images_per_second", res.images_per_second},
      {"test_loss", ev ? nlohmann::ordered_json(ev->loss) : nlohmann::ordered_json()},
      {"max_staleness", max_staleness_}, {"dropped_stale_pushes", dropped_}, {"num_ps", shards_},
      {"model", setup_.spec.name}, {"worker_types", types_}, {"ps_type", cfg_.ps_type}, {"pricing", cfg_.pricing},
      {"attempts", prev_.attempts}, {"resumed_from_step", prev_.global_step}, {"lost_workers", lost_},
      {"left_workers", left_}, {"joined_workers", joined_},
      {"shared_memory_workers", shm_workers_}, {"stopped_by", stop_reason_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(stop_reason_)},
      {"exit_code", exit_code_}};
  if (cfg_.synthetic_gradients) summary["synthetic_gradients"] = true;
  metrics_.write(summary);
  if (!cfg_.quiet) {
    log_ << "done: " << step_ << " global steps in " << std::fixed << std::setprecision(1) << res.train_seconds
         << " s by " << workers_ + joined_ << " worker(s) and " << shards_ << " PS shard(s), " << res.images_per_second
         << " img/s";
    if (ev) log_ << ", test accuracy " << std::setprecision(2) << 100.0 * ev->accuracy << "%";
    log_ << ", cost $" << std::setprecision(4) << res.cost_usd << " (" << cfg_.pricing << ")";
    if (lost_ + left_ > 0) log_ << ", " << lost_ + left_ << " revocation(s)";
    log_ << '\n';
    if (stopping_)
      log_ << "stopped early (" << stop_reason_ << "): exit " << exit_code_
           << (writer_ ? ", rerun with --resume auto to continue from the checkpoint" : ", nothing was saved (no --ckpt-dir)")
           << '\n';
    log_ << "summary: " << summary.dump() << '\n' << std::flush;
  }
  write_run_status(stopping_ ? "requeue" : "done", exit_code_);
  return res;
}

// ------------------------------------------------------------------------------- worker

// A worker's companion thread: tells every shard it is alive every --failure-timeout / 5
// seconds (the failure detector's heartbeat, also while a long step computes), fires the
// time-based revocations, and ends a notice's drain at --drain-deadline. It calls MPI only with
// `mpi` held, as the main thread does (MPI_THREAD_SERIALIZED).
class WorkerAgent {
 public:
  WorkerAgent(std::mutex& mpi, MPI_Comm ps, const TrainConfig& cfg, int rank, FaultPlan& plan)
      : mpi_(mpi), ps_(ps), cfg_(cfg), rank_(rank), plan_(plan),
        hb_(static_cast<std::size_t>(cfg.num_ps), Buffer(0)),
        hbreq_(static_cast<std::size_t>(cfg.num_ps), MPI_REQUEST_NULL) {
    for (auto& b : hb_) {
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kHeartbeat;
    }
    thread_ = std::thread([this] { run(); });
  }
  ~WorkerAgent() {
    {
      std::lock_guard<std::mutex> lock(stop_mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    // Heartbeats to a lost shard never complete: their buffers stay until the process ends.
    std::lock_guard<std::mutex> lock(mpi_);
    for (std::size_t s = 0; s < hbreq_.size(); ++s)
      if (hbreq_[s] != MPI_REQUEST_NULL && !wait_for(&hbreq_[s], 0.5)) abandoned().push_back(std::move(hb_[s]));
  }
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // The first caller sends LEAVE; a second (the agent at the deadline, the main thread after
  // its push) does nothing.
  bool claim_leave() { return !leaving_.exchange(true); }

  // LEAVE to every shard (with `mpi` held), each send waited for briefly: a shard that does not
  // take it will notice the silence instead.
  static void send_leave(MPI_Comm ps, int shards, int signo, double timeout) {
    for (int s = 0; s < shards; ++s) {
      auto& keep = abandoned();  // a send that does not complete keeps its buffer
      keep.emplace_back(0);
      Buffer& b = keep.back();
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kLeave;
      b.header().reserved = signo;
      MPI_Request req = MPI_REQUEST_NULL;
      isend(b, 0, s, kTagToPs, &req, ps);
      if (wait_for(&req, timeout)) keep.pop_back();
    }
  }

 private:
  // Buffers of sends to lost peers, alive until the process ends (after MPI_Finalize); used
  // with the MPI mutex held.
  static std::vector<Buffer>& abandoned() {
    static std::vector<Buffer> buffers;
    return buffers;
  }

  void run() {
    const auto interval = std::chrono::duration<double>(cfg_.failure_timeout / 5);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(stop_mutex_);
        if (cv_.wait_for(lock, std::chrono::duration_cast<std::chrono::microseconds>(interval), [this] { return stop_; }))
          return;
      }
      beat();
      plan_.at_time(rank_);
      if (const int sig = notice_signal()) {
        if (notice_at_ == Clock::time_point{}) notice_at_ = Clock::now();
        if (since(notice_at_) >= cfg_.drain_deadline && claim_leave()) {
          std::lock_guard<std::mutex> lock(mpi_);
          send_leave(ps_, cfg_.num_ps, sig, 1.0);
          std::cout << std::flush;
          std::cerr << "mpi_trainer: " << worker_label(rank_) << ": " << signal_name(sig)
                    << ": the step did not finish within --drain-deadline " << cfg_.drain_deadline
                    << " s: abandoned it and left\n"
                    << std::flush;
          std::_Exit(kExitOk);
        }
      }
    }
  }

  void beat() {
    std::lock_guard<std::mutex> lock(mpi_);
    for (std::size_t s = 0; s < hb_.size(); ++s) {
      int done = 1;
      if (hbreq_[s] != MPI_REQUEST_NULL) MT_MPI(MPI_Test(&hbreq_[s], &done, MPI_STATUS_IGNORE));
      if (!done) continue;  // the shard has not taken the last one: do not reuse its buffer
      isend(hb_[s], 0, static_cast<int>(s), kTagHeartbeat, &hbreq_[s], ps_);
    }
  }

  std::mutex& mpi_;
  const MPI_Comm ps_;
  const TrainConfig& cfg_;
  const int rank_;
  FaultPlan& plan_;
  std::vector<Buffer> hb_;
  std::vector<MPI_Request> hbreq_;
  std::atomic<bool> leaving_{false};
  Clock::time_point notice_at_{};
  std::mutex stop_mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// A worker whose parameter server stopped answering exits 10 at once, without MPI_Finalize
// (which could wait for the dead) and without MPI_Abort (which would end the whole job, and a
// live shard may still serve others).
[[noreturn]] void parameter_server_lost(int rank, int shard, double waited) {
  unlink_pending_segments();
  std::cout << std::flush;
  std::cerr << "mpi_trainer: " << worker_label(rank) << ": parameter-server shard " << shard << " did not answer within "
            << std::setprecision(3) << waited << " s (--failure-timeout): the parameter server is lost; exit "
            << kExitPsLost << '\n'
            << std::flush;
  std::_Exit(kExitPsLost);
}

// A worker: `ps` holds the shards at ranks 0..S-1 (MPI_COMM_WORLD, or the intercommunicator of a
// worker that joined with `mpi_trainer join`); `rank` names it in messages (-1: a joiner).
TrainResult run_worker(const TrainConfig& cfg, const RunSetup& setup, MPI_Comm ps, int rank, FaultPlan plan) {
  const int shards = cfg.num_ps;
  std::mutex mpi_lock;
  // First: heartbeats must flow before anything slow happens here.
  WorkerAgent agent(mpi_lock, ps, cfg, rank, plan);
  const Model model(setup.spec);
  const Partition part(model.params(), shards);
  auto backend = make_backend(setup.device, setup.threads);
  FlatTensors params(model.params()), grads(model.params()), stats(model.stats()), batch_stats(model.stats());
  std::optional<Network> net;
  if (!cfg.synthetic_gradients) net.emplace(model, *backend, cfg.batch_size);

  std::vector<Buffer> send, recv;
  for (int s = 0; s < shards; ++s) {
    send.emplace_back(part.floats(s) + (s == 0 ? model.stats().total() : 0));
    recv.emplace_back(part.floats(s));
  }
  std::vector<std::shared_ptr<ShmSegment>> offered(static_cast<std::size_t>(shards));  // until the join's reply
  bool clean_end = true;  // every stop so far said no rank was lost
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(2 * shards), MPI_REQUEST_NULL);
  std::vector<std::int64_t> version(static_cast<std::size_t>(shards), 0);
  std::int64_t global_step = 0;

  // One exchange with every shard: send what is in `send`, receive the replies into `recv` and
  // the parameters. Returns false when a shard said stop. A shard silent past the deadline is a
  // lost parameter server: exit 10.
  Backoff backoff(5, 1000);  // the time from a push to the replies
  auto round_trip = [&](MsgKind kind) {
    // The first exchange waits for the parameter server to start (it may load a checkpoint).
    const double deadline = kind == MsgKind::kJoin ? std::max(60.0, 10 * cfg.failure_timeout) : cfg.failure_timeout;
    {
      std::lock_guard<std::mutex> lock(mpi_lock);
      for (int s = 0; s < shards; ++s) {
        auto& r = recv[static_cast<std::size_t>(s)];
        irecv(r, s, kTagToWorker, &reqs[static_cast<std::size_t>(2 * s)], ps);
        auto& b = send[static_cast<std::size_t>(s)];
        const std::int64_t payload = kind == MsgKind::kPush || kind == MsgKind::kJoin ? b.header().payload : 0;
        isend(b, payload, s, kTagToPs, &reqs[static_cast<std::size_t>(2 * s + 1)], ps);
      }
    }
    // Poll with naps instead of MPI_Waitall's busy wait: on a shared node the spin would take
    // the core from the parameter server and the other workers.
    backoff.restart();
    const auto t0 = Clock::now();
    for (;;) {
      int done = 0;
      {
        std::lock_guard<std::mutex> lock(mpi_lock);
        MT_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
      }
      if (done) break;
      if (since(t0) > deadline) {
        int silent = 0;
        for (int s = 0; s < shards; ++s)
          if (reqs[static_cast<std::size_t>(2 * s)] != MPI_REQUEST_NULL) silent = s;
        parameter_server_lost(rank, silent, since(t0));
      }
      backoff.idle();
    }
    backoff.done();
    bool stop = false;
    for (int s = 0; s < shards; ++s) {
      auto& r = recv[static_cast<std::size_t>(s)];
      if (const auto bad = check_header(r.header(), part.floats(s)); !bad.empty())
        throw Error(kExitInternal, "worker: malformed reply from shard " + std::to_string(s) + ": " + bad);
      stop = stop || r.header().kind == MsgKind::kStop;
      if (r.header().kind == MsgKind::kStop) clean_end = clean_end && r.header().reserved == kCleanEnd;
    }
    if (stop) {
      // Shards count their own steps and may disagree on which push is the last: those that
      // still expect pushes from this worker are told it leaves.
      std::lock_guard<std::mutex> lock(mpi_lock);
      for (int s = 0; s < shards; ++s) {
        if (recv[static_cast<std::size_t>(s)].header().kind == MsgKind::kStop) continue;
        Buffer& b = send[static_cast<std::size_t>(s)];
        b.header() = MsgHeader{};
        b.header().kind = MsgKind::kStop;
        MPI_Request req = MPI_REQUEST_NULL;
        isend(b, 0, s, kTagToPs, &req, ps);
        if (!wait_for(&req, cfg.failure_timeout)) parameter_server_lost(rank, s, cfg.failure_timeout);
      }
      return false;
    }
    for (int s = 0; s < shards; ++s) {
      auto& r = recv[static_cast<std::size_t>(s)];
      if (kind == MsgKind::kJoin) {
        // The join's reply says whether the shard mapped our segment: payloads move there.
        auto& seg = offered[static_cast<std::size_t>(s)];
        if (seg && r.header().reserved == kShmAccepted) {
          auto& b = send[static_cast<std::size_t>(s)];
          const std::int64_t push_floats = b.count() - kHeaderFloats;
          b.share(seg, 0);
          r.share(seg, shm_reply_offset(push_floats));
        }
        if (seg) seg->unlink();
        seg.reset();
      }
      // A synthetic-gradient worker (benchmark) does not use the parameters.
      if (!cfg.synthetic_gradients)
        part.unpack(s, std::span<const float>(r.payload(), static_cast<std::size_t>(part.floats(s))), params);
      version[static_cast<std::size_t>(s)] = r.header().model_version;
      global_step = std::max(global_step, r.header().step);
    }
    return true;
  };
  // After a reply: a notice ends this worker here (its last step is pushed), and --revoke
  // entries for this global step fire.
  auto leave_if_noticed = [&] {
    plan.at_step(rank, global_step);
    const int sig = notice_signal();
    if (!sig) return false;
    if (agent.claim_leave()) {
      std::lock_guard<std::mutex> lock(mpi_lock);
      WorkerAgent::send_leave(ps, shards, sig, cfg.failure_timeout);
    }
    if (!cfg.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": " << signal_name(sig)
                << ": pushed its last step and left at global step " << global_step << '\n'
                << std::flush;
    return true;
  };

  // Same-node shards get a shared-memory segment per pair, offered in the join (dist/shm.hpp).
  for (int s = 0; s < shards; ++s) {
    Buffer& b = send[static_cast<std::size_t>(s)];
    b.header() = MsgHeader{};
    b.header().model_version = model.param_count();  // the shards check that this worker fits
    b.header().batch = cfg.batch_size;
    if (!shm_transport_enabled()) continue;
    auto seg = ShmSegment::create(shm_bytes(b.count() - kHeaderFloats, recv[static_cast<std::size_t>(s)].count() - kHeaderFloats));
    const std::string& name = seg->name();
    const auto floats = static_cast<std::int64_t>((name.size() + sizeof(float)) / sizeof(float));  // with the NUL
    std::fill_n(b.payload(), floats, 0.f);
    std::memcpy(b.payload(), name.data(), name.size());
    b.header().reserved = kShmOffer;
    b.header().payload = floats;
    offered[static_cast<std::size_t>(s)] = std::move(seg);
  }
  TrainResult res;
  if (!round_trip(MsgKind::kJoin)) {
    if (!cfg.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": the parameter server did not take this worker "
                << "(training over, no free slot, or another model or batch size)\n" << std::flush;
    return res;
  }
  plan.started_at(global_step);
  if (leave_if_noticed()) return res;
  // Shard 0 says where this worker's data shard continues (a resume) or starts.
  const LoaderCursor start{recv[0].header().cursor_epoch, recv[0].header().cursor_position};
  std::optional<BatchLoader> loader;
  if (cfg.synthetic_gradients) {
    // Benchmark: a fixed, harmless gradient and the initial BN statistics; no compute.
    model.init_params(grads, batch_stats, cfg.seed);
    for (std::int64_t i = 0; i < grads.flat().numel(); ++i) grads.flat().data()[i] *= 1e-6f;
  } else {
    // Each worker sees its own part of every epoch, in its own order: shard 0 says which part of
    // how many (the launched workers, or the --max-workers slots).
    LoaderOptions lo = setup.loader;
    lo.shard = recv[0].header().correct;
    lo.num_shards = std::max(1, recv[0].header().batch);
    loader.emplace(setup.data.train, lo, start);
  }
  // Each step stages the next batch while the device computes: a push carries the cursor after
  // the batch it trained, not the loader's.
  std::optional<BatchAhead> ahead;
  if (loader) {
    ahead.emplace(*loader, *net);
    ahead->advance();
  }
  for (;;) {
    StepStats st;
    LoaderCursor cur;
    if (ahead) {
      const BatchAhead::Staged batch = ahead->current();
      cur = batch.cursor;
      st = net->train_step(batch.images, batch.labels, params, grads, batch_stats, [&] { ahead->advance(); });
    }
    for (int s = 0; s < shards; ++s) {
      Buffer& b = send[static_cast<std::size_t>(s)];
      MsgHeader& h = b.header();
      h = MsgHeader{};
      h.kind = MsgKind::kPush;
      h.model_version = version[static_cast<std::size_t>(s)];
      h.payload = part.floats(s) + (s == 0 ? model.stats().total() : 0);
      h.cursor_epoch = cur.epoch;
      h.cursor_position = cur.position;
      h.loss = st.loss;
      h.correct = st.correct;
      h.batch = cfg.batch_size;
      if (loader || res.global_step == 0) {  // a synthetic gradient is packed once
        part.pack(s, grads, std::span<float>(b.payload(), static_cast<std::size_t>(part.floats(s))));
        if (s == 0)
          std::copy(batch_stats.flat().data(), batch_stats.flat().data() + model.stats().total(),
                    b.payload() + part.floats(0));
      }
    }
    ++res.global_step;
    if (!round_trip(MsgKind::kPush)) {
      // The end: a clean one may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
      if (clean_end) res.finalize_timeout_s = kCleanEndFinalizeSeconds;
      break;
    }
    if (leave_if_noticed()) break;
  }
  return res;
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
  for (const int k : ranks) (k < num_ps ? r.shards : r.workers) += 1;
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
  TrainConfig c = cfg;
  const NodeRoles here = node_roles(c.num_ps, mpi);
  if (c.threads == 0) {
    // Share the node's cores among the workers on it instead of oversubscribing them. A PS shard
    // on the node keeps one core: its wake-ups would stall the workers' OpenMP barriers
    // otherwise (measured: 1 worker on 2 cores beside the PS, 2 threads 170 img/s, 1 thread
    // 289 img/s).
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    c.threads = std::max(1, (cores - here.shards) / std::max(1, here.workers));
  }
  // Every rank validates before any work; notices are caught from here on.
  FaultPlan plan = fault_plan(c, mpi.rank(), mpi.size());
  install_notice_handlers();
  const RunSetup setup = prepare_run(c);
  worker_types(c, setup.prices, mpi.size() - c.num_ps);
  precise_naps(log);
  if (mpi.rank() < c.num_ps) return Shard(c, setup, mpi, std::move(plan), log).run();
  return run_worker(c, setup, MPI_COMM_WORLD, mpi.rank(), std::move(plan));
}

int join_running_job(const TrainConfig& cfg, std::ostream& log, double* finalize_timeout_s) {
  if (cfg.num_ps != 1) throw UsageError("mpi_trainer join: the job must have --num-ps 1");
  if (!cfg.revoke.empty()) throw UsageError("mpi_trainer join: --revoke names ranks of the training job; use --revocation-model");
  const std::string file = join_port_file(cfg);
  TrainConfig c = cfg;
  if (c.threads == 0) c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // A lifetime of its own, if a model is given (drawn with its pid: joiners differ).
  const int self = c.num_ps + static_cast<int>(getpid() % 1000000);
  FaultPlan plan = fault_plan(c, self, self + 1);
  install_notice_handlers();
  const RunSetup setup = prepare_run(c);
  precise_naps(log);
  // The port, once the parameter server has written it.
  std::string port;
  for (const auto t0 = Clock::now();; nap_microseconds(100000)) {
    std::ifstream in(file);
    nlohmann::json j;
    if (in && (in >> j) && j.contains("port")) {
      port = j["port"].get<std::string>();
      break;
    }
    if (since(t0) > 60)
      throw Error(kExitPsLost, file + ": no port file from a parameter server within 60 s (is the job running with "
                                       "--max-workers and this --ckpt-dir / --port-file?)");
  }
  // One connection at a time: joins through ompi-server at the same moment hung 4 of 5 times
  // (DESIGN.md section 7). A connection that does not complete means no parameter server.
  const std::string lock_path = file + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  MT_CHECK_POSIX(lock >= 0);
  MT_CHECK_POSIX(::flock(lock, LOCK_EX) == 0);
  std::atomic<bool> connected{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 600 && !connected; ++i) nap_microseconds(100000);
    if (connected) return;
    std::cerr << "mpi_trainer join: no parameter server answered at the port in " << file << " within 60 s; exit "
              << kExitPsLost << '\n' << std::flush;
    std::_Exit(kExitPsLost);
  });
  MPI_Comm ps = MPI_COMM_NULL;
  std::vector<char> p(port.begin(), port.end());
  p.push_back('\0');
  const int rc = MPI_Comm_connect(p.data(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &ps);
  connected = true;
  watchdog.join();
  ::flock(lock, LOCK_UN);
  ::close(lock);
  MT_MPI(rc);
  MT_MPI(MPI_Comm_set_errhandler(ps, MPI_ERRORS_RETURN));
  if (!c.quiet) log << "mpi_trainer join: connected to the parameter server (" << file << ")\n" << std::flush;
  const TrainResult r = run_worker(c, setup, ps, -1, std::move(plan));
  if (!c.quiet) log << "mpi_trainer join: done after " << r.global_step << " pushes\n" << std::flush;
  if (finalize_timeout_s) *finalize_timeout_s = r.finalize_timeout_s;
  return r.exit_code;
}

}  // namespace mt
