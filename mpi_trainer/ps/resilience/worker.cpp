// The worker: pulls parameters, computes a gradient on its own mini-batch (StepComputer, from the
// app), pushes it to every shard, and repeats until a shard says stop.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/partition.hpp"
#include "ps/ps.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/recovery.hpp"
#include "ps/resilience/replica.hpp"
#include "ps/wire/transport.hpp"
#include "ps/wire/ulfm.hpp"
#include "ps/exchange/worker_agent.hpp"
#include "ps/exchange/worker_client.hpp"

namespace mt {

namespace {

// The state letter of process `pid` (/proc/PID/stat: R running, S sleeping, D in the kernel, T
// stopped, t stopped by a tracer, ...), '?' when it cannot be read (gone, another namespace).
char process_state(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return '?';
  const auto close = stat.rfind(')');  // after the command name, which may hold spaces
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

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

// The fault-tolerance layer of a worker over its exchange core (WorkerClient): what a notice, a
// standby's replicas, a lost parameter server and (ULFM) a takeover mean for it. run() is the
// worker's life: join, then push and pull until a stop, a notice or the loss of the parameter server.
class Worker {
 public:
  Worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
         const std::function<std::unique_ptr<StepComputer>()>& make_computer)
      : opts_(opts),
        model_(model),
        rank_(rank),
        shards_(opts.num_ps),
        takeover_(opts.takeover && ulfm_available() && rank >= 0),
        plan_(std::move(plan)),
        comm_(ps) {
    start_agent();  // first: heartbeats must flow before anything slow happens here
    if (!opts.synthetic_gradients) computer_ = make_computer();
    client_.emplace(
        opts, model, comm_, mpi_lock_, ps_failed_, [this](int s) { reported_failed(s); }, [this] { take_replicas(); });
    if (takeover_ && opts.push_journal) journal_.emplace(shards_);
  }

  const std::vector<int>& hung() const { return hung_; }
  WorkerResult run() {
    client_->prepare_join(true);
    const Exchange joined = exchange(MsgKind::kJoin);
    if (joined == Exchange::kLost) return end_lost();
    if (joined == Exchange::kBecamePs) return std::move(res_);
    if (joined == Exchange::kStopped) return refused();
    plan_.started_at(client_->global_step());
    if (leave_if_noticed()) return std::move(res_);
    start_computing();
    for (;;) {
      StepComputer::Step st;
      if (computer_) st = computer_->step(client_->params(), grads_, batch_stats_);
      if (agent_->left()) break;  // at --drain-deadline, while this step computed: its gradient is dropped
      const PushFault fault = corrupt(res_.pushes + 1);
      client_->prepare_push(st, grads_, batch_stats_, !computer_, res_.pushes + 1);
      if (fault == PushFault::kDiscard) client_->mark_discard();
      ++res_.pushes;
      journal_push();
      const Exchange more = exchange(MsgKind::kPush);
      if (more == Exchange::kLost) return end_lost();
      if (more == Exchange::kBecamePs) return std::move(res_);
      if (more == Exchange::kStopped) {
        // The end: a clean one may wait for shard 0's final checkpoint and evaluation in MPI_Finalize.
        res_.clean_end = client_->clean_end();
        res_.exit_code = client_->failed_code();
        res_.peer_lost = !res_.clean_end && res_.exit_code == 0;
        if (client_->rejected())
          std::cerr << "mpi_trainer: " + worker_label(rank_) +
                           ": the parameter server rejected its last pushes (values not finite, or too large for "
                           "--push-norm-limit) and dropped it; the job goes on without it; exit 0\n"
                    << std::flush;
        break;
      }
      if (leave_if_noticed()) break;
    }
    return std::move(res_);
  }

 private:
  enum class Exchange { kGoOn, kStopped, kBecamePs, kLost };

  // --corrupt-push: this push's fault, done to the gradient (nan, huge, zero); discard marks the push.
  PushFault corrupt(std::int64_t push) {
    const auto it = opts_.push_faults.find(push);
    if (it == opts_.push_faults.end()) return PushFault::kNone;
    float* g = grads_.flat().data();
    const std::int64_t n = grads_.flat().numel();
    if (it->second == PushFault::kNan)  // every 1024th value and the last: in every shard's part
      for (std::int64_t i = 0; i < n; i += (i + 1024 < n ? 1024 : std::max<std::int64_t>(1, n - 1 - i)))
        g[i] = std::numeric_limits<float>::quiet_NaN();
    if (it->second == PushFault::kHuge)
      for (std::int64_t i = 0; i < n; ++i)
        g[i] *= 1e6f;
    if (it->second == PushFault::kZero) std::fill_n(g, n, 0.f);
    return it->second;
  }
  enum class Recovered { kRejoin, kBecamePs, kLost };  // kBecamePs: res_.takeover; kLost: lost_

  void start_agent() {
    agent_.emplace(
        mpi_lock_, comm_, opts_, rank_, plan_, [this] { take_replicas(); }, [this](int s) { reported_failed(s); });
  }
  // Ends the heartbeat thread (its gap to now counted: under ULFM a verdict can come the moment a
  // stopped process is continued, before that thread ticks again).
  void stop_agent() {
    if (!agent_) return;
    agent_gap_ = std::max(agent_gap_, agent_->stop());
    agent_.reset();
  }
  // The longest this process went unscheduled, as either thread saw it (seconds): longer than
  // --failure-timeout, the silence the parameter server heard was this process's own.
  double suspended() const { return std::max(client_->longest_gap(), agent_gap_); }
  // The MPI library (ULFM) reported shard `s` failed (with the MPI lock held, on either thread):
  // flagged for the main thread, which at its next exchange ends this worker or (a takeover
  // ahead) takes the parameter server over.
  void reported_failed(int s) {
    if (!ps_failed_) reported_ = PsLoss{s, kReportedByMpi, unix_now()};
    ps_failed_ = true;
  }
  // With the MPI lock held (the exchange's polls, or the agent while a step computes).
  void take_replicas() {
    try {
      replicas_->poll(comm_);
    } catch (const ProcessFailed&) {  // ULFM: a shard died
      reported_failed(0);
    } catch (const std::exception& e) {
      // A malformed replica (a parameter server of another build) or a failed receive: this
      // worker trains on as before, without a replica (also on the heartbeat thread).
      replicas_->close();
      std::cerr << "mpi_trainer: " + worker_label(rank_) + ": warning: no standby replica here: " + e.what() + "\n"
                << std::flush;
    }
  }
  // The join was answered with a stop.
  WorkerResult refused() {
    res_.exit_code = client_->failed_code();
    if (const auto& job = client_->job_shape()) {
      const JobShape mine{model_.param_count(), opts_.batch_size, opts_.push_precision};
      res_.refused = "the parameter server refused this worker: the job trains " + job->describe() + ", this worker " +
                     mine.describe() + " (give `join` the job's --model, --batch-size and --push-precision)";
      return std::move(res_);
    }
    // The parameter server's own message says what failed; a worker of the job adds nothing.
    if (res_.exit_code == 0 && !opts_.quiet)
      std::cerr << "mpi_trainer: " << worker_label(rank_) << ": the parameter server did not take this worker "
                << "(training over, no free slot, or another model or batch size)\n"
                << std::flush;
    return std::move(res_);
  }
  // Shard 0 says which data slot of how many this worker trains (the launched workers, or the
  // --max-workers slots) and where it continues (a resume) or starts.
  void start_computing() {
    const MsgHeader h = client_->first_reply();
    my_slot_ = h.slot;
    data_slots_ = std::max(1, h.slots);
    if (computer_) {
      computer_->start(h.slot, data_slots_, LoaderCursor{h.cursor_epoch, h.cursor_position});
    } else {
      // Benchmark: a fixed, harmless gradient and the initial BN statistics; no compute.
      model_.init_params(grads_, batch_stats_, opts_.seed);
      for (std::int64_t i = 0; i < grads_.flat().numel(); ++i)
        grads_.flat().data()[i] *= 1e-6f;
    }
  }
  // The push journal (ps/resilience/push_journal.hpp): the push about to be sent, then each shard's reply to it.
  void journal_push() {
    if (!journal_) return;
    journal_->record(my_slot_, res_.pushes);
    for (int s = 0; s < shards_; ++s)
      journal_->part(s, client_->prepared(s), client_->push_payload(s), client_->pulled(s));
  }
  void journal_replies(bool all) {
    if (!journal_ || journal_->entries() == 0) return;
    for (int s = 0; s < shards_; ++s)
      if (all || client_->replied(s)) journal_->acknowledge(s, client_->reply(s));
    res_.push_journal_peak_bytes = journal_->peak_bytes();
    res_.push_journal_peak_pushes = journal_->peak_entries();
    res_.push_journal_dropped = journal_->dropped();
  }
  bool end_hung_shard();
  bool leave_if_noticed();
  Exchange exchange(MsgKind kind);
  Recovered recover();
  WorkerResult end_lost();
  WorkerResult end_dropped(double suspended);

  const WorkerOptions& opts_;
  const Model& model_;
  const int rank_, shards_;
  const bool takeover_;  // ULFM, a launched worker: the survivors take a lost parameter-server shard over
  FaultPlan plan_;
  MPI_Comm comm_;  // the parameter server's; a takeover replaces it with the survivors'
  std::vector<int> hung_;  // world ranks of hung shards this worker reported failed, no takeover agreed yet
  std::mutex mpi_lock_;
  // A standby's replicas of the shards (any worker may be made one, at any time), taken with the
  // MPI lock held by the polls and by the agent while a step computes.
  std::optional<ReplicaHost> replicas_{std::in_place, shards_};
  std::atomic<bool> ps_failed_{false};
  PsLoss reported_;             // with the MPI lock held
  std::optional<PsLoss> lost_;  // the main thread's verdict: the parameter server is lost
  std::optional<WorkerAgent> agent_;
  double agent_gap_ = 0;  // the longest gap of the heartbeat threads stopped so far
  // Declared after the agent: destroyed before it, so the replicas are closed first (as before).
  struct CloseReplicas {
    std::mutex& lock;
    std::optional<ReplicaHost>& host;
    ~CloseReplicas() {
      const std::lock_guard<std::mutex> hold(lock);
      if (host) host->close();
    }
  } close_replicas_{mpi_lock_, replicas_};
  std::unique_ptr<StepComputer> computer_;
  FlatTensors grads_{model_.params()}, batch_stats_{model_.stats()};
  std::optional<WorkerClient> client_;
  // Under a takeover with standbys (WorkerOptions::push_journal): this worker's pushes that the newest
  // replica may not hold.
  std::optional<PushJournal> journal_;
  int my_slot_ = rank_ - shards_, data_slots_ = 0;  // shard 0's answer to the first join says
  WorkerResult res_;
};

// After a reply: a notice ends this worker here (its last step is pushed), and --revoke entries
// for this global step fire.
bool Worker::leave_if_noticed() {
  plan_.at_step(rank_, client_->global_step());
  const int sig = notice_signal();
  if (!sig) return false;
  if (agent_->claim_leave()) {
    std::lock_guard<std::mutex> lock(mpi_lock_);
    WorkerAgent::send_leave(comm_, shards_, sig, opts_.failure_timeout);
  }
  if (!opts_.quiet)
    std::cerr << "mpi_trainer: " << worker_label(rank_) << ": " << signal_name(sig)
              << ": pushed its last step and left at global step " << client_->global_step() << '\n'
              << std::flush;
  return true;
}

// One exchange; when the parameter server is lost in it (a takeover ahead): take it over, or join
// the survivors' parameter server (lost too: again). kLost: lost_ says how.
Worker::Exchange Worker::exchange(MsgKind kind) {
  for (;;) {
    const WorkerClient::Reply reply = client_->push_pull(kind);
    if (kind == MsgKind::kPush && (reply == WorkerClient::Reply::kOk || reply == WorkerClient::Reply::kFailed))
      journal_replies(reply == WorkerClient::Reply::kOk);
    switch (reply) {  // kFailed: a push in flight is replayed from the journals (or lost with the parameter server)
      case WorkerClient::Reply::kOk: return Exchange::kGoOn;
      case WorkerClient::Reply::kStop: return Exchange::kStopped;
      case WorkerClient::Reply::kLost:
        lost_ = client_->loss();
        if (!takeover_ || !end_hung_shard()) return Exchange::kLost;
        break;  // the MPI library reports it failed now: taken over below
      case WorkerClient::Reply::kFailed: break;
    }
    if (!takeover_) {
      const std::lock_guard<std::mutex> lock(mpi_lock_);
      lost_ = reported_;
      return Exchange::kLost;
    }
    switch (recover()) {
      case Recovered::kBecamePs: return Exchange::kBecamePs;
      case Recovered::kLost: return Exchange::kLost;
      case Recovered::kRejoin: break;
    }
    ps_failed_ = false;
    replicas_.emplace(shards_);
    start_agent();
    client_->prepare_join(false);  // the new parameter server's messages go through MPI
    kind = MsgKind::kJoin;
  }
}

// Under ULFM a shard silent past --failure-timeout (lost_) may be hung (stopped, a debugger, a
// stuck disk), not dead: neither MPI nor ULFM reports it, and the survivors' shrink would wait for
// it. The hang is turned into a failure the MPI library reports to every survivor, and the takeover
// follows with the journals replayed: nothing lost.
//   - A worker on its node (it took the worker's shared-memory segment, so the join reply's process
//     id is valid here) that finds it stopped or stuck in the kernel ends it at once (SIGKILL); one
//     that runs or sleeps is alive, only slow (a handover that waits for its standby, say): left.
//   - Every other worker waits up to --failure-timeout (1 s at least) more for the report (a worker
//     on its node may end it); when none came and the shard did not answer meanwhile, it reports
//     the shard failed itself, through the runtime (ulfm_report_failed: PMIx); the agreement tells
//     the new parameter server, which has the runtime end it once it is done (Takeover::hung).
// Not when this process's own suspension made the silence. Whether the failure was reported (no:
// the loss ends this worker as before).
bool Worker::end_hung_shard() {
  if (suspended() > opts_.failure_timeout) return false;
  const int s = lost_->shard;
  const double wait = std::max(1.0, opts_.failure_timeout);
  const int pid = client_->local_pid(s);
  const char state = pid > 0 ? process_state(pid) : '?';
  if (state == 'T' || state == 't' || state == 'D') {
    std::ostringstream line;
    line << "mpi_trainer: " << worker_label(rank_) << ": parameter-server shard " << s << " (pid " << pid
         << " on this node, state " << state << ") did not answer within " << std::setprecision(3) << lost_->waited
         << " s and is not reported dead: hung, SIGKILL to it, so that the survivors take it over\n";
    std::cerr << line.str() << std::flush;
    if (::kill(pid, SIGKILL) != 0 && errno != ESRCH)
      std::cerr << "mpi_trainer: " + worker_label(rank_) + ": kill(" + std::to_string(pid) + "): " + std::strerror(errno) + "\n"
                << std::flush;
    return client_->await_failure(wait);
  }
  bool answered = false;
  if (client_->await_failure(wait, &answered)) return true;
  if (answered || (pid > 0 && state != '?')) return false;  // alive: it answered, or it runs or sleeps here
  std::string why;
  int world_rank = -1;
  bool reported = false;
  {
    const std::lock_guard<std::mutex> lock(mpi_lock_);
    reported = ulfm_report_failed(comm_, s, &world_rank, &why);
  }
  if (reported) hung_.push_back(world_rank);  // offered in the agreement (recover)
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank_) << ": parameter-server shard " << s << " did not answer within "
       << std::setprecision(3) << lost_->waited + wait << " s and is not reported dead: hung, "
       << (reported ? "reported failed to the runtime, so that the survivors take it over"
                    : "but it cannot be reported failed (" + why + ")");
  std::cerr << line.str() << '\n' << std::flush;
  return reported && client_->await_failure(wait);
}

// The takeover of a lost parameter-server shard (ULFM; docs/fault-model.md, "Takeover under
// ULFM"). Every survivor comes here (the surviving shards too, ps/resilience/run_ps.cpp): the first to learn
// of the loss revokes the communicator, so that the others' next MPI call fails too (a worker
// computing a step comes at its end). Together they shrink it and agree (ps/resilience/recovery.hpp): the
// worker holding the newest replica becomes shard 0 of the new parameter server and starts it
// from that replica, the surviving shards follow it, the global step counts on from the highest
// any survivor saw. That worker gets its Takeover; the others keep their data slots and cursors
// and join the new parameter server (comm_ is theirs). When no takeover is possible (no whole
// replica, two shards lost, none left to train) or another process fails meanwhile, each ends
// as without a takeover (a standby writing its replica first): the restart resumes from the
// newest checkpoint.
Worker::Recovered Worker::recover() {
  const double lost_at = unix_now();
  stop_agent();  // no heartbeats to the dead; MPI is this thread's alone from here
  // Suspended past --failure-timeout (stopped, then continued), this worker was dropped: the
  // job went on without it, and it must not disturb the survivors (revoke, agree): it ends.
  if (suspended() > opts_.failure_timeout) {
    lost_ = PsLoss{0, kReportedByMpi, lost_at};
    return Recovered::kLost;
  }
  const std::lock_guard<std::mutex> lock(mpi_lock_);
  try {
    replicas_->poll(comm_);  // a replica received whole but not yet taken (a handover's last)
  } catch (const std::exception&) {
  }
  std::optional<ReplicaState> held = replicas_->assemble(model_, client_->partition(), data_slots_);
  try {
    ulfm_revoke(comm_);
    plan_.at_takeover(rank_, res_.takeovers + 1);
    client_->renew();
    replicas_->close();
    std::string why;
    SurvivorData replay;
    std::optional<TakeoverPlan> agreed =
        agree_takeover(comm_,
                       SurvivorOffer{held ? held->global_step : -1, client_->global_step(), rank_, -1, my_slot_,
                                     hung_.empty() ? -1 : hung_.back()},
                       shards_, &why, SurvivorData{journal_ ? journal_->take() : std::string(), {}}, &replay);
    if (!agreed) {  // a standby writes its replica for the restart (end_lost)
      if (!opts_.quiet)
        std::cerr << "mpi_trainer: " + worker_label(rank_) + ": " + why + ": no takeover\n" << std::flush;
      lost_ = PsLoss{0, kReportedByMpi, lost_at};
      return Recovered::kLost;
    }
    ++res_.takeovers;
    // The hung processes reported failed are the new parameter server's to end, at its end.
    for (const int r : agreed->hung)
      if (std::find(hung_.begin(), hung_.end(), r) == hung_.end()) hung_.push_back(r);
    std::vector<int> hung = std::exchange(hung_, {});
    if (agreed->shard < 0) {
      comm_ = agreed->comm;
      client_->set_comm(comm_);
      return Recovered::kRejoin;
    }
    MT_ASSERT(agreed->shard == 0 && held, "the replica's holder becomes shard 0");
    Takeover t;
    t.comm = agreed->comm;
    t.first_step = agreed->first_step;
    t.replay = std::make_shared<PsOptions::Replay>(
        PsOptions::Replay{std::move(replay.journal), std::move(replay.state), held->handled, held->shard_steps});
    t.replica = std::move(*held);
    t.worker_ranks = std::move(agreed->worker_ranks);
    t.worker_slots = std::move(agreed->worker_slots);
    t.lost_shards = std::move(agreed->lost_shards);
    t.data_slots = data_slots_;
    t.lost_at = lost_at;
    t.takeovers = res_.takeovers;
    t.plan = std::move(plan_);
    t.hung = std::move(hung);
    res_.takeover = std::move(t);
    return Recovered::kBecamePs;
  } catch (const ProcessFailed&) {  // another process failed during the takeover
    lost_ = PsLoss{0, kReportedByMpi, lost_at};
    return Recovered::kLost;
  }
}

// The parameter server is lost (lost_), no takeover follows: this worker says so, a standby writes
// its replica as the newest checkpoint (WorkerOptions::on_ps_lost), and it returns kExitPsLost
// with `ps_lost` set. Nothing on the way out waits on MPI (Open MPI 4.1 never completes a send to
// a dead peer): heartbeats, replica receives and exchange buffers in flight are abandoned, kept to
// the end of the process, whose main leaves without MPI_Finalize.
WorkerResult Worker::end_lost() {
  // The process was suspended longer than --failure-timeout (a gap in the heartbeat thread's ticks
  // or in a wait's polls): the silence was its own.
  if (agent_) agent_->ps_lost();
  stop_agent();
  const double suspended = this->suspended();
  const std::lock_guard<std::mutex> lock(mpi_lock_);
  unlink_pending_segments();
  std::cout << std::flush;
  if (suspended > opts_.failure_timeout) return end_dropped(suspended);
  std::cerr << loss_line(rank_, *lost_) << std::flush;
  if (opts_.on_ps_lost) {
    try {
      if (auto r = replicas_->assemble(model_, client_->partition(), data_slots_)) {
        opts_.on_ps_lost(*r);
      } else if (replicas_->any() && !opts_.quiet) {  // a standby that has not heard from every shard yet
        std::cerr << "mpi_trainer: " + worker_label(rank_) +
                         " (standby): no replica from every shard yet: the restart resumes from the newest checkpoint\n"
                  << std::flush;
      }
    } catch (...) {
      const ErrorReport e = describe_error(std::current_exception());
      std::cerr << "mpi_trainer: " + worker_label(rank_) + ": error: " + e.what + "\n" << std::flush;
    }
  }
  replicas_->abandon_receives();
  client_->abandon_in_flight();
  res_.exit_code = kExitPsLost;
  res_.ps_lost = true;
  res_.ps_silent = lost_->waited >= 0;
  res_.standby = replicas_->any();
  return std::move(res_);
}

// This process was suspended longer than --failure-timeout (SIGSTOP, a debugger, a frozen VM):
// the silence was its own, the parameter server dropped it and the job went on without it (or
// has finished). It exits 0, so that plain mpirun reports the job's outcome, not this worker's
// absence; a standby's replica is as old as the suspension and is not written. With the MPI lock.
WorkerResult Worker::end_dropped(double suspended) {
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank_) << ": this process was suspended for " << std::fixed
       << std::setprecision(1) << suspended << " s, longer than --failure-timeout " << std::defaultfloat
       << std::setprecision(3) << opts_.failure_timeout
       << " s: the parameter server dropped it and the job went on without it; exit 0\n";
  std::cerr << line.str() << std::flush;
  replicas_->abandon_receives();
  client_->abandon_in_flight();
  res_.exit_code = kExitOk;
  res_.peer_lost = true;  // its requests to the parameter server are abandoned: no MPI_Finalize
  return std::move(res_);
}

}  // namespace

WorkerResult run_worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
                        const std::function<std::unique_ptr<StepComputer>()>& make_computer) {
  Worker w(opts, model, ps, rank, std::move(plan), make_computer);
  WorkerResult r = w.run();
  r.hung = w.hung();  // empty once a takeover was agreed: the new parameter server has them
  return r;
}

}  // namespace mt
