// Shard 0's coordination of the job (ps/exchange/coordinator.hpp).
#include "ps/exchange/coordinator.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ps/exchange/cadence.hpp"

namespace mt {

Coordinator::Coordinator(const PsOptions& opts, const Model& model, const Partition& part, int momenta, bool gap,
                         double deadline, const UpdatePolicy& policy, Membership& members, PsEvents& events,
                         SnapshotSink& sink)
    : opts_(opts),
      policy_(policy),
      members_(members),
      events_(events),
      sink_(sink),
      gather_(model, part, deadline, momenta, gap, opts.comm) {}

std::int64_t Coordinator::start(FlatTensors& params, std::vector<FlatTensors>& state, FlatTensors& stats,
                                std::span<const StartLog> logs, const std::function<void()>& adjust) {
  const int momenta = static_cast<int>(state.size()) - (policy_.gap_aware() ? 1 : 0);
  const std::span<FlatTensors> all(state);
  const PsStart start = sink_.restore(params, all.first(static_cast<std::size_t>(momenta)),
                                      policy_.gap_aware() ? &state.back() : nullptr, stats, members_.slots());
  MT_ASSERT(static_cast<int>(start.slot_cursors.size()) == members_.slots(), "a cursor per data slot");
  start_step_ = std::max(start.global_step, opts_.first_step);
  slot_cursors_ = start.slot_cursors;
  if (adjust) adjust();
  gather_.send_start(params, state, start_step_, logs);
  for (auto& m : members_.members())
    m.cursor = cursor(m.slot);
  return start_step_;
}

void Coordinator::replayed(int slot, const MsgHeader& push, std::int64_t step, bool applied) {
  if (applied) slot_cursors_.at(static_cast<std::size_t>(slot)) = LoaderCursor{push.cursor_epoch, push.cursor_position};
  using K = PsEvents::Pushed::Kind;
  events_.pushed(PsEvents::Pushed{applied ? K::kReplayed : K::kReplayedCounted, step, -1, slot, push.push_id,
                                  push.model_version, 0.0});
}

void Coordinator::clock_started(Clock::time_point t0) { t0_ = window_start_ = last_ckpt_ = t0; }

void Coordinator::applied(Member& m, const MsgHeader& h, std::int64_t step) {
  m.cursor = LoaderCursor{h.cursor_epoch, h.cursor_position};
  slot_cursors_[static_cast<std::size_t>(m.slot)] = m.cursor;
  window_loss_ += h.loss;
  window_correct_ += h.correct;
  window_images_ += h.batch;
  ++window_pushes_;
  if (step == start_step_ + 1) events_.first_step(step, since(t0_));  // bench/faults/fault_bench.sh
  events_.pushed(
      PsEvents::Pushed{PsEvents::Pushed::Kind::kApplied, step, m.rank, m.slot, h.push_id, h.model_version, since(t0_)});
}

void Coordinator::counted(Member& m, std::int64_t push_id, std::int64_t step) {
  events_.pushed(PsEvents::Pushed{PsEvents::Pushed::Kind::kCounted, step, m.rank, m.slot, push_id,
                                  m.recv.header().model_version, since(t0_)});
}

void Coordinator::after_step(const Part& p, double lr, bool stopping) {
  // The clock is read only when a checkpoint interval in seconds asks for it (every update here).
  const double since_ckpt = opts_.ckpt_every_seconds > 0 ? since(last_ckpt_) : 0.0;
  const CadenceDecision due =
      cadence_after_step(opts_, p.step, stopping, sink_.checkpoints(), sink_.evaluates(), since_ckpt);
  if (due.progress) report_progress(p.step, lr);
  unsigned want = due.checkpoint ? kForCheckpoint : 0u;
  if (due.eval) {
    if (sink_.eval_busy() || (gather_.gathering() && (gather_.purposes() & kForEval)))
      events_.eval_skipped(p.step);
    else
      want |= kForEval;
  }
  if (want) request_snapshot(want, p);
}

void Coordinator::report_progress(std::int64_t step, double lr) {
  const double dt = since(window_start_);
  PsEvents::Progress p;
  p.global_step = step;
  p.loss = window_loss_ / double(std::max<std::int64_t>(window_pushes_, 1));
  p.train_accuracy = double(window_correct_) / double(std::max<std::int64_t>(window_images_, 1));
  p.lr = lr;
  p.active_workers = members_.live();
  p.momentum = policy_.momentum(p.active_workers);
  p.images_per_second = double(window_images_) / std::max(dt, 1e-9);
  double staleness = 0;
  for (const auto& m : members_.members())
    staleness += m.window_staleness;
  p.dropped_stale_pushes = members_.dropped_stale();
  p.mean_staleness = staleness / double(std::max<std::int64_t>(window_pushes_, 1));
  p.elapsed_seconds = since(t0_);
  const double done_fraction =
      double(step - start_step_) / double(std::max<std::int64_t>(opts_.train_steps - start_step_, 1));
  p.eta_seconds = done_fraction > 0 ? p.elapsed_seconds * (1 - done_fraction) / done_fraction : -1;
  for (auto& m : members_.members()) {
    if (m.only_connected()) continue;
    p.workers.push_back(PsEvents::Progress::Worker{
        m.rank, m.type, m.window_pushes, double(m.window_images) / std::max(dt, 1e-9),
        m.window_pushes ? m.window_staleness / double(m.window_pushes) : 0.0,
        m.window_pushes ? m.window_step_seconds / double(m.window_pushes) : 0.0, m.working()});
    m.window_pushes = m.window_images = 0;
    m.window_staleness = m.window_step_seconds = 0;
  }
  events_.progress(p);
  window_start_ = Clock::now();
  window_loss_ = 0;
  window_pushes_ = window_correct_ = window_images_ = 0;
}

std::vector<WorkerUsage> Coordinator::usage() const {
  const auto now = Clock::now();
  std::vector<WorkerUsage> out;
  for (const auto& m : members_.members())
    if (!m.only_connected())
      out.push_back(WorkerUsage{m.rank, m.type, m.seconds_active(now), m.pushes, m.dropped,
                                m.pushes ? m.staleness_sum / double(m.pushes) : 0.0});
  return out;
}

SnapshotMeta Coordinator::meta(std::int64_t step) const {
  return SnapshotMeta{step, slot_cursors_, since(t0_), lr_now(step), usage()};
}

std::string Coordinator::replica_record(std::int64_t step) const {
  return sink_.replica_record(step, slot_cursors_, since(t0_), lr_now(step), usage());
}

// Copies shard 0's part now and asks the other shards for theirs; the snapshot is complete when
// every part arrived (poll). Only this copy stalls training.
void Coordinator::request_snapshot(unsigned purposes, const Part& p) {
  if (gather_.gathering()) {
    gather_.defer(purposes);
    return;
  }
  const auto t = Clock::now();
  gather_.begin(purposes, p.params, p.state, p.stats, meta(p.step));
  gather_stall_ = since(t);
  if (opts_.num_ps == 1) finish_gather(p);
}

void Coordinator::finish_gather(const Part& p) {
  const auto t = Clock::now();
  const unsigned purposes = gather_.purposes();
  const Snapshot snap = gather_.complete();
  if (purposes & kForCheckpoint) {
    sink_.checkpoint(snap);
    last_ckpt_ = Clock::now();
    last_snapshot_step_ = snap.global_step;
  }
  if (purposes & kForEval) sink_.evaluate(snap);
  if (purposes & kForCheckpoint)
    events_.snapshot_taken(snap.global_step, gather_stall_ + since(t), gather_.started_seconds_ago(), false);
  if (const unsigned next = gather_.take_deferred()) request_snapshot(next, p);
}

std::string Coordinator::poll(const Part& p, bool stopping) {
  if (opts_.num_ps > 1 && gather_.gathering() && gather_.arrived()) finish_gather(p);
  if (sink_.checkpoints() && opts_.ckpt_every_seconds > 0 && !gather_.gathering() && p.step < opts_.train_steps &&
      since(last_ckpt_) >= opts_.ckpt_every_seconds)
    request_snapshot(kForCheckpoint, p);
  std::string why = sink_.poll();
  return stopping ? std::string() : why;
}

void Coordinator::collect_final(FlatTensors& params, std::vector<FlatTensors>& state, bool clean) {
  if (finals_collected_) return;
  finals_collected_ = true;
  gather_.collect_final(params, state);
  gather_.send_control(MsgKind::kStop, clean ? kCleanEnd : 0, /*blocking=*/true);
  gather_.settle();
}

}  // namespace mt
