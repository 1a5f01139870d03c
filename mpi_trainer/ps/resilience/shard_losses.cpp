// What a loss means to a shard (ps/exchange/shard.hpp): a worker dropped (lost: silent past
// --failure-timeout or reported failed by ULFM; or left on a notice), the heartbeat detector's
// verdicts acted on, a notice taken (handed over to a standby, or a stop), and the stop itself.
#include "ps/exchange/shard.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/resilience/notices.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

// A worker is gone: lost (silent past --failure-timeout: revoked, killed, or cut off) or left on a
// notice. The learning-rate policy and the momentum correction follow the new worker count.
void Shard::drop(Member& m, bool lost, const std::string& detail, int signo, bool back) {
  const auto now = Clock::now();
  const bool was_joined = m.joined_at.has_value();
  Membership::departed(m, lost, now);
  if (lost) {
    // The newest parameters may live in its reply buffer, which is abandoned now.
    if (current_ == sent_params(m)) {
      std::copy_n(current_, mine_, params_.data());
      current_ = params_.data();
    }
    // One dropped for its silence may be alive (stopped, its link slow): its push receive stays
    // posted, so that when it speaks again it is heard (heard_from_dropped: its join taken back,
    // a push it computed before it found out dropped). One the MPI library reported failed is gone.
    if (detail == kUlfmReported || m.rreq == MPI_REQUEST_NULL) {
      abandon(std::move(m.recv));
      m.rreq = MPI_REQUEST_NULL;  // never waited for, never cancelled
    }
    abandon(std::move(m.send));
    abandon(std::move(m.hb));
    m.sreq = m.hbreq = MPI_REQUEST_NULL;
    m.bells = PairBells{};
  }
  if (!lead()) return;
  // --replace-workers: whatever took it away, a new process takes its slot (ps/elastic/replacements.hpp).
  // Not when the notice it left on reached the whole job (Slurm's preemption, a signal to mpirun):
  // this process has it too, and stops.
  if (spawner_ && !lost && !stop_at_) check_notice();
  if (spawner_ && !back && !stop_at_ && failure_code_ == 0 && step_ < opts_.train_steps) replace(m);
  const int live = members_.live();
  // A lost worker was computing on the parameters of its last reply: that step is lost.
  const bool computing = lost && was_joined;
  PsEvents::Departure e;
  e.global_step = step_;
  e.rank = m.rank;
  e.type = m.type;
  e.lost = lost;
  e.detected_by = !lost ? "notice" : detail == kUlfmReported ? "mpi" : "heartbeat";
  e.detail = detail;
  e.signo = signo;
  e.silent_seconds = seconds_between(m.last_heard.value_or(m.added_at), now);
  e.elapsed_seconds = since(t0_);
  e.work_lost_steps = computing ? 1 : 0;
  e.work_lost_seconds = computing ? std::max(0.0, seconds_between(m.last_reply, *m.last_heard)) : 0.0;
  e.active_seconds = m.active_seconds;
  e.active_workers = live;
  e.lr_divisor = policy_.lr_divisor(live);
  e.momentum = policy_.momentum(live);
  events_.departure(e);
  if (back) return;
  // The workers may have left on a notice that reached this process too: that is the reason.
  if (live == 0 && !stop_at_) check_notice();
  if (live == 0 && step_ < opts_.train_steps && !stop_at_) {
    if (opts_.max_workers > 0) {
      events_.waiting_for_joins(step_);
    } else {
      if (lost && detail != kUlfmReported) wait_for_successor();  // may end this process (PsSuperseded)
      if (awaiting_workers()) {
        events_.waiting_for_joins(step_);  // the replacements under way
      } else {
        begin_stop(kNoWorkerLeft);
      }
    }
  }
}

// The last worker went silent (not reported dead), under ULFM with standbys: this process may be
// the one cut off (its own link down), its workers about to take it over inside the job. They
// need --failure-timeout to find it silent, up to max(1, --failure-timeout) to ask one another, as
// long again to report it failed, and the successor claims the next epoch as it starts. This one
// looks for that epoch as long before it stops the job; found, it ends as a superseded parameter
// server does, writing nothing (no checkpoint, no summary beside its successor's: exit 11).
// Without a successor it stops as before, that much later.
void Shard::wait_for_successor() {
  if (!lead() || !standbys_ || !ulfm_available()) return;
  const double wait = 3 * opts_.failure_timeout + std::max(1.0, opts_.failure_timeout) + 1;
  const auto t0 = Clock::now();
  while (since(t0) < wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // PsReport reads the epoch file every 0.5 s at most
    if (events_.superseded())
      throw PsSuperseded("parameter server (rank " + std::to_string(self_) + "): every worker went silent at once, " +
                         "and another parameter server has taken its place meanwhile (a newer epoch in the "
                         "checkpoint directory): this one was cut off; ending without writing anything, exit " +
                         std::to_string(kExitSuperseded));
  }
}

void Shard::detect_failures() {
  check_superseded();  // a silence may be this process's own pause
  const auto now = Clock::now();
  for (auto& m : members_.members())
    if (const auto why = members_.overdue(m, now, stop_at_)) drop(m, /*lost=*/true, *why);
}

void Shard::check_notice() {
  if (notice_) return;
  if (const int sig = notice_signal()) {
    notice_ = sig;
    if ((sig == SIGTERM || sig == SIGUSR1) && opts_.hand_over && standbys_ && lead() && shards_ == 1 && !stop_at_ &&
        failure_code_ == 0 && step_ < opts_.train_steps) {
      PsEvents::NoHandover why;
      handed_over_ = standbys_->hand_over(
          step_, sig, members_, [this] { return replica_content(); }, &why);
      if (handed_over_) return;
      events_.no_handover(why);
    }
    if (!stop_at_) begin_stop(sig == SIGCONT ? "SIGCONT (mpirun is ending the job)" : signal_name(sig));
    if (sig == SIGINT) exit_code_ = kExitInterrupted;
  }
}

// A notice (or the loss of every worker): checkpoint at once, refuse further pushes (each worker
// is told to stop at its next push), then end with exit 75, so that a launcher reruns the job.
void Shard::begin_stop(const std::string& why) {
  stop_at_ = Clock::now();
  stop_reason_ = why;
  exit_code_ = kExitRequeue;
  members_.drain();
  events_.stopping(shard_, why, step_, members_.live());
  if (!coord_) return;
  if (sink_.checkpoints()) coord_->request_snapshot(kForCheckpoint, part());
  coord_->tell_shards(MsgKind::kDrain);
}

}  // namespace mt
