// A consistent state of the whole model across parameter-server shards, for checkpoints and
// evaluations, and the control channel between shard 0 and the others (protocol.hpp).
//
// Shard 0 copies its own part at once (the only stall training sees) and asks each shard k for
// its part; each answers with its state at that point of its update stream. The snapshot is
// complete when every part arrived; shard 0 keeps training meanwhile. With one shard it is
// complete at once.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "nn/params.hpp"
#include "nn/resnet.hpp"
#include "ps/events.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

enum SnapshotPurpose : unsigned { kForCheckpoint = 1, kForEval = 2 };

// What a snapshot says besides the tensors, taken when it is requested.
struct SnapshotMeta {
  std::int64_t global_step = 0;
  std::vector<LoaderCursor> slot_cursors;
  double run_seconds = 0, lr = 0;
  std::vector<WorkerUsage> workers;
};

// What a shard replays after its start state (a takeover: ps/resilience/push_journal.hpp): the logged pushes of
// its part (serialized), after its part of the replica of `replica_step` (-1: no replay).
struct StartLog {
  std::string log;
  std::int64_t replica_step = -1;
};

// Shard 0's side.
class SnapshotGather {
 public:
  // `deadline`: how long another shard may take to answer before the parameter server is lost.
  // `momenta`: momentum buffers per shard (1, or one per data slot under dana); `gap`: one more
  // buffer follows them, the gap-aware penalty's mean steps (--lr-scaling gap). Every shard's
  // optimizer state travels as these buffers ("state" below), one after the other.
  // `comm`: the shards at ranks 0..S-1 (after a takeover, the survivors' communicator).
  SnapshotGather(const Model& model, const Partition& part, double deadline, int momenta = 1, bool gap = false,
                 MPI_Comm comm = MPI_COMM_WORLD);

  // At start, blocking (no worker is served yet): each shard k gets its part of `params` and
  // `state` (every buffer, whole), the global step and, after a takeover, `logs[k]`.
  void send_start(const FlatTensors& params, const std::vector<FlatTensors>& state, std::int64_t step,
                  std::span<const StartLog> logs = {});
  // A control message to every other shard (kDrain, kStop); each waits for the previous one to
  // that shard. `blocking`: a blocking send (the last message, before the end).
  void send_control(MsgKind kind, std::int32_t end = 0, bool blocking = false);

  bool gathering() const { return gathering_; }
  unsigned purposes() const { return purposes_; }
  // Copies shard 0's part (`params0`, `velocity0` (its state buffers, packed one after the other), and
  // the BN statistics `stats`, which live on shard 0 only) and asks the others for theirs.
  // Requires !gathering().
  void begin(unsigned purposes, std::span<const float> params0, std::span<const float> velocity0,
             const FlatTensors& stats, SnapshotMeta meta);
  // Every part arrived (tests without blocking).
  bool arrived();
  // The assembled snapshot (valid until the next begin()); gathering() is false after it.
  Snapshot complete();
  // Requests that came while a snapshot was being gathered, served once it completes.
  void defer(unsigned purposes) { pending_ |= purposes; }
  unsigned take_deferred() { return std::exchange(pending_, 0u); }
  double started_seconds_ago() const { return since(started_); }

  // The end: every shard's final state into `params` and `state` (blocking, with the deadline).
  void collect_final(FlatTensors& params, std::vector<FlatTensors>& state);
  // A gather still under way at the end is superseded by the final state: its answers are
  // received (with the deadline) and dropped.
  void settle();

 private:
  void wait(MPI_Request* req, int k) const;
  // A control message to shard k, once the previous one to it has left.
  void post(int k, const MsgHeader& h, bool blocking);
  std::int64_t message_floats(int k) const { return (1 + buffers_) * part_.floats(k); }
  const MPI_Comm comm_;
  // A shard's message (params, then each state buffer) into the full tensors.
  void unpack(int k, std::span<const float> message, FlatTensors& params, std::vector<FlatTensors>& state) const;
  const Partition& part_;
  const double deadline_;
  const int momenta_, buffers_;  // buffers_: the momenta, then the gap's mean steps if any
  FlatTensors params_, stats_, mean_;
  std::vector<FlatTensors> velocities_;
  SnapshotMeta meta_;
  std::vector<Buffer> parts_, requests_;
  std::vector<MPI_Request> part_reqs_, request_reqs_;
  bool gathering_ = false;
  unsigned purposes_ = 0, pending_ = 0;
  std::int64_t id_ = 0;
  Clock::time_point started_{};
};

// The other shards' side.
class SnapshotAnswer {
 public:
  // `buffers`: optimizer state buffers per shard (SnapshotGather: the momenta, then the gap's).
  SnapshotAnswer(int shard, std::int64_t floats, double deadline, int buffers = 1, MPI_Comm comm = MPI_COMM_WORLD);
  // At start, blocking: the global step, and this shard's part of the parameters and state buffers
  // (and after a takeover what it replays, into `log`).
  std::int64_t receive_start(std::span<float> params, std::span<float> velocity, StartLog* log = nullptr);
  // The control channel from shard 0: a receive always posted.
  MPI_Request& control_request() { return control_req_; }
  const MsgHeader& control() { return control_.header(); }
  void rearm();
  // Shard 0 asked for this shard's state (`id` in the request).
  void answer(std::int64_t id, std::int64_t step, std::span<const float> params, std::span<const float> velocity);
  // After the last update: the final state, then answer requests until shard 0 says stop.
  // Returns the stop's `end` field (kCleanEnd when no rank was lost).
  std::int32_t finish(std::int64_t step, std::span<const float> params, std::span<const float> velocity);

 private:
  void send(Buffer& buf, int tag, std::int64_t id, std::int64_t step, std::span<const float> params,
            std::span<const float> velocity, MPI_Request* req);
  void wait(MPI_Request* req) const;
  const MPI_Comm comm_;
  const int shard_;
  const std::int64_t floats_;
  const int buffers_;
  const double deadline_;
  Buffer control_{0}, snapshot_;
  MPI_Request control_req_ = MPI_REQUEST_NULL, snapshot_req_ = MPI_REQUEST_NULL;
};

// A shard that did not answer within the deadline: the parameter server is lost (exit 10).
Error shard_lost(int shard, double deadline);

}  // namespace mt
