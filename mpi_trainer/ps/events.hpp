// What the parameter server and its workers tell the app and hand back (ps/ps.hpp is the face that
// the app includes): the interfaces the app implements (SnapshotSink, PsEvents, StepComputer), the
// snapshots and replicas they carry, a worker's options, and the results of run_ps and run_worker.
// Internal headers include this instead of ps/ps.hpp.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "nn/params.hpp"
#include "nn/resnet.hpp"
#include "ps/inject/fault_injection.hpp"
#include "ps/options.hpp"

namespace mt {

// One worker as the reports see it.
struct WorkerUsage {
  int rank = 0;
  std::string type;
  double active_seconds = 0;  // billed: from its join to its end (or its last sign of life)
  std::int64_t pushes = 0, dropped_stale = 0;
  double mean_staleness = 0;
};

// Optimizer state beyond the one momentum, each part present only under its policy:
// --momentum-correction dana keeps each data slot's momentum (the snapshot's `momentum` is then
// their mean), --lr-scaling gap each parameter's running mean step (GapPenalty).
struct ExtraOptimizerState {
  std::span<const FlatTensors> slot_momenta;
  const FlatTensors* gap_mean_step = nullptr;
};

// A consistent state of the whole model (every shard's part at one point of its update stream),
// for a checkpoint or an evaluation. Valid during the call it is handed to.
struct Snapshot {
  const FlatTensors& params;
  const FlatTensors& momentum;
  const FlatTensors& bn_stats;
  std::int64_t global_step = 0;
  std::vector<LoaderCursor> slot_cursors;  // each data slot's cursor after its last applied push
  double run_seconds = 0;                  // of this attempt
  double lr = 0;                           // at the last step
  std::vector<WorkerUsage> workers;        // for the cost so far
  ExtraOptimizerState extra;
};

// Where training starts, filled by SnapshotSink::restore.
struct PsStart {
  std::int64_t global_step = 0;
  std::vector<LoaderCursor> slot_cursors;  // one per data slot
};

// Shard 0 hands state to the app; the app owns checkpoint files and evaluations.
class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  // The state to start from: the tensors arrive freshly initialised (seeded); a resume
  // overwrites them. `slots`: data slots to give cursors for. `momenta`: one momentum buffer, or
  // one per data slot (--momentum-correction dana). `gap_mean_step` (--lr-scaling gap, else null):
  // zero unless the checkpoint resumed holds it.
  virtual PsStart restore(FlatTensors& params, std::span<FlatTensors> momenta, FlatTensors* gap_mean_step,
                          FlatTensors& bn_stats, int slots) = 0;
  virtual bool checkpoints() const = 0;  // whether checkpoints are written at all
  virtual bool evaluates() const = 0;    // whether evaluations run during training
  virtual bool eval_busy() = 0;          // an evaluation is still running
  // Copy what is needed before returning: the snapshot's memory is reused.
  virtual void checkpoint(const Snapshot& s) = 0;
  virtual void evaluate(const Snapshot& s) = 0;
  // Called often from the update loop: report what finished in the background. Non-empty: why
  // training must stop now (the shard stops as on a notice).
  virtual std::string poll() = 0;
  // What a replica on a standby carries besides the tensors (ps/resilience/replica.hpp), for the app to
  // write the replica as its own checkpoint: data cursors, time and cost so far, configuration.
  virtual std::string replica_record(std::int64_t /*global_step*/, const std::vector<LoaderCursor>& /*slot_cursors*/,
                                     double /*run_seconds*/, double /*lr*/,
                                     const std::vector<WorkerUsage>& /*workers*/) {
    return {};
  }
};

// Why a shard's standbys changed (ps/resilience/standbys.hpp).
enum class StandbyChange {
  kNone,         // the same workers
  kFirst,        // the first standbys of this shard
  kGone,         // one of the previous standbys is no longer working
  kLowerJoined,  // all still work, but a lower-ranked worker joined and took the place
};

// What the runtime reports. Shard 0 calls everything; the other shards only `stopping` and `log`.
class PsEvents {
 public:
  virtual ~PsEvents() = default;
  virtual void log(const std::string& line) = 0;  // a line for the job log, printed as it is

  struct Started {
    std::int64_t global_step = 0;  // resumed from, or 0
    int shards = 0, workers = 0;
    double momentum_applied = 0;  // the momentum with every launched worker active
  };
  virtual void started(const Started& e) = 0;
  virtual void first_step(std::int64_t global_step, double seconds_since_start) = 0;

  struct Progress {
    std::int64_t global_step = 0;
    double loss = 0, train_accuracy = 0, lr = 0, momentum = 0, images_per_second = 0;
    int active_workers = 0;
    double mean_staleness = 0;
    std::int64_t dropped_stale_pushes = 0;
    double elapsed_seconds = 0, eta_seconds = -1;  // negative: unknown
    struct Worker {
      int rank = 0;
      std::string type;
      std::int64_t pushes = 0;
      double images_per_second = 0, mean_staleness = 0;
      double step_seconds = 0;  // mean of the window's pushes (the worker's own step time)
      bool active = false;
    };
    std::vector<Worker> workers;  // this window
  };
  virtual void progress(const Progress& e) = 0;

  struct Departure {
    std::int64_t global_step = 0;
    int rank = 0;
    std::string type;
    bool lost = false;  // lost (silent, failed) or left on a notice
    // How the loss was noticed: "mpi" (the MPI library reported the process failed: ULFM),
    // "heartbeat" (silent past --failure-timeout), "notice" (it left on a notice).
    std::string detected_by;
    std::string detail;
    int signo = 0;  // the notice's signal, when it said
    double silent_seconds = 0, elapsed_seconds = 0;
    std::int64_t work_lost_steps = 0;
    double work_lost_seconds = 0, active_seconds = 0;
    int active_workers = 0;
    double lr_divisor = 1, momentum = 0;
  };
  virtual void departure(const Departure& e) = 0;

  struct Join {
    std::int64_t global_step = 0;
    int rank = 0, slot = 0;
    std::string type;
    int active_workers = 0;
    double lr_divisor = 1, momentum = 0;
    bool rejoined = false;  // a worker dropped while alive, taken back (not a new process)
  };
  virtual void join(const Join& e) = 0;
  // Shard 0: a push that made global step `step` (--push-log: the run's history, which
  // bench/faults/history_check.py checks): applied, or counted as a step without an update (too
  // stale, rejected), or one of a lost shard's pushes replayed by its successor (a takeover:
  // `seconds` is 0 then). From worker `rank` (-1: not known, a replayed push) of data slot `slot`,
  // its push number `push_id`, computed on version `pulled`, `seconds` after the start.
  struct Pushed {
    enum class Kind { kApplied, kCounted, kReplayed, kReplayedCounted };
    Kind kind = Kind::kApplied;
    std::int64_t step = 0;
    int rank = -1, slot = 0;
    std::int64_t push_id = 0, pulled = 0;
    double seconds = 0;
  };
  virtual void pushed(const Pushed& /*e*/) {}
  // Shard 0: the epoch this parameter server claimed (ckpt/checkpoint.hpp; 0: none, or not yet),
  // which its replies to pushes carry.
  virtual std::int64_t epoch() const { return 0; }

  // Elastic joins (PsOptions::max_workers): shard 0 takes up to `max_workers` workers through
  // the port it published in `port_file`. `ulfm`: this build's MPI (Open MPI 5) has no
  // ompi-server, so no joiner from another mpirun can reach it.
  virtual void joins_open(int /*max_workers*/, const std::string& /*port_file*/, bool /*ulfm*/) {}
  // A worker asked to join and was answered with stop: it trains another model or batch size
  // (`rank`, its parameter count and batch), every slot is taken, the job is stopping, or the
  // parameter server failed. kUnauthenticated: a process connected but did not prove the job's
  // join secret (`detail` says how; ps/elastic/join_auth.hpp), and was never let in.
  struct JoinRefused {
    enum class Why { kMismatch, kFull, kStopping, kFailed, kUnauthenticated };
    Why why = Why::kFull;
    int rank = -1;
    JobShape shape;  // kMismatch: the worker's
    std::string detail;
  };
  virtual void join_refused(const JoinRefused& /*e*/) {}
  // No worker is left at `global_step`; with elastic joins the job waits for workers to join.
  virtual void waiting_for_joins(std::int64_t /*global_step*/) {}
  // Shard 0's replicas (PsOptions::ps_standby) go to new standbys, from `global_step`.
  struct StandbysChosen {
    std::vector<int> ranks;
    std::int64_t global_step = 0, interval = 0;
    StandbyChange change = StandbyChange::kFirst;
  };
  virtual void standbys_chosen(const StandbysChosen& /*e*/) {}
  // A notice (`signo`) reached shard 0 but it could not hand over (PsOptions::hand_over): it
  // checkpoints and stops the job as on any notice. kRefused: the standby `standby` has a notice
  // too (`their_signo`).
  struct NoHandover {
    enum class Why { kNoStandby, kLate, kRefused, kStandbyGone };
    Why why = Why::kNoStandby;
    int signo = 0, standby = -1, their_signo = 0;
  };
  virtual void no_handover(const NoHandover& /*e*/) {}

  // Shard 0 hands the parameter server over to the standby worker `standby` on a notice
  // (PsOptions::hand_over): the standby holds the state of `global_step`; this process leaves.
  virtual void handed_over(std::int64_t /*global_step*/, int /*standby*/, int /*signo*/) {}

  // Shard `old_shard` (launched rank `rank`) survived the loss of another one and goes on as shard
  // `shard` of the parameter server that worker `lead_rank` took over at `global_step` (ULFM,
  // PsOptions::takeover), from the replica of `replica_step`. From here on this process is not
  // shard 0 (if it was).
  struct Followed {
    int old_shard = 0, rank = 0, shard = 0, lead_rank = 0;
    std::vector<int> lost_shards;
    std::int64_t global_step = 0, replica_step = 0;
  };
  virtual void followed(const Followed& /*e*/) {}

  // A shard of a new parameter server (a takeover) replayed the survivors' logged pushes after its
  // start state of `replica_step` (its part of the replica, or of the shard that held it and
  // survived; ps/resilience/push_journal.hpp): `replayed` of them, `unacknowledged`
  // among them (their reply never came: after the others), `not_applied` only counted as steps (as
  // the lost shard did); `lost`: steps of the lost shard no log holds (pushes of workers lost with
  // it); it goes on at `global_step`.
  struct Replayed {
    int shard = 0;
    std::int64_t replica_step = 0, global_step = 0, lost = 0;
    int replayed = 0, unacknowledged = 0, not_applied = 0;
    double seconds = 0;
  };
  virtual void replayed(const Replayed& /*e*/) {}

  // Every shard: training stops early (a notice, or no worker left).
  // Whether another parameter server has taken this one's place (a newer epoch in the checkpoint
  // directory, ckpt/checkpoint.hpp): asked by shard 0 after it was paused past --failure-timeout
  // (stopped, a debugger, a stuck disk), when the survivors may have taken it for lost (ULFM). It
  // then ends at once, writing nothing (PsSuperseded, exit 11).
  virtual bool superseded() { return false; }
  virtual void stopping(int shard, const std::string& why, std::int64_t global_step, int active_workers) = 0;
  virtual void eval_skipped(std::int64_t global_step) = 0;
  virtual void snapshot_taken(std::int64_t global_step, double stall_seconds, double gather_seconds, bool final) = 0;

  // The end, on shard 0, with the final state of every shard.
  struct Finished {
    const Snapshot& state;
    std::int64_t start_step = 0;           // this attempt started here
    std::int64_t last_snapshot_step = -1;  // of the last checkpoint snapshot handed to the sink
    double images_per_second = 0;
    int shards = 0, workers_start = 0, joined = 0, lost = 0, left = 0, shm_workers = 0;
    double max_staleness = 0;
    std::int64_t dropped_stale_pushes = 0;
    bool stopped_early = false;
    std::string stop_reason;
    int exit_code = 0;
    int rejoined = 0, retired = 0;  // dropped workers taken back; replacements that gave their slot back
    std::int64_t lr_cuts = 0;          // the spike guard's (shard 0's)
    std::int64_t rejected_pushes = 0;  // by shard 0's push check
    // Shard 0's replicas to its standbys (--ps-standby): how many, the mean updates between two,
    // the mean seconds each took the shard (the copy and the send's start).
    int standbys = 0;
    std::int64_t replicas = 0;
    double replica_interval = 0, replica_seconds = 0;
  };
  // Returns the test accuracy and loss of the final evaluation, when the app ran one.
  struct Evaluated {
    double accuracy = 0, loss = 0;
  };
  virtual std::optional<Evaluated> finished(const Finished& e) = 0;

  // Shard 0, instead of `finished`: the parameter server failed at `global_step` (an error it
  // cannot recover from: bad data, a checkpoint it cannot read, an MPI or library failure). The
  // workers have been told to stop; `run_ps` rethrows the error after this.
  virtual void failed(std::int64_t global_step, int exit_code, const std::string& what) = 0;
};

struct PsResult {
  std::int64_t global_step = 0;
  double run_seconds = 0;  // this attempt
  double images_per_second = 0;
  std::optional<PsEvents::Evaluated> evaluated;
  int exit_code = 0;         // 0, or 75 after a notice (checkpointed: rerun)
  bool clean_end = false;    // training ended and no rank is known lost (a long MPI_Finalize is safe)
  bool peer_lost = false;    // a worker of this shard was lost: MPI_Finalize could wait for it (leave without)
  bool handed_over = false;  // handed over to the standby on a notice: leave without MPI_Finalize
  int takeovers = 0;         // this shard survived the loss of another and followed its takeover (leave so too)
};

// What a worker computes, supplied by the app: a network, its data and its device.
class StepComputer {
 public:
  virtual ~StepComputer() = default;
  // Shard 0 told this worker which data slot of how many it trains, and where it continues.
  virtual void start(int slot, int slots, LoaderCursor from) = 0;
  struct Step {
    float loss = 0;
    std::int32_t correct = 0;
    LoaderCursor cursor;  // after the batch this step trained
    double seconds = 0;   // the step's time, an emulated device's padding included
  };
  // One step on `params`: fills `grads` and `batch_stats`.
  virtual Step step(const FlatTensors& params, FlatTensors& grads, FlatTensors& batch_stats) = 0;
};

// A standby's newest replica of the whole parameter server, assembled from every shard's
// (ps/resilience/replica.hpp): each shard's part is that shard's state at one point of its update stream.
struct ReplicaState {
  std::int64_t global_step = 0;  // shard 0's
  std::vector<std::int64_t> shard_steps;
  FlatTensors params, bn_stats;
  std::vector<FlatTensors> state;  // the optimizer's state buffers: the momenta, then the gap's if any
  std::string record;              // SnapshotSink::replica_record of shard 0
  // Per shard, per data slot: the last push number (MsgHeader::push_id) the shard had handled
  // (applied, or counted as a step) by its replica (ps/resilience/push_journal.hpp).
  std::vector<std::vector<std::int64_t>> handled;
};

struct WorkerOptions {
  int num_ps = 1;
  int batch_size = 128;
  double failure_timeout = 1.5;
  double drain_deadline = 10;
  bool quiet = false;
  bool synthetic_gradients = false;  // no computer: a fixed gradient, packed once
  std::uint64_t seed = 1;
  PushPrecision push_precision = PushPrecision::kFp32;  // the job's (a shard refuses another's join)
  std::map<std::int64_t, PushFault> push_faults;        // --corrupt-push: this worker's, by push number
  // Called once when the parameter server is lost and this worker holds a whole replica of it
  // (a standby), before the worker exits 10: the app writes it as a checkpoint.
  std::function<void(const ReplicaState&)> on_ps_lost;
  // Under ULFM, a worker of the launched job: when the MPI library reports a parameter-server
  // shard failed, the survivors take it over inside the job instead of exiting 10
  // (docs/fault-model.md, "Takeover under ULFM"; ps/resilience/recovery.hpp): they revoke and shrink the
  // communicator, the one holding the newest replica becomes shard 0 of the new parameter server
  // (run_worker returns it a `Takeover`), the surviving shards follow it, the others join it and
  // train on with their data slots and cursors.
  bool takeover = false;
  // With `takeover`: each worker logs its pushes since the newest replica, so that a takeover
  // replays them and loses no update (--push-journal; ps/resilience/push_journal.hpp).
  bool push_journal = true;
  // Called for each push of this worker that shard 0 acknowledged, from the training thread: the
  // worker's side of the run's history (--push-log; bench/faults/history_check.py).
  struct Ack {
    int slot = 0;
    std::int64_t push_id = 0;
    std::int64_t step = 0;   // the global step the push made
    bool applied = false;    // false: counted as a step, not applied (too stale, rejected)
    std::int64_t epoch = 0;  // the epoch of the parameter server that answered
  };
  std::function<void(const Ack&)> on_acknowledged;
};

// What run_worker hands the worker that becomes the parameter server.
struct Takeover {
  MPI_Comm comm = MPI_COMM_NULL;  // the survivors: this process at rank 0, the surviving shards, the workers
  ReplicaState replica;           // its newest replica, to start from
  std::shared_ptr<const PsOptions::Replay> replay;  // the survivors' push journals, to replay after it
  std::int64_t first_step = 0;  // the highest global step any survivor saw: the new PS counts on from it
  std::vector<int> worker_ranks, worker_slots;  // each worker of `comm` (ranks num_ps..): its name and data slot
  std::vector<int> lost_shards;                 // the old indexes of the shards lost (one)
  int data_slots = 0;                           // of the launched job
  double lost_at = 0;                           // unix time this process learned of the loss
  int takeovers = 0;                            // within this run, this one included
  FaultPlan plan;                               // this process's own revocations go on
  std::vector<int> hung;  // world ranks of hung processes reported failed: ended once this PS is done
};

struct WorkerResult {
  std::int64_t pushes = 0;
  std::size_t push_journal_peak_bytes = 0;   // the most its push journal held (ps/resilience/push_journal.hpp),
  std::size_t push_journal_peak_pushes = 0;  // and the most pushes,
  std::int64_t push_journal_dropped = 0;     // and those dropped past its bound (PushJournal)
  bool clean_end = false;                    // stopped by shards that knew of no lost rank
  bool peer_lost = false;                    // the stop said a rank of the job was lost: MPI_Finalize could wait for it
  int exit_code = 0;                         // non-zero: the parameter server failed with this code (kFailedEnd)
  std::string refused;                       // why the parameter server refused its join (another model or batch size)
  std::optional<Takeover> takeover;          // this worker took over as the parameter server: run it on takeover->comm
  int takeovers = 0;                         // the parameter server was taken over while this worker trained
  // The parameter server was lost and not taken over (exit_code kExitPsLost): requests to the dead
  // are abandoned, so the process must end without MPI_Finalize, which could wait for it.
  bool ps_lost = false;
  // It was lost by its silence (--failure-timeout), not reported dead by the MPI library: it may be
  // hung (stopped, a stuck disk) and alive, and the launcher would wait for it (ps_silent); and this
  // worker is a standby (it held replicas; it has tried to write one as the newest checkpoint).
  bool ps_silent = false;
  bool standby = false;
  // World ranks of hung parameter-server processes this worker reported failed (ULFM; Worker::
  // end_hung_shard) when no takeover followed: the runtime ends them when this process ends
  // (ulfm_end_process), so that the launcher does not wait for them. After a takeover the new
  // parameter server does (Takeover::hung).
  std::vector<int> hung;
};

// A checkpoint's optimizer state from a shard's state buffers (a snapshot's, or a replica's).

// The mean of `momenta` into `out` (a checkpoint's /optimizer/momentum under dana).
void mean_momentum(std::span<const FlatTensors> momenta, FlatTensors& out);
// The snapshot's view of `state` (the momenta, then the gap's mean steps if `gap`): `momentum` is
// the one momentum or, under dana, `mean` filled with the slots' mean.
struct StateView {
  const FlatTensors& momentum;
  ExtraOptimizerState extra;
};
StateView view_state(const std::vector<FlatTensors>& state, int momenta, bool gap, FlatTensors& mean);

}  // namespace mt
