// A worker's part in the takeover of a lost parameter-server shard (ULFM; docs/fault-model.md,
// "Takeover under ULFM"): a silent shard that may be hung turned into a failure every survivor sees
// (end_hung_shard), and the survivors' revoke, shrink and agreement, after which this worker becomes
// the parameter server, joins the new one, or ends (recover). The agreement itself is
// ps/resilience/recovery.hpp's; the new parameter server's start, run_ps.cpp's and shard_takeover.cpp's.
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "ps/resilience/recovery.hpp"
#include "ps/resilience/worker.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

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

}  // namespace

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
      std::cerr << "mpi_trainer: " + worker_label(rank_) + ": kill(" + std::to_string(pid) +
                       "): " + std::strerror(errno) + "\n"
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
  close_desk();
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

}  // namespace mt
