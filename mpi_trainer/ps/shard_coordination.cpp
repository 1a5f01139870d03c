// Shard 0's coordination of the job (ps/shard.hpp): joins taken from the listener, the
// schedule after each step, progress windows and snapshots for checkpoints and evaluations.
#include "ps/shard.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/cadence.hpp"
#include "ps/mpi_env.hpp"
#include "ps/recovery.hpp"
#include "ps/ulfm.hpp"

namespace mt {

void Shard::take_joins() {
  std::string error;
  const std::vector<MPI_Comm> comms = joins_->take(&error);
  if (!error.empty()) events_.log("mpi_trainer: warning: " + error);
  for (const MPI_Comm comm : comms) {
    const auto slot = members_.free_slot();
    if (stop_at_ || failure_code_ != 0 || members_.live() >= opts_.max_workers || !slot) {
      // Full (or stopping): the joiner's join is answered with stop.
      Buffer b(0);
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kStop;
      stamp_failure(b.header());
      MPI_Request req = MPI_REQUEST_NULL;
      isend(b, 0, 0, kTagToWorker, &req, comm);
      MT_MPI(MPI_Request_free(&req));
      abandon(std::move(b));
      events_.log(std::string("mpi_trainer: a worker asked to join, but ") +
                  (failure_code_ != 0 ? "the parameter server failed"
                   : stop_at_         ? "the job is stopping"
                                      : "every slot is taken") +
                  " (--max-workers " +
                  std::to_string(opts_.max_workers) + ")");
      continue;
    }
    Member& m = members_.add(shards_ + workers_ + joined_, comm, 0, *slot, opts_.join_type, Clock::now());
    m.recv = Buffer(mine_ + stats_floats_);
    m.send = Buffer(mine_);
    m.cursor = slot_cursors_[static_cast<std::size_t>(m.slot)];
    irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
    irecv(m.hb, m.peer, kTagHeartbeat, &m.hbreq, m.comm);
    ++joined_;
    const int live = members_.live();
    policy_.joined(step_, live - 1, live);
    events_.join(PsEvents::Join{step_, m.rank, m.slot, m.type, live, policy_.lr_divisor(live), policy_.momentum(live)});
  }
}

void Shard::after_step(double lr) {
  // The clock is read only when a checkpoint interval in seconds asks for it (every update here).
  const double since_ckpt = opts_.ckpt_every_seconds > 0 ? since(last_ckpt_) : 0.0;
  const CadenceDecision due = cadence_after_step(opts_, step_, stop_at_.has_value(), sink_.checkpoints(),
                                                 sink_.evaluates(), since_ckpt);
  if (due.progress) report_progress(lr);
  unsigned want = due.checkpoint ? kForCheckpoint : 0u;
  if (due.eval) {
    if (sink_.eval_busy() || (gather_->gathering() && (gather_->purposes() & kForEval)))
      events_.eval_skipped(step_);
    else
      want |= kForEval;
  }
  if (want) request_snapshot(want);
}

void Shard::report_progress(double lr) {
  const double dt = since(window_start_);
  PsEvents::Progress p;
  p.global_step = step_;
  p.loss = window_loss_ / double(std::max<std::int64_t>(window_pushes_, 1));
  p.train_accuracy = double(window_correct_) / double(std::max<std::int64_t>(window_images_, 1));
  p.lr = lr;
  p.active_workers = members_.live();
  p.momentum = policy_.momentum(p.active_workers);
  p.images_per_second = double(window_images_) / std::max(dt, 1e-9);
  double staleness = 0;
  for (const auto& m : members_.members())
    staleness += m.window_staleness;
  p.mean_staleness = staleness / double(std::max<std::int64_t>(window_pushes_, 1));
  p.dropped_stale_pushes = dropped_;
  p.elapsed_seconds = since(t0_);
  const double done_fraction =
      double(step_ - start_step_) / double(std::max<std::int64_t>(opts_.train_steps - start_step_, 1));
  p.eta_seconds = done_fraction > 0 ? p.elapsed_seconds * (1 - done_fraction) / done_fraction : -1;
  for (auto& m : members_.members()) {
    p.workers.push_back(
        PsEvents::Progress::Worker{m.rank, m.type, m.window_pushes, double(m.window_images) / std::max(dt, 1e-9),
                                   m.window_pushes ? m.window_staleness / double(m.window_pushes) : 0.0,
                                   m.window_pushes ? m.window_step_seconds / double(m.window_pushes) : 0.0,
                                   m.working()});
    m.window_pushes = m.window_images = 0;
    m.window_staleness = m.window_step_seconds = 0;
  }
  events_.progress(p);
  window_start_ = Clock::now();
  window_loss_ = 0;
  window_pushes_ = window_correct_ = window_images_ = 0;
}

std::vector<WorkerUsage> Shard::usage() const {
  const auto now = Clock::now();
  std::vector<WorkerUsage> out;
  for (const auto& m : members_.members())
    out.push_back(WorkerUsage{m.rank, m.type, m.seconds_active(now), m.pushes, m.dropped,
                              m.pushes ? m.staleness_sum / double(m.pushes) : 0.0});
  return out;
}

double Shard::schedule_lr_now() const { return policy_.schedule().lr_at(std::max<std::int64_t>(step_ - 1, 0)); }

// Shard 0: copies its own part now and asks the other shards for theirs; the snapshot is
// complete when every part arrived (poll_background). Only this copy stalls training.
void Shard::request_snapshot(unsigned purposes) {
  if (gather_->gathering()) {
    gather_->defer(purposes);
    return;
  }
  const auto t = Clock::now();
  gather_->begin(purposes, current(), velocity_, stats_,
                 SnapshotMeta{step_, slot_cursors_, since(t0_), schedule_lr_now(), usage()});
  gather_stall_ = since(t);
  if (shards_ == 1) finish_gather();
}

void Shard::finish_gather() {
  const auto t = Clock::now();
  const unsigned purposes = gather_->purposes();
  const Snapshot snap = gather_->complete();
  if (purposes & kForCheckpoint) {
    sink_.checkpoint(snap);
    last_ckpt_ = Clock::now();
    last_snapshot_step_ = snap.global_step;
  }
  if (purposes & kForEval) sink_.evaluate(snap);
  if (purposes & kForCheckpoint)
    events_.snapshot_taken(snap.global_step, gather_stall_ + since(t), gather_->started_seconds_ago(), false);
  if (const unsigned next = gather_->take_deferred()) request_snapshot(next);
}

void Shard::poll_background() {
  if (!lead() || failure_code_ != 0) return;
  if (shards_ > 1 && gather_->gathering() && gather_->arrived()) finish_gather();
  if (sink_.checkpoints() && opts_.ckpt_every_seconds > 0 && !gather_->gathering() && step_ < opts_.train_steps &&
      since(last_ckpt_) >= opts_.ckpt_every_seconds)
    request_snapshot(kForCheckpoint);
  if (const std::string why = sink_.poll(); !why.empty() && !stop_at_) begin_stop(why);
}

}  // namespace mt
