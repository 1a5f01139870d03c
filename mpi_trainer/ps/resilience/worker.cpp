// The worker (ps/resilience/worker.hpp): pulls parameters, computes a gradient on its own mini-batch
// (StepComputer, from the app), pushes it to every shard, and repeats until a shard says stop; a
// notice, a lost parameter server and a worker dropped while alive end it here. The takeover of a
// lost parameter server is worker_takeover.cpp's.
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
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "ps/ps.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/recovery.hpp"
#include "ps/resilience/replica.hpp"
#include "ps/resilience/worker.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/transport.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

namespace {

// One line (one write: lines of several workers do not interleave).
std::string loss_line(int rank, const PsLoss& loss, const std::optional<WitnessVerdict>& witnessed) {
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank) << ": parameter-server shard " << loss.shard;
  if (loss.waited < 0)
    line << " failed (reported by the MPI library, ULFM)";
  else
    line << " did not answer within " << std::setprecision(3) << loss.waited << " s (--failure-timeout)";
  if (loss.waited >= 0 && witnessed) line << " and " << witnessed->describe(loss.shard);
  line << " at unix " << std::fixed << std::setprecision(3) << loss.at_unix << ": the parameter server is lost; exit "
       << kExitPsLost << '\n';
  return line.str();
}

}  // namespace

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
    const WorkerClient::Reply reply = client_->push_pull(kind, rejoining_);
    if (kind == MsgKind::kPush && (reply == WorkerClient::Reply::kOk || reply == WorkerClient::Reply::kFailed)) {
      journal_replies(reply == WorkerClient::Reply::kOk);
      if (reply == WorkerClient::Reply::kOk || client_->replied(0)) acknowledged();
    }
    switch (reply) {  // kFailed: a push in flight is replayed from the journals (or lost with the parameter server)
      case WorkerClient::Reply::kOk: return Exchange::kGoOn;
      case WorkerClient::Reply::kStop: return Exchange::kStopped;
      case WorkerClient::Reply::kLost:
        lost_ = client_->loss();
        if (rejoining_ > 0) return Exchange::kLost;
        if (suspended() > opts_.failure_timeout) return Exchange::kDropped;
        if (cut_off()) return Exchange::kCutOff;
        if (!takeover_ || !end_hung_shard()) return Exchange::kLost;
        break;  // the MPI library reports it failed now: taken over below
      case WorkerClient::Reply::kFailed:
        // Suspended past --failure-timeout, this worker was dropped before the failure it hears
        // of now (the parameter server may well have ended meanwhile): it asks to rejoin as from
        // the silence above, and starts no takeover; which it hears first is a race.
        if (rejoining_ == 0 && suspended() > opts_.failure_timeout) {
          const std::lock_guard<std::mutex> lock(mpi_lock_);
          lost_ = reported_;
          return Exchange::kDropped;
        }
        break;
    }
    // kFailed. A worker asking to rejoin was dropped: it starts no takeover (the survivors'
    // agreement is theirs) and is not taken back.
    if (!takeover_ || rejoining_ > 0) {
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
    open_desk();
    client_->prepare_join(false);  // the new parameter server's messages go through MPI
    kind = MsgKind::kJoin;
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
  stop_serving();
  const double suspended = this->suspended();
  const std::lock_guard<std::mutex> lock(mpi_lock_);
  unlink_pending_segments();
  std::cout << std::flush;
  if (suspended > opts_.failure_timeout)
    return end_dropped(suspended_line(suspended, "the parameter server dropped it and the job went on without it; exit 0"));
  std::cerr << loss_line(rank_, *lost_, witnessed_) << std::flush;
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

// This process was suspended past --failure-timeout (SIGSTOP, a debugger, a frozen VM), or its
// link to the parameter server broke while the others still hear it (cut_off): the parameter
// server dropped it for its silence, and the job may still train. With one shard it asks to rejoin
// (docs/fault-model.md, "A dropped worker rejoins"): a join on the same communicator, answered at
// once by a parameter server that still serves (a cut-off worker's once its link is back: TCP
// holds what it sent meanwhile). Taken back, it computes on from its slot's cursor (its last
// gradient, computed on parameters as old as its silence, is not pushed); refused or unanswered
// (training over, no slot for it, the link still down), it ends as before (exit 0). Under ULFM
// (a takeover possible) a worker that reaches no one (its own link is down) leaves at once: were
// the parameter server lost meanwhile, the survivors' takeover agreement would wait for it until
// its link returned. One that another worker answered (a pair cut) waits to rejoin as in the
// default build: a takeover meanwhile revokes the communicator, which reaches it through the
// others, and it leaves then (kFailed while rejoining: no agreement waits on it).
std::optional<WorkerResult> Worker::come_back(bool cut_off) {
  const bool isolated = cut_off && witnessed_ && witnessed_->kind != WitnessVerdict::Kind::kAlive;
  if (shards_ != 1 || !agent_ || agent_->left() || (isolated && takeover_))
    return cut_off ? end_cut_off() : end_lost();
  const Exchange back = rejoin(cut_off);
  if (back == Exchange::kGoOn) {
    start_computing(/*rejoined=*/true);
    if (leave_if_noticed()) return std::move(res_);
    return std::nullopt;
  }
  if (back == Exchange::kBecamePs) return std::move(res_);
  const char* why = back == Exchange::kStopped      ? "training is over, or no data slot for it"
                    : lost_ && lost_->waited < 0 ? "it has ended, or failed (reported by the MPI library)"
                                                 : "no answer";
  stop_serving();
  const std::lock_guard<std::mutex> lock(mpi_lock_);
  unlink_pending_segments();
  return end_dropped("mpi_trainer: " + worker_label(rank_) + ": the parameter server did not take it back (" + why +
                     "): the job goes on without it; exit 0\n");
}

Worker::Exchange Worker::rejoin(bool cut_off) {
  // A parameter server that serves answers within a few polls (a checkpoint's write may delay it a
  // little); a cut-off worker's link may take a while to come back.
  const double wait = cut_off ? std::max(60.0, 10 * opts_.failure_timeout) : 2 * opts_.failure_timeout + 1;
  if (cut_off) {
    std::ostringstream line;
    line << "mpi_trainer: " << worker_label(rank_) << ": parameter-server shard " << lost_->shard
         << " did not answer within " << std::setprecision(3) << lost_->waited << " s (--failure-timeout), but "
         << witnessed_->describe(lost_->shard)
         << ": its link is broken, not the parameter server; it asks to rejoin once the link is back (up to " << wait
         << " s)\n";
    std::cerr << line.str() << std::flush;
  } else {
    std::cerr << suspended_line(suspended(), "the parameter server dropped it; it asks to rejoin") << std::flush;
  }
  {
    const std::lock_guard<std::mutex> lock(mpi_lock_);
    client_->cancel_in_flight();
  }
  if (journal_) journal_->forget_unacknowledged();
  client_->reset_gap();
  if (agent_) agent_->reset_gap();
  agent_gap_ = 0;
  client_->prepare_join(false);  // no segment: the shard's receive for it takes a header alone
  rejoining_ = wait;
  const Exchange e = exchange(MsgKind::kJoin);
  rejoining_ = 0;
  return e;
}

// A shard silent past --failure-timeout: before this worker calls the parameter server lost
// (which under ULFM reports it failed to the runtime, and in the default build makes a standby end
// the job), the other workers say whether they still hear it (ps/resilience/witness.hpp). True:
// they do, or none answers: the broken link is this worker's, and it leaves (end_cut_off). Not
// asked after this process's own suspension (end_dropped says so), nor by a joiner.
bool Worker::cut_off() {
  if (rank_ < 0 || std::max(suspended(), agent_ ? agent_->gap_to_now() : 0.0) > opts_.failure_timeout) return false;
  witnessed_ = ask_witnesses(comm_, shards_, lost_->shard, lost_->waited, opts_.failure_timeout / 2,
                             std::max(1.0, opts_.failure_timeout), mpi_lock_);
  using K = WitnessVerdict::Kind;
  return witnessed_->kind == K::kAlive || witnessed_->kind == K::kIsolated;
}

// The end of a worker that lost its parameter server (end_lost) or its link to it (end_cut_off):
// one that reached a verdict on a silent shard first answers the others' asks a while longer (its
// agent serves them: their silences began at other moments, their asks come a little later), then
// the agent and the desk stop, heartbeats to the shard abandoned.
void Worker::stop_serving() {
  if (agent_) agent_->ps_lost();
  if (witnessed_ && witnessed_->kind != WitnessVerdict::Kind::kNoPeers &&
      witnessed_->kind != WitnessVerdict::Kind::kFailureReported && agent_)
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(1.0, opts_.failure_timeout)));
  stop_agent();
  close_desk();
}

// The parameter server is silent to this worker alone (another worker heard it since), or this
// worker reaches no one: its link is broken, not the parameter server. It reports nothing, writes
// no replica and ends nothing: the parameter server drops it after --failure-timeout and the job
// goes on with the others. It exits 0 (as a dropped worker does: plain mpirun reports the job's
// outcome, not this worker's absence), without MPI_Finalize (its requests to the parameter server
// are abandoned).
WorkerResult Worker::end_cut_off() {
  stop_serving();
  const std::lock_guard<std::mutex> lock(mpi_lock_);
  unlink_pending_segments();
  std::cout << std::flush;
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank_) << ": parameter-server shard " << lost_->shard
       << " did not answer within " << std::setprecision(3) << lost_->waited << " s (--failure-timeout), but "
       << witnessed_->describe(lost_->shard)
       << (witnessed_->kind == WitnessVerdict::Kind::kAlive
               ? ": the link between this worker and the parameter server is broken, not the parameter server"
               : ": this worker's own link is down")
       << "; it leaves the job to the others (nothing reported failed, no replica written); exit 0\n";
  std::cerr << line.str() << std::flush;
  replicas_->abandon_receives();
  client_->abandon_in_flight();
  res_.exit_code = kExitOk;
  res_.peer_lost = true;
  return std::move(res_);
}

// "this process was suspended for S s, longer than --failure-timeout T s: <what follows>", one line.
std::string Worker::suspended_line(double seconds, const std::string& then) const {
  std::ostringstream line;
  line << "mpi_trainer: " << worker_label(rank_) << ": this process was suspended for " << std::fixed
       << std::setprecision(1) << seconds << " s, longer than --failure-timeout " << std::defaultfloat
       << std::setprecision(3) << opts_.failure_timeout << " s: " << then << '\n';
  return line.str();
}

// This process was suspended longer than --failure-timeout (SIGSTOP, a debugger, a frozen VM):
// the silence was its own, the parameter server dropped it and the job went on without it (or
// has finished), and did not take it back (come_back). It exits 0, so that plain mpirun reports
// the job's outcome, not this worker's absence; a standby's replica is as old as the suspension
// and is not written. `line` says so. With the MPI lock.
WorkerResult Worker::end_dropped(const std::string& line) {
  std::cerr << line << std::flush;
  replicas_->abandon_receives();
  client_->abandon_in_flight();
  res_.exit_code = kExitOk;
  res_.peer_lost = true;  // its requests to the parameter server are abandoned: no MPI_Finalize
  return std::move(res_);
}

WorkerResult run_worker(const WorkerOptions& opts, const Model& model, MPI_Comm ps, int rank, FaultPlan plan,
                        const std::function<std::unique_ptr<StepComputer>()>& make_computer) {
  Worker w(opts, model, ps, rank, std::move(plan), make_computer);
  WorkerResult r = w.run();
  r.hung = w.hung();  // empty once a takeover was agreed: the new parameter server has them
  return r;
}

}  // namespace mt
