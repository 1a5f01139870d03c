// One parameter-server shard: its part of the parameters and momentum, the workers it serves,
// and the update loop. Shard 0 also owns the BatchNorm running statistics, every worker's data
// cursor, the cadence of checkpoints and evaluations, and the reports.
//
// The path of one push: a worker's gradient arrives in its receive buffer (or its shared-memory
// segment); handle_worker checks the header; apply_push computes the update (UpdatePolicy) from
// the newest parameters straight into that worker's reply buffer, which becomes the newest
// parameters; reply sends it back; after_step reports and requests snapshots.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ps/elastic/joins.hpp"
#include "ps/elastic/replacements.hpp"
#include "ps/events.hpp"
#include "ps/exchange/coordinator.hpp"
#include "ps/exchange/membership.hpp"
#include "ps/exchange/push_check.hpp"
#include "ps/exchange/snapshot.hpp"
#include "ps/exchange/update_policy.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/standbys.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

// Thrown out of Shard::run when another shard is lost and the survivors take it over
// (PsOptions::takeover): run_ps takes part in the takeover and goes on as a shard of the new
// parameter server.
struct ShardTakeover {};

// The detail of a worker dropped because the MPI library (ULFM) reported it failed: its departure
// event says "detected_by":"mpi".
inline constexpr const char* kUlfmReported = "the MPI library (ULFM) reported the process failed";
// Why the job stops when no worker is left and none is coming (the summary's stop reason).
inline constexpr const char* kNoWorkerLeft = "every worker was revoked";

class Shard {
 public:
  Shard(const PsOptions& opts, const Model& model, const LrSchedule& schedule, Backend& update, FaultPlan plan,
        PsEvents& events, SnapshotSink& sink);
  // Throws ShardTakeover (resilience/shard_takeover.cpp: check_revoked) when another shard is lost and the survivors take it over.
  PsResult run();

  // What run_ps needs of a shard that survived another's loss, to follow the takeover.
  std::int64_t step() const { return step_; }
  int index() const { return shard_; }
  int self() const { return self_; }
  int slots() const { return members_.slots(); }
  FaultPlan release_plan() { return std::move(plan_); }
  // This shard's own part (it survived another's loss): the new parameter server starts it from
  // this (ps/resilience/push_journal.hpp). (resilience/shard_takeover.cpp)
  PartState part_state() const;

 private:
  // PsOptions::takeover applies: ULFM, several shards.
  bool may_follow_takeover() const;
  // Throws ShardTakeover when the communicator was revoked (another shard lost) and takeovers apply.
  void check_revoked() const;
  bool another_shard_lost() const;
  bool lead() const { return shard_ == 0; }
  std::span<const float> current() const { return {current_, static_cast<std::size_t>(mine_)}; }
  // This shard's part of state buffer j (0: the only momentum, or data slot j's under dana; j =
  // momenta_: the gap's mean steps).
  // State buffers per parameter: the momenta, then the gap's mean steps under --lr-scaling gap.
  int state_buffers() const { return momenta_ + (gap_aware_ ? 1 : 0); }
  std::span<float> velocity(std::size_t j) {
    return std::span<float>(velocity_).subspan(j * params_.size(), params_.size());
  }
  void start_state();
  // The serve loop (shard_serve.cpp): each pass tests every request once (test_requests), drops
  // the workers ULFM reported failed (drop_failed), handles what completed (handle_completed), then
  // on a slow poll (every 10 ms) takes a notice, runs the failure detector and timed revocations.
  struct ServeLoop;
  void serve();
  void test_requests(ServeLoop& loop);
  void drop_failed(ServeLoop& loop);
  int handle_completed(ServeLoop& loop);
  void handle_worker(Member& m);
  bool apply_push(Member& m, const MsgHeader& h);
  // How a push is applied (the rate and momentum as SgdSpec takes them): its reply says so.
  struct Applied {
    float lr = 0, momentum = 0;
  };
  // The update itself: `grad` (penalized already) applied to current() with data slot `slot`'s
  // momentum, written into `out` (which holds the parameters the gradient was computed on, and may
  // be current()); the gap's mean steps follow; shard 0 takes the push's BatchNorm statistics.
  // current() is `out` afterwards. (shard_push.cpp)
  void update(std::span<const float> grad, std::span<float> out, int slot, Applied a, const float* batch_stats);
  // After the start state of `replica_step`: the survivors' logged pushes it does not hold, as
  // split_replay chose and ordered them, replayed (a takeover: ps/resilience/push_journal.hpp). (resilience/shard_takeover.cpp)
  void replay(const std::string& log, std::int64_t replica_step);
  // Shard 0 of a takeover: each shard's part of the survivors' journals, those its start state (a
  // surviving shard's own part, else the replica's) holds left out; and that start state over the
  // replica's where a shard survived (the restored full_, state_full_, stats_).
  std::vector<StartLog> split_replay(const std::vector<PartState>& survived) const;
  void start_from_survivors(const std::vector<PartState>& survived);
  // MT_FAULT_DUMP_DIR (tests): this shard's state as raw floats, `<dir>/<tag>-part<k>.bin`, and its
  // step in `.step` beside it. (resilience/shard_takeover.cpp)
  void dump_state(const std::string& tag) const;
  // The fault hook before this shard kills itself: the replies in flight are completed (every applied
  // push acknowledged), then the state is dumped ("killed").
  void before_kill();
  // Shard 0, before each poll's MPI call and before it drops silent workers: paused past
  // --failure-timeout since the last call (stopped, a debugger, a stuck disk), it may have been taken
  // for lost and replaced (ULFM); when a newer parameter server has claimed the next epoch
  // (PsEvents::superseded) it throws PsSuperseded: this process ends at once, writing nothing.
  // (resilience/shard_takeover.cpp)
  void check_superseded();
  Clock::time_point checked_ = Clock::now();  // check_superseded's last call
  // A push the check refused (ps/exchange/push_check.hpp), or one its worker marked not to apply (fault
  // injection's reference): not applied, counted as a step; after --max-rejected-pushes in a row
  // its worker is stopped and dropped as lost. False: no reply owed any more.
  bool reject_push(Member& m, const std::string& why);
  // A push not applied (too stale, or rejected) still counts as a step, so that every shard counts
  // the same pushes: the worker gets the current parameters. False: no reply owed any more.
  bool count_unapplied(Member& m);
  void accept_segment(Member& m, const MsgHeader& h);
  // A worker's message buffers, sized for the push precision (ps/wire/precision.hpp).
  void give_buffers(Member& m) const;
  // The fp32 parameters last sent to `m` (what its next gradient is computed on): its reply's
  // payload in fp32, the copy kept beside it in bf16 (Member::sent).
  float* sent_params(Member& m) const { return bf16_ ? m.sent.data() : m.send.payload(); }
  // The worker's previous reply is complete, within --failure-timeout; false: the worker is
  // dropped as lost (its buffers abandoned).
  bool settle_send(Member& m);
  bool reply(Member& m, MsgKind kind, std::int32_t end = 0);  // end: a kStop's, when not the usual
  // A stop after this shard failed carries the failure (end = kFailedEnd, the exit code).
  void stamp_failure(MsgHeader& stop) const;
  // `back`: a worker that speaks again as it is dropped (its join to rejoin came first): neither
  // replaced nor, were it the last, the end of the job (take_back follows at once).
  void drop(Member& m, bool lost, const std::string& detail, int signo = 0, bool back = false);
  void detect_failures();
  void check_notice();
  void begin_stop(const std::string& why);
  void wait_for_successor();  // every worker silent at once: a takeover of this one may be under way
  void take_joins();
  // The connections of joiners and of spawned replacements taken in as late members (or answered
  // with a stop when the job is full or stopping). (elastic/shard_joins.cpp)
  void admit_connections(const std::vector<MPI_Comm>& comms, bool replacements);
  void admit_late(const Member& m);
  // A member no longer live spoke: a worker dropped while alive (its join taken back: take_back,
  // in the slot slot_on_return gives) or a retired replacement (stopped). (elastic/shard_joins.cpp)
  void heard_from_dropped(Member& m);
  std::optional<int> slot_on_return(const Member& gone);
  void take_back(Member& gone, const MsgHeader& join);
  // --replace-workers: a replacement for `gone` requested from the spawner (shard 0).
  void replace(const Member& gone);
  // --replace-workers at the start: a replacement for each data slot no member holds (a takeover's).
  void refill();
  // No worker is left, but some may come: joins (--max-workers) or replacements under way.
  bool awaiting_workers() const;
  // After a step (applied, or dropped as stale): shard 0's coordinator, the standbys' replica.
  void after_step(double lr);
  Coordinator::Part part() const { return Coordinator::Part{step_, current(), velocity_, stats_}; }
  // What a replica or a handover carries of this shard (ps/resilience/standbys.hpp).
  Standbys::Content replica_content() const;
  void poll_background();
  PsResult finish();
  bool handed_over_ = false;
  void settle_members();  // the last sends completed (or abandoned), heartbeat receives cancelled
  void confirm_end();     // to each member told a clean stop: kEnd, whether a rank was lost after all
  [[noreturn]] void end_after_failure(const std::exception_ptr& error);

  const PsOptions& opts_;
  const Model& model_;
  UpdatePolicy policy_;
  Backend& update_;
  FaultPlan plan_;
  PsEvents& events_;
  SnapshotSink& sink_;
  const int shards_, shard_, workers_;
  const int self_;  // this process's rank in the launched job (PsOptions::self_rank)
  const Partition part_;
  const std::int64_t mine_, stats_floats_;
  // --push-precision: float slots of a push (gradient, then fp32 statistics) and of a reply.
  const bool bf16_;
  const std::int64_t push_slots_, reply_slots_;
  // Momentum buffers: one, or one per data slot under --momentum-correction dana (each worker's
  // pushes go through its slot's); under --lr-scaling gap one more state buffer follows them, the
  // penalty's running mean steps (so snapshots and checkpoints carry it like a momentum).
  // `state_full_` holds them all whole at the start and the end.
  const int momenta_;
  const bool gap_aware_;
  FlatTensors full_, stats_, batch_stats_, mean_momentum_;
  std::vector<FlatTensors> state_full_;
  // This shard's part, packed. The newest parameters live in `current_`: at first in params_,
  // then in the reply buffer of the worker whose push was applied last (each update reads the
  // newest parameters and writes the updated ones straight into the next reply, so a reply costs
  // no copy; under bf16, into that worker's fp32 copy, which the reply encodes: sent_params). A
  // buffer with a send in flight is only read, never written.
  std::vector<float> params_, velocity_;  // velocity_: this shard's part of each state buffer, one after the other
  // --lr-scaling gap: the penalty (over velocity(momenta_)), and the parameters before an update
  // where it is made in place (the same worker twice in a row).
  std::optional<GapPenalty> gap_;
  std::vector<float> gap_before_;
  std::vector<float> grad_;  // --push-precision bf16: a push's gradient, decoded
  PushCheck check_;
  float* current_ = nullptr;
  const std::vector<Partition::Run> runs_;
  const std::vector<std::int64_t> counts_;

  Membership members_;
  std::optional<JoinListener> joins_;     // shard 0 with --max-workers
  std::optional<WorkerSpawner> spawner_;  // shard 0 with --replace-workers
  int connected_ = 0;                     // connections the listener handed over (their ranks)
  int joined_ = 0;                        // of them, workers whose join was answered
  int rejoined_ = 0, retired_ = 0;        // dropped workers taken back; replacements retired for them
  int shm_workers_ = 0;                   // workers whose pushes travel through shared memory
  std::optional<Coordinator> coord_;      // shard 0
  std::optional<SnapshotAnswer> answer_;  // shards > 0: shard 0's requests answered
  std::optional<Standbys> standbys_;      // --ps-standby > 0

  // Stopping early: a notice or no worker left; no more pushes are applied.
  std::optional<Clock::time_point> stop_at_;
  std::string stop_reason_;
  int notice_ = 0;
  int exit_code_ = 0;
  int failure_code_ = 0;  // non-zero: the shard failed; joins and pushes are answered with it

  std::int64_t start_step_ = 0, step_ = 0;
  std::int64_t epoch_ = 0;  // shard 0's epoch once started (PsEvents::epoch), in its replies to pushes
  // Per data slot: the last push number handled (applied, or counted as a step); replicas carry it.
  std::vector<std::int64_t> handled_;
  mutable std::vector<float> handled_floats_;  // its copy in a replica
  std::optional<Applied> reply_;               // the push being answered was applied so
  Clock::time_point t0_;
  std::int64_t total_images_ = 0;
  double max_staleness_ = 0;
};

}  // namespace mt
