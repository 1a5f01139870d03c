// Shard 0's coordination of the job: where the state starts (a resume), each data slot's cursor,
// the progress reports, the cadence of checkpoints and evaluations and the snapshots they take
// across the shards, and the final state of every shard at the end. The shard (ps/exchange/shard.hpp)
// serves the workers and applies their pushes; on shard 0 it tells its coordinator what it
// applied and asks it, between messages, what is due. The coordinator owns its state; it reads
// the shard's through a `Part` handed to each call, and the workers through the membership.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ps/events.hpp"
#include "ps/exchange/membership.hpp"
#include "ps/exchange/snapshot.hpp"
#include "ps/exchange/update_policy.hpp"
#include "ps/wire/partition.hpp"

namespace mt {

class Coordinator {
 public:
  // Shard 0's part of the model state at a moment.
  struct Part {
    std::int64_t step = 0;
    std::span<const float> params;  // its part of the parameters
    std::span<const float> state;   // its part of each optimizer state buffer, one after the other
    const FlatTensors& stats;       // the BatchNorm running statistics (shard 0 holds them whole)
  };

  // `momenta`, `gap`: the optimizer state buffers (ps/exchange/snapshot.hpp). `deadline`: how long another
  // shard may take to answer. References are kept: they outlive the coordinator (the shard's).
  Coordinator(const PsOptions& opts, const Model& model, const Partition& part, int momenta, bool gap, double deadline,
              const UpdatePolicy& policy, Membership& members, PsEvents& events, SnapshotSink& sink);

  // At start (blocking, no worker is served yet): the sink restores `params`, `state` (the
  // momenta, then the gap's mean steps) and `stats` (freshly initialised) from a resume, each
  // other shard gets its part; returns the step to start from. Every member gets its slot's cursor.
  // `logs`: after a takeover, what each shard replays after its start state (SnapshotGather::send_start).
  // `adjust`, if any, runs between the restore and the hand-out (a takeover: the surviving shards' parts).
  std::int64_t start(FlatTensors& params, std::vector<FlatTensors>& state, FlatTensors& stats,
                     std::span<const StartLog> logs = {}, const std::function<void()>& adjust = {});
  // During the replay of a takeover (ps/resilience/push_journal.hpp): a logged push of data slot
  // `slot` made `step`, applied (its cursor) or counted (the history's event only).
  void replayed(int slot, const MsgHeader& push, std::int64_t step, bool applied);
  // And after it, the step this parameter server goes on from.
  void restart_at(std::int64_t step) { start_step_ = step; }
  // The run's clock starts (after the reports' set-up): progress windows and the checkpoint interval.
  void clock_started(Clock::time_point t0);
  const LoaderCursor& cursor(int slot) const { return slot_cursors_.at(static_cast<std::size_t>(slot)); }

  // A push from `m` was applied, making `step`: its data cursor, the progress window, the event.
  void applied(Member& m, const MsgHeader& h, std::int64_t step);
  // A push from `m` (its number `push_id`) counted as `step` without an update (too stale, rejected).
  void counted(Member& m, std::int64_t push_id, std::int64_t step);
  // After each step (applied or dropped as stale): a progress report, a checkpoint, an
  // evaluation, as they fall due (ps/exchange/cadence.hpp). `stopping`: a stop is under way.
  void after_step(const Part& p, double lr, bool stopping);
  // Between messages: a snapshot whose parts all arrived is handed on, a checkpoint interval in
  // seconds is served. Returns why training must stop (the sink failed), or "".
  std::string poll(const Part& p, bool stopping);
  // A snapshot for `purposes` (ps/exchange/snapshot.hpp), now or once the one being gathered completes.
  void request_snapshot(unsigned purposes, const Part& p);
  // A control message to every other shard (kDrain: stop on a notice).
  void tell_shards(MsgKind kind) { gather_.send_control(kind); }

  // The end: every shard's final state into `params` and `state` (shard 0's part already there),
  // then the other shards are told to stop (`clean`: no worker lost). Once only.
  void collect_final(FlatTensors& params, std::vector<FlatTensors>& state, bool clean);
  bool finals_collected() const { return finals_collected_; }
  // The final snapshot's description: cursors, time, learning rate, workers' usage.
  SnapshotMeta meta(std::int64_t step) const;
  std::int64_t last_snapshot_step() const { return last_snapshot_step_; }
  // What a standby's replica carries besides the tensors (SnapshotSink::replica_record).
  std::string replica_record(std::int64_t step) const;

 private:
  std::vector<WorkerUsage> usage() const;
  double lr_now(std::int64_t step) const { return policy_.schedule().lr_at(std::max<std::int64_t>(step - 1, 0)); }
  void report_progress(std::int64_t step, double lr);
  void finish_gather(const Part& p);  // `p`: for a request deferred meanwhile

  const PsOptions& opts_;
  const UpdatePolicy& policy_;
  Membership& members_;
  PsEvents& events_;
  SnapshotSink& sink_;
  SnapshotGather gather_;
  std::vector<LoaderCursor> slot_cursors_;  // each data slot's cursor after its last applied push
  std::int64_t start_step_ = 0, last_snapshot_step_ = -1;
  bool finals_collected_ = false;
  Clock::time_point t0_, window_start_, last_ckpt_;
  double gather_stall_ = 0;  // seconds the update loop spent copying shard 0's part
  // The progress window: since the last report.
  double window_loss_ = 0;
  std::int64_t window_pushes_ = 0, window_correct_ = 0, window_images_ = 0;
};

}  // namespace mt
