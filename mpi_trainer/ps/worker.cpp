// The worker: pulls parameters, computes a gradient on its own mini-batch (StepComputer, from the
// app), pushes it to every shard, and repeats until a shard says stop.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "ps/mpi_env.hpp"
#include "ps/partition.hpp"
#include "ps/ps.hpp"
#include "ps/recovery.hpp"
#include "ps/replica.hpp"
#include "ps/transport.hpp"
#include "ps/ulfm.hpp"

namespace mt {

namespace {

constexpr double kReportedByMpi = -1;  // PsLoss::waited when the MPI library (ULFM) reported it

// How this worker lost its parameter server. run_worker says so, lets a standby write its replica
// and returns kExitPsLost; main then ends the process without MPI_Finalize (which could wait for
// the dead) and without MPI_Abort (which would end the whole job, and a live shard may still serve
// others).
struct PsLoss {
  int shard = 0;
  double waited = kReportedByMpi;  // seconds without an answer (--failure-timeout), or kReportedByMpi
  double at_unix = 0;              // when this worker learned of it
};

// One line (one write: lines of several workers do not interleave).
std::string loss_line(int rank, const PsLoss& loss) {
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank) << ": parameter-server shard " << loss.shard;
  if (loss.waited < 0)
    line << " failed (reported by the MPI library, ULFM)";
  else
    line << " did not answer within " << std::setprecision(3) << loss.waited << " s (--failure-timeout)";
  line << " at unix " << std::fixed << std::setprecision(3) << loss.at_unix << ": the parameter server is lost; exit "
       << kExitPsLost << '\n';
  return line.str();
}

// The first error in statuses of an MPI_ERR_IN_STATUS answer (MPI_ERR_PENDING: not completed).
int first_error(const std::vector<MPI_Status>& statuses) {
  for (const MPI_Status& st : statuses)
    if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) return st.MPI_ERROR;
  return MPI_ERR_IN_STATUS;
}

// A worker's companion thread: tells every shard it is alive every --failure-timeout / 5
// seconds (the failure detector's heartbeat, also while a long step computes), fires the
// time-based revocations, and ends a notice's drain at --drain-deadline. It calls MPI only with
// `mpi` held, as the main thread does (MPI_THREAD_SERIALIZED).
class WorkerAgent {
 public:
  // `on_beat`, with `mpi` held, at every heartbeat (a standby takes its replicas while it computes).
  // `on_failed(shard)`, with `mpi` held, when the MPI library (ULFM) reports a shard failed: it
  // flags the loss for the main thread (which ends the worker, or takes the parameter server
  // over); no beat follows.
  WorkerAgent(std::mutex& mpi, MPI_Comm ps, const WorkerOptions& opts, int rank, FaultPlan& plan,
              std::function<void()> on_beat, std::function<void(int)> on_failed)
      : mpi_(mpi),
        ps_(ps),
        opts_(opts),
        rank_(rank),
        plan_(plan),
        on_beat_(std::move(on_beat)),
        on_failed_(std::move(on_failed)),
        hb_(static_cast<std::size_t>(opts.num_ps), Buffer(0)),
        hbreq_(static_cast<std::size_t>(opts.num_ps), MPI_REQUEST_NULL) {
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
    // Heartbeats to a lost shard never complete: their buffers stay until the process ends (at
    // once when the parameter server is known lost: nothing on that way out waits on MPI).
    std::lock_guard<std::mutex> lock(mpi_);
    for (std::size_t s = 0; s < hbreq_.size(); ++s)
      if (hbreq_[s] != MPI_REQUEST_NULL && (ps_lost_ || !wait_for(&hbreq_[s], 0.5))) abandon(std::move(hb_[s]));
  }
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // The first caller sends LEAVE; a second (the agent at the deadline, the main thread after
  // its push) does nothing.
  bool claim_leave() { return !leaving_.exchange(true); }
  // Whether this worker has left (LEAVE sent, by either thread): the main thread pushes no more.
  bool left() const { return leaving_; }
  // The parameter server is lost: the destructor abandons heartbeats in flight without waiting.
  void ps_lost() { ps_lost_ = true; }

  // LEAVE to every shard (with `mpi` held), each send waited for briefly: a shard that does not
  // take it will notice the silence instead.
  static void send_leave(MPI_Comm ps, int shards, int signo, double timeout) {
    for (int s = 0; s < shards; ++s) {
      Buffer b(0);
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kLeave;
      b.header().signal = signo;
      MPI_Request req = MPI_REQUEST_NULL;
      isend(b, 0, s, kTagToPs, &req, ps);
      if (!wait_for(&req, timeout)) abandon(std::move(b));
    }
  }

 private:
  void run() {
    const auto interval = std::chrono::duration<double>(opts_.failure_timeout / 5);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(stop_mutex_);
        if (cv_.wait_for(lock, std::chrono::duration_cast<std::chrono::microseconds>(interval),
                         [this] { return stop_; }))
          return;
      }
      beat();
      plan_.at_time(rank_);
      if (const int sig = notice_signal()) {
        if (notice_at_ == Clock::time_point{}) notice_at_ = Clock::now();
        if (since(notice_at_) >= opts_.drain_deadline && claim_leave()) {
          std::lock_guard<std::mutex> lock(mpi_);
          send_leave(ps_, opts_.num_ps, sig, 1.0);
          std::cout << std::flush;
          // The step cannot be interrupted: the main thread drops its gradient when it ends and
          // returns (run_worker); no heartbeat follows the LEAVE.
          std::cerr << "mpi_trainer: " << worker_label(rank_) << ": " << signal_name(sig)
                    << ": the step did not finish within --drain-deadline " << opts_.drain_deadline
                    << " s: abandoned it and left\n"
                    << std::flush;
          return;
        }
      }
    }
  }

  void beat() {
    std::lock_guard<std::mutex> lock(mpi_);
    if (failed_) return;
    for (std::size_t s = 0; s < hb_.size(); ++s) {
      try {
        int done = 1;
        if (hbreq_[s] != MPI_REQUEST_NULL) MT_MPI(MPI_Test(&hbreq_[s], &done, MPI_STATUS_IGNORE));
        if (!done) continue;  // the shard has not taken the last one: do not reuse its buffer
        isend(hb_[s], 0, static_cast<int>(s), kTagHeartbeat, &hbreq_[s], ps_);
      } catch (const ProcessFailed&) {  // ULFM: this shard died (the main thread may be computing)
        failed_ = true;
        on_failed_(static_cast<int>(s));
        return;
      }
    }
    if (on_beat_) on_beat_();
  }

  std::mutex& mpi_;
  const MPI_Comm ps_;
  const WorkerOptions& opts_;
  const int rank_;
  FaultPlan& plan_;
  const std::function<void()> on_beat_;
  const std::function<void(int)> on_failed_;
  bool failed_ = false;  // with `mpi_` held
  std::vector<Buffer> hb_;
  std::vector<MPI_Request> hbreq_;
  std::atomic<bool> leaving_{false};
  std::atomic<bool> ps_lost_{false};
  Clock::time_point notice_at_{};
  std::mutex stop_mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

WorkerResult run_worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
                        const std::function<std::unique_ptr<StepComputer>()>& make_computer) {
  const int shards = opts.num_ps;
  // ULFM, a launched worker: the survivors take a lost parameter-server shard over.
  const bool takeover = opts.takeover && ulfm_available() && rank >= 0;
  MPI_Comm comm = ps;  // the parameter server's; a takeover replaces it with the survivors'
  std::mutex mpi_lock;
  const Partition part(model.params(), shards);
  // A standby's replicas of the shards (any worker may be made one, at any time), taken with the
  // MPI lock held by the polls below and by the agent while a step computes.
  std::optional<ReplicaHost> replicas(std::in_place, shards);
  // The MPI library (ULFM) reported shard `s` failed (with `mpi_lock` held, on either thread):
  // flagged for the main thread, which at its next exchange ends this worker or (a takeover
  // ahead) takes the parameter server over.
  std::atomic<bool> ps_failed{false};
  PsLoss reported;  // with `mpi_lock` held
  auto reported_failed = [&](int s) {
    if (!ps_failed) reported = PsLoss{s, kReportedByMpi, unix_now()};
    ps_failed = true;
  };
  std::optional<PsLoss> lost;  // the main thread's verdict: the parameter server is lost
  auto take_replicas = [&] {
    try {
      replicas->poll(comm);
    } catch (const ProcessFailed&) {  // ULFM: a shard died
      reported_failed(0);
    } catch (const std::exception& e) {
      // A malformed replica (a parameter server of another build) or a failed receive: this
      // worker trains on as before, without a replica (also on the heartbeat thread).
      replicas->close();
      std::cerr << "mpi_trainer: " + worker_label(rank) + ": warning: no standby replica here: " + e.what() + "\n"
                << std::flush;
    }
  };
  // First: heartbeats must flow before anything slow happens here.
  std::optional<WorkerAgent> agent;
  auto start_agent = [&] { agent.emplace(mpi_lock, comm, opts, rank, plan, take_replicas, reported_failed); };
  start_agent();
  struct CloseReplicas {
    std::mutex& lock;
    std::optional<ReplicaHost>& host;
    ~CloseReplicas() {
      const std::lock_guard<std::mutex> hold(lock);
      if (host) host->close();
    }
  } close_replicas{mpi_lock, replicas};
  std::unique_ptr<StepComputer> computer;
  if (!opts.synthetic_gradients) computer = make_computer();
  FlatTensors params(model.params()), grads(model.params()), stats(model.stats()), batch_stats(model.stats());

  std::vector<Buffer> send, recv;
  auto send_floats = [&](int s) { return part.floats(s) + (s == 0 ? model.stats().total() : 0); };
  for (int s = 0; s < shards; ++s) {
    send.emplace_back(send_floats(s));
    recv.emplace_back(part.floats(s));
  }
  std::vector<std::shared_ptr<ShmSegment>> offered(static_cast<std::size_t>(shards));  // until the join's reply
  std::vector<PairBells> bells(static_cast<std::size_t>(shards));  // with the shards that took a segment
  BellWait replies;                                                // the doorbells of the replies awaited
  bool clean_end = true;  // every stop so far said no rank was lost
  int failed_code = 0;    // a shard said it failed, with this exit code
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(2 * shards), MPI_REQUEST_NULL);
  std::vector<MPI_Status> statuses(reqs.size());
  std::vector<std::int64_t> version(static_cast<std::size_t>(shards), 0);
  std::int64_t global_step = 0;
  int my_slot = rank - shards, data_slots = 0;  // shard 0's answer to the first join says

  // One exchange with every shard: send what is in `send`, receive the replies into `recv` and
  // the parameters. kStop when a shard said stop; kFailed when the MPI library (ULFM) reported a
  // shard failed; kLost (`lost` says how) when a shard stayed silent past the deadline.
  enum class Reply { kGoOn, kStop, kFailed, kLost };
  Backoff backoff(5, 1000);  // the time from a push to the replies
  auto round_trip = [&](MsgKind kind) -> Reply {
    // The first exchange waits for the parameter server to start (it may load a checkpoint).
    const double deadline = kind == MsgKind::kJoin ? std::max(60.0, 10 * opts.failure_timeout) : opts.failure_timeout;
    if (ps_failed) return Reply::kFailed;  // reported while a step computed: nothing more is sent
    {
      std::lock_guard<std::mutex> lock(mpi_lock);
      for (int s = 0; s < shards; ++s) {
        try {
          auto& r = recv[static_cast<std::size_t>(s)];
          irecv(r, s, kTagToWorker, &reqs[static_cast<std::size_t>(2 * s)], comm);
          auto& b = send[static_cast<std::size_t>(s)];
          const std::int64_t payload = kind == MsgKind::kPush || kind == MsgKind::kJoin ? b.header().payload : 0;
          isend(b, payload, s, kTagToPs, &reqs[static_cast<std::size_t>(2 * s + 1)], comm);
          if (const auto& bell = bells[static_cast<std::size_t>(s)]) bell.to_shard().ring();
        } catch (const ProcessFailed&) {  // ULFM: the shard is known dead already
          reported_failed(s);
        }
      }
    }
    if (ps_failed) return Reply::kFailed;
    // Poll with naps instead of MPI_Waitall's busy wait: on a shared node the spin would take
    // the core from the parameter server and the other workers. Shards on this node ring a
    // doorbell with each reply (ps/bell.hpp): while every shard can, the naps may be long, as
    // each reply ends them.
    backoff.restart();
    const auto t0 = Clock::now();
    for (;;) {
      if (ps_failed) return Reply::kFailed;  // the heartbeat thread heard it first
      int done = 0;
      int rc = MPI_SUCCESS;
      replies.clear();
      for (int s = 0; s < shards; ++s)
        replies.add(bells[static_cast<std::size_t>(s)].to_worker());
      {
        std::lock_guard<std::mutex> lock(mpi_lock);
        rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, statuses.data());
        if (rc == MPI_SUCCESS) take_replicas();
      }
      if (rc != MPI_SUCCESS) {
        // ULFM: a request with a dead shard completed with the error (in its status when
        // MPI_ERR_IN_STATUS): this worker leaves within milliseconds instead of --failure-timeout.
        for (std::size_t i = 0; i < reqs.size(); ++i)
          if (ulfm_is_proc_failed(rc == MPI_ERR_IN_STATUS ? statuses[i].MPI_ERROR : rc))
            reported_failed(static_cast<int>(i / 2));
        if (ps_failed) return Reply::kFailed;
        MT_MPI(rc == MPI_ERR_IN_STATUS ? first_error(statuses) : rc);
      }
      if (done) break;
      if (since(t0) > deadline) {
        int silent = 0;
        for (int s = 0; s < shards; ++s)
          if (reqs[static_cast<std::size_t>(2 * s)] != MPI_REQUEST_NULL) silent = s;
        lost = PsLoss{silent, since(t0), unix_now()};
        return Reply::kLost;
      }
      replies.sleep(backoff);
    }
    backoff.done();
    bool stop = false;
    for (int s = 0; s < shards; ++s) {
      auto& r = recv[static_cast<std::size_t>(s)];
      if (const auto bad = check_header(r.header(), part.floats(s)); !bad.empty())
        throw Error(kExitInternal, "worker: malformed reply from shard " + std::to_string(s) + ": " + bad);
      stop = stop || r.header().kind == MsgKind::kStop;
      if (r.header().kind == MsgKind::kStop) clean_end = clean_end && r.header().end == kCleanEnd;
      if (r.header().kind == MsgKind::kStop && r.header().end == kFailedEnd) failed_code = r.header().exit_code;
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
        isend(b, 0, s, kTagToPs, &req, comm);
        if (const auto& bell = bells[static_cast<std::size_t>(s)]) bell.to_shard().ring();
        if (!wait_for(&req, opts.failure_timeout)) {
          abandon(std::move(b));
          lost = PsLoss{s, opts.failure_timeout, unix_now()};
          return Reply::kLost;
        }
      }
      return Reply::kStop;
    }
    for (int s = 0; s < shards; ++s) {
      auto& r = recv[static_cast<std::size_t>(s)];
      if (kind == MsgKind::kJoin) {
        // The join's reply says whether the shard mapped our segment: payloads move there.
        auto& seg = offered[static_cast<std::size_t>(s)];
        if (seg && r.header().shm == kShmAccepted) {
          auto& b = send[static_cast<std::size_t>(s)];
          const std::int64_t push_floats = b.count() - kHeaderFloats;
          b.share(seg, 0);
          r.share(seg, shm_reply_offset(push_floats));
          bells[static_cast<std::size_t>(s)] = shm_bells(*seg, push_floats, part.floats(s));
        }
        if (seg) seg->unlink();
        seg.reset();
      }
      // A synthetic-gradient worker (benchmark) does not use the parameters.
      if (!opts.synthetic_gradients)
        part.unpack(s, std::span<const float>(r.payload(), static_cast<std::size_t>(part.floats(s))), params);
      version[static_cast<std::size_t>(s)] = r.header().model_version;
      global_step = std::max(global_step, r.header().step);
    }
    return Reply::kGoOn;
  };
  // After a reply: a notice ends this worker here (its last step is pushed), and --revoke
  // entries for this global step fire.
  auto leave_if_noticed = [&] {
    plan.at_step(rank, global_step);
    const int sig = notice_signal();
    if (!sig) return false;
    if (agent->claim_leave()) {
      std::lock_guard<std::mutex> lock(mpi_lock);
      WorkerAgent::send_leave(comm, shards, sig, opts.failure_timeout);
    }
    if (!opts.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": " << signal_name(sig)
                << ": pushed its last step and left at global step " << global_step << '\n'
                << std::flush;
    return true;
  };

  // The join's message: this worker's model and batch size (the shards check that it fits) and,
  // to same-node shards, a shared-memory segment per pair (ps/shm.hpp). A join after a takeover
  // offers none: the new parameter server's messages go through MPI.
  auto prepare_join = [&](bool offer_shm) {
    for (int s = 0; s < shards; ++s) {
      Buffer& b = send[static_cast<std::size_t>(s)];
      b.header() = MsgHeader{};
      b.header().param_count = model.param_count();
      b.header().batch = opts.batch_size;
      if (!offer_shm || !shm_transport_enabled()) continue;
      auto seg = ShmSegment::create(
          shm_bytes(b.count() - kHeaderFloats, recv[static_cast<std::size_t>(s)].count() - kHeaderFloats));
      const std::string& name = seg->name();
      const auto floats = static_cast<std::int64_t>((name.size() + sizeof(float)) / sizeof(float));  // with the NUL
      std::fill_n(b.payload(), floats, 0.f);
      std::memcpy(b.payload(), name.data(), name.size());
      b.header().shm = kShmOffer;
      b.header().payload = floats;
      offered[static_cast<std::size_t>(s)] = std::move(seg);
    }
  };

  // The takeover of a lost parameter-server shard (ULFM; docs/fault-model.md, "Takeover under
  // ULFM"). Every survivor comes here (the surviving shards too, ps/shard.cpp): the first to learn
  // of the loss revokes the communicator, so that the others' next MPI call fails too (a worker
  // computing a step comes at its end). Together they shrink it and agree (ps/recovery.hpp): the
  // worker holding the newest replica becomes shard 0 of the new parameter server and starts it
  // from that replica, the surviving shards follow it, the global step counts on from the highest
  // any survivor saw. That worker gets its Takeover; the others keep their data slots and cursors
  // and join the new parameter server (`comm` is theirs). When no takeover is possible (no whole
  // replica, two shards lost, none left to train) or another process fails meanwhile, each exits
  // 10 as without a takeover (a standby writing its replica first): the restart resumes from the
  // newest checkpoint.
  WorkerResult res;
  bool packed = false;  // a synthetic gradient in the send buffers
  enum class Recovered { kRejoin, kBecamePs, kLost };  // kBecamePs: res.takeover; kLost: `lost`
  auto recover = [&]() -> Recovered {
    const double lost_at = unix_now();
    agent.reset();  // no heartbeats to the dead; MPI is this thread's alone from here
    const std::lock_guard<std::mutex> lock(mpi_lock);
    try {
      replicas->poll(comm);  // a replica received whole but not yet taken (a handover's last)
    } catch (const std::exception&) {
    }
    std::optional<ReplicaState> held = replicas->assemble(model, part);
    try {
      ulfm_revoke(comm);
      // MPI may still hold the buffers of the exchange the loss interrupted: they are kept to the
      // end, fresh ones taken. Requests on the revoked communicator are never tested again.
      for (int s = 0; s < shards; ++s) {
        const auto k = static_cast<std::size_t>(s);
        abandon(std::move(send[k]));
        abandon(std::move(recv[k]));
        send[k] = Buffer(send_floats(s));
        recv[k] = Buffer(part.floats(s));
        bells[k] = PairBells{};
      }
      std::fill(reqs.begin(), reqs.end(), MPI_REQUEST_NULL);
      packed = false;
      replicas->close();
      std::string why;
      std::optional<TakeoverPlan> agreed = agree_takeover(
          comm, SurvivorOffer{held ? held->global_step : -1, global_step, rank, -1, my_slot}, shards, &why);
      if (!agreed) {  // a standby writes its replica for the restart (end_lost)
        if (!opts.quiet) std::cerr << "mpi_trainer: " + worker_label(rank) + ": " + why + ": no takeover\n" << std::flush;
        lost = PsLoss{0, kReportedByMpi, lost_at};
        return Recovered::kLost;
      }
      ++res.takeovers;
      if (agreed->shard < 0) {
        comm = agreed->comm;
        return Recovered::kRejoin;
      }
      MT_ASSERT(agreed->shard == 0 && held, "the replica's holder becomes shard 0");
      Takeover t;
      t.comm = agreed->comm;
      t.first_step = agreed->first_step;
      t.replica = std::move(*held);
      t.worker_ranks = std::move(agreed->worker_ranks);
      t.worker_slots = std::move(agreed->worker_slots);
      t.lost_shards = std::move(agreed->lost_shards);
      t.data_slots = data_slots;
      t.lost_at = lost_at;
      t.takeovers = res.takeovers;
      t.plan = std::move(plan);
      res.takeover = std::move(t);
      return Recovered::kBecamePs;
    } catch (const ProcessFailed&) {  // another process failed during the takeover
      lost = PsLoss{0, kReportedByMpi, lost_at};
      return Recovered::kLost;
    }
  };
  // One exchange (round_trip); when the parameter server is lost in it (a takeover ahead): take
  // it over, or join the survivors' parameter server (lost too: again). kLost: `lost` says how.
  enum class Exchange { kGoOn, kStopped, kBecamePs, kLost };
  auto exchange = [&](MsgKind kind) -> Exchange {
    for (;;) {
      switch (round_trip(kind)) {  // kFailed: a push in flight is lost with the parameter server
        case Reply::kGoOn: return Exchange::kGoOn;
        case Reply::kStop: return Exchange::kStopped;
        case Reply::kLost: return Exchange::kLost;
        case Reply::kFailed: break;
      }
      if (!takeover) {
        const std::lock_guard<std::mutex> lock(mpi_lock);
        lost = reported;
        return Exchange::kLost;
      }
      switch (recover()) {
        case Recovered::kBecamePs: return Exchange::kBecamePs;
        case Recovered::kLost: return Exchange::kLost;
        case Recovered::kRejoin: break;
      }
      ps_failed = false;
      replicas.emplace(shards);
      start_agent();
      prepare_join(false);
      kind = MsgKind::kJoin;
    }
  };
  // The parameter server is lost (`lost`), no takeover follows: this worker says so, a standby
  // writes its replica as the newest checkpoint (WorkerOptions::on_ps_lost), and it returns
  // kExitPsLost with `ps_lost` set. Nothing on the way out waits on MPI (Open MPI 4.1 never
  // completes a send to a dead peer): heartbeats, replica receives and exchange buffers in flight
  // are abandoned, kept to the end of the process, whose main leaves without MPI_Finalize.
  auto end_lost = [&]() -> WorkerResult {
    if (agent) {
      agent->ps_lost();
      agent.reset();
    }
    const std::lock_guard<std::mutex> lock(mpi_lock);
    unlink_pending_segments();
    std::cout << std::flush;
    std::cerr << loss_line(rank, *lost) << std::flush;
    if (opts.on_ps_lost) {
      try {
        if (auto r = replicas->assemble(model, part)) {
          opts.on_ps_lost(*r);
        } else if (replicas->any() && !opts.quiet) {  // a standby that has not heard from every shard yet
          std::cerr << "mpi_trainer: " + worker_label(rank) +
                           " (standby): no replica from every shard yet: the restart resumes from the newest checkpoint\n"
                    << std::flush;
        }
      } catch (...) {
        const ErrorReport e = describe_error(std::current_exception());
        std::cerr << "mpi_trainer: " + worker_label(rank) + ": error: " + e.what + "\n" << std::flush;
      }
    }
    replicas->abandon_receives();
    for (int s = 0; s < shards; ++s) {
      const auto k = static_cast<std::size_t>(s);
      if (reqs[static_cast<std::size_t>(2 * s)] != MPI_REQUEST_NULL) abandon(std::move(recv[k]));
      if (reqs[static_cast<std::size_t>(2 * s + 1)] != MPI_REQUEST_NULL) abandon(std::move(send[k]));
    }
    res.exit_code = kExitPsLost;
    res.ps_lost = true;
    return std::move(res);
  };
  prepare_join(true);
  const Exchange joined = exchange(MsgKind::kJoin);
  if (joined == Exchange::kLost) return end_lost();
  if (joined == Exchange::kBecamePs) return res;
  if (joined == Exchange::kStopped) {
    res.exit_code = failed_code;
    // The parameter server's own message says what failed; a worker of the job adds nothing.
    if (failed_code != 0) return res;
    if (!opts.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank) << ": the parameter server did not take this worker "
                << "(training over, no free slot, or another model or batch size)\n"
                << std::flush;
    return res;
  }
  plan.started_at(global_step);
  if (leave_if_noticed()) return res;
  {
    const MsgHeader& h = recv[0].header();
    my_slot = h.slot;
    data_slots = std::max(1, h.slots);
  }
  if (computer) {
    // Shard 0 says which data slot of how many this worker trains (the launched workers, or the
    // --max-workers slots) and where it continues (a resume) or starts.
    const MsgHeader& h = recv[0].header();
    computer->start(h.slot, std::max(1, h.slots), LoaderCursor{h.cursor_epoch, h.cursor_position});
  } else {
    // Benchmark: a fixed, harmless gradient and the initial BN statistics; no compute.
    model.init_params(grads, batch_stats, opts.seed);
    for (std::int64_t i = 0; i < grads.flat().numel(); ++i)
      grads.flat().data()[i] *= 1e-6f;
  }
  for (;;) {
    StepComputer::Step st;
    if (computer) st = computer->step(params, grads, batch_stats);
    if (agent->left()) break;  // at --drain-deadline, while this step computed: its gradient is dropped
    for (int s = 0; s < shards; ++s) {
      Buffer& b = send[static_cast<std::size_t>(s)];
      MsgHeader& h = b.header();
      h = MsgHeader{};
      h.kind = MsgKind::kPush;
      h.model_version = version[static_cast<std::size_t>(s)];
      h.payload = part.floats(s) + (s == 0 ? model.stats().total() : 0);
      h.cursor_epoch = st.cursor.epoch;
      h.cursor_position = st.cursor.position;
      h.loss = st.loss;
      h.correct = st.correct;
      h.step_seconds = static_cast<float>(st.seconds);
      h.batch = opts.batch_size;
      if (computer || !packed) {  // a synthetic gradient is packed once
        part.pack(s, grads, std::span<float>(b.payload(), static_cast<std::size_t>(part.floats(s))));
        if (s == 0)
          std::copy(batch_stats.flat().data(), batch_stats.flat().data() + model.stats().total(),
                    b.payload() + part.floats(0));
      }
    }
    packed = true;
    ++res.pushes;
    const Exchange more = exchange(MsgKind::kPush);
    if (more == Exchange::kLost) return end_lost();
    if (more == Exchange::kBecamePs) return res;
    if (more == Exchange::kStopped) {
      // The end: a clean one may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
      res.clean_end = clean_end && failed_code == 0;
      res.exit_code = failed_code;
      break;
    }
    if (leave_if_noticed()) break;
  }
  return res;
}

}  // namespace mt
