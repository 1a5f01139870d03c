// The one message format between workers and parameter-server shards. Every message is a
// fixed header followed by float32 payload in one contiguous buffer, so each exchange is a
// single MPI message. Each header field has one meaning (named below); a message leaves the
// fields it does not use at their defaults.
//
//   worker -> shard  kJoin   param_count, batch, precision: checked by the shard against its own; with
//                            shm = kShmOffer the payload is the name of a shared-memory segment
//                            for this pair (ps/wire/shm.hpp)
//   shard -> worker  kParams the shard's parameters (model_version, step); the reply to a push
//                            also how it was applied (applied, lr, momentum) and replica_step;
//                            the reply to a kJoin
//                            also carries the data cursor, slot and slots, and shm =
//                            kShmAccepted when the shard mapped the offered segment: from then on
//                            this pair's pushes and replies carry their payload there and the
//                            messages are headers alone (`payload` still counts it)
//   worker -> shard  kPush   gradients [+ BN batch stats] computed on model_version; data
//                            cursor after the batch, loss, correct, batch, push_id: one global step;
//                            a standby's also replica_step, the newest whole replica it holds
//                            (under --push-precision bf16, parameters and gradients travel as
//                            pairs of bf16 values per float slot, the statistics as floats:
//                            ps/wire/precision.hpp; `payload` counts slots)
//   shard -> worker  kStop   (no payload) training is over; end = kCleanEnd when no rank is
//                            known lost, kFailedEnd when the parameter server failed (an error
//                            it cannot recover from): exit_code is the job's exit code;
//                            kRetiredEnd to a replacement whose slot its worker took back
//   worker -> shard  kJoin   also from a worker the shard dropped while it was alive (suspended
//                            past --failure-timeout): it rejoins (never with a segment offer: a
//                            rejoined pair's messages go through MPI)
//   shard -> worker  kEnd    on kTagEnd (no payload), to every worker told a kCleanEnd stop, once
//                            the shard has no live member left: end = kCleanEnd when no rank was
//                            lost after all, else 0 (a worker died just before the end and was
//                            found silent after the stop): then it leaves without MPI_Finalize
//   worker -> shard  kStop   (no payload) leaving: another shard said stop
//   worker -> shard  kLeave  (no payload) leaving on a preemption notice; signal = its signal
//   worker -> shard  kHeartbeat on kTagHeartbeat (no payload): alive (a thread, every
//                            --failure-timeout / 5 seconds)
//   shard -> worker  kReplica on kTagReplica, to a standby (--ps-standby, ps/resilience/replica.hpp): the
//                            shard's parameters, then its optimizer state buffers (`slots` of them),
//                            then on shard 0 the BN statistics and the app's progress record
//                            (`request_id` bytes); step = model_version = the shard's global step;
//                            end = kHandover: the last, the shard hands over (a notice, ULFM).
//                            In slices (protocol 14), a few after each update (replica_slices):
//                            param_count = the replica's floats, cursor_position = where this
//                            slice's go, payload = the slice's; a handover's all at once
//   standby -> shard kReplica on kTagReplica (no payload; step): a kHandover replica is held whole
//
// Between workers (a silent shard's witnesses, ps/resilience/witness.hpp):
//   worker -> worker kWitnessAsk on kTagWitnessAsk (no payload): request_id, model_version = the shard
//   worker -> worker kWitnessAnswer on kTagWitnessAnswer: request_id, step; payload: per shard the
//                    seconds since the answerer last heard from it
//   worker -> worker kWitnessHello on kTagWitnessAsk (no payload; no answer): to each higher-ranked
//                    worker when the desk opens, so that every pair's connection exists before a
//                    link goes down (an ask that opens one then kills its sender in Open MPI 4.1)
//
// Between shards (shard 0 coordinates checkpoints, evaluation and the end):
//   shard 0 -> shard k  kSnapshotRequest (no payload; request_id)
//   shard k -> shard 0  kSnapshot (parameters then momentum of shard k; step; request_id)
//   shard k -> shard 0  kSnapshot on kTagFinal after its last update
//   shard 0 -> shard k  kStop    after every final arrived: no more requests (end = kCleanEnd)
//   shard 0 -> shard k  kParams  at start: step, then parameters and momentum (a resume)
//   shard 0 -> shard k  kDrain   a preemption notice: apply no more pushes, stop the workers
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace mt {

inline constexpr std::uint32_t kMsgMagic = 0x5350544D;  // "MTPS"
inline constexpr std::uint16_t kProtocolVersion = 15;
inline constexpr int kTagToPs = 11;
inline constexpr int kTagToWorker = 12;
inline constexpr int kTagFinal = 13;      // shard k -> shard 0: final state
inline constexpr int kTagControl = 14;    // shard 0 -> shard k: requests, stop, start state
inline constexpr int kTagSnapshot = 15;   // shard k -> shard 0: requested state
inline constexpr int kTagHeartbeat = 16;  // worker -> shard: alive
inline constexpr int kTagReplica = 17;    // shard -> standby worker: the shard's state
inline constexpr int kTagEnd = 18;        // shard -> worker told a clean stop: whether it still holds
inline constexpr int kTagWitnessAsk = 19;     // worker -> worker: when did you last hear from this shard?
inline constexpr int kTagWitnessAnswer = 20;  // worker -> worker: the answer

inline constexpr std::int32_t kShmOffer = 0x4f4d4853;     // "SHMO"
inline constexpr std::int32_t kShmAccepted = 0x414d4853;  // "SHMA"
// In `end` of a kStop that ends training while no rank is known lost: the receiver may wait
// long in MPI_Finalize, where Open MPI makes it wait for shard 0's final checkpoint and evaluation.
inline constexpr std::int32_t kCleanEnd = 0x444e4543;  // "CEND"
// In `end` of a kStop from a parameter server that failed: the job ends with `exit_code`.
inline constexpr std::int32_t kFailedEnd = 0x4c494146;  // "FAIL"
// In `end` of a kReplica: the parameter server hands over to the standby and leaves (a notice).
inline constexpr std::int32_t kHandover = 0x444e4148;  // "HAND"
// In `end` of a kPush: do not apply it (--corrupt-push discard, the reference a rejected push is
// compared with): the shard handles it as a push its check rejected.
// In `end` of a kStop to a worker whose pushes the check kept rejecting: it is dropped.
inline constexpr std::int32_t kRejectedEnd = 0x4a434552;  // "REJC"
inline constexpr std::int32_t kDiscardPush = 0x50534944;  // "DISP"
// In `end` of a kStop answering a join from a worker with another model, batch size or push
// precision; its `param_count`, `batch` and `precision` are the job's.
inline constexpr std::int32_t kMismatchEnd = 0x4d53494d;  // "MISM"
// In `end` of a kStop to a replacement whose data slot the worker it stood in for took back (that
// worker was dropped while alive and rejoined): it leaves, exit 0.
inline constexpr std::int32_t kRetiredEnd = 0x44525452;  // "RTRD"

enum class MsgKind : std::uint16_t {
  kJoin = 1,
  kParams = 2,
  kPush = 3,
  kStop = 4,
  kSnapshotRequest = 5,
  kSnapshot = 6,
  kHeartbeat = 7,
  kLeave = 8,
  kDrain = 9,
  kReplica = 10,
  kEnd = 11,
  kWitnessAsk = 12,
  kWitnessAnswer = 13,
  kWitnessHello = 14
};

struct MsgHeader {
  std::uint32_t magic = kMsgMagic;
  std::uint16_t version = kProtocolVersion;
  MsgKind kind = MsgKind::kJoin;
  std::int64_t step = 0;             // shard -> worker: global step after this update
  std::int64_t model_version = 0;    // version of the parameters sent / the gradients were computed on
  std::int64_t payload = 0;          // floats after the header
  std::int64_t cursor_epoch = 0;     // push: data cursor after this batch;
  std::int64_t cursor_position = 0;  // reply to a join: where this worker's data continues
  std::int64_t param_count = 0;      // join: the worker's model size; stop with kMismatchEnd: the job's
  std::int64_t request_id = 0;       // snapshot request and its answer; replica: the record's bytes
  float loss = 0;                    // push: the batch's loss
  std::int32_t correct = 0;          // push: its correct predictions
  std::int32_t batch = 0;            // push and join: the batch size; stop with kMismatchEnd: the job's
  std::int32_t slot = 0;             // reply to a join: this worker's data slot
  std::int32_t slots = 0;            // reply to a join: the number of data slots; replica: state buffers
  std::int32_t signal = 0;           // leave: the notice signal
  std::int32_t shm = 0;              // join: kShmOffer; its reply: kShmAccepted
  // stop: kCleanEnd, kFailedEnd, kRejectedEnd or kMismatchEnd; replica: kHandover; push: kDiscardPush
  std::int32_t end = 0;
  std::int32_t exit_code = 0;  // stop with kFailedEnd: the job's exit code
  float step_seconds = 0;      // push: the worker's step time (an emulated device's padding included)
  std::int32_t precision = 0;  // join: the worker's PushPrecision; stop with kMismatchEnd: the job's
  // The push journal (ps/resilience/push_journal.hpp): what a takeover needs to replay a push exactly once.
  std::int32_t applied = 0;        // reply to a push: 1 applied, 0 counted as a step but not applied (stale, rejected)
  std::int64_t push_id = 0;        // push: this worker's push number (1, 2, ...; kept across takeovers);
                                   // its reply: the push it answers (to a joiner's join: where it
                                   // numbers its pushes on from, Shard::reply)
  std::int64_t replica_step = -1;  // push from a standby: the step of its newest whole replica of
                                   // this shard (-1: none, or not a standby); reply to a push: the
                                   // step of this shard's newest replica every standby said it holds
                                   // (-1: none); older pushes need no log
  float lr = 0;                    // reply to an applied push: the rate and momentum it was applied
  float momentum = 0;              // with (SgdSpec's floats)
  std::int32_t pid = 0;            // reply to a join: the shard's process id (a same-node worker ends
                                   // it when it hangs, under ULFM: Worker::end_hung_shard)
  std::int32_t epoch = 0;          // reply to a push: the replying parameter server's epoch (shard 0's,
                                   // ckpt/checkpoint.hpp; 0: none), for the history (--push-log)
};
static_assert(sizeof(MsgHeader) == 144, "header is 144 bytes = 36 floats");
inline constexpr std::int64_t kHeaderFloats = sizeof(MsgHeader) / sizeof(float);

// A message buffer: header then payload.
struct MsgView {
  float* base;
  MsgHeader& header() { return *reinterpret_cast<MsgHeader*>(base); }
  float* payload() { return base + kHeaderFloats; }
};

// Empty when the header is well formed; else what is wrong with it.
inline std::string check_header(const MsgHeader& h, std::int64_t max_payload) {
  if (h.magic != kMsgMagic) return "bad magic";
  if (h.version != kProtocolVersion)
    return "protocol version " + std::to_string(h.version) + ", expected " + std::to_string(kProtocolVersion);
  if (h.payload < 0 || h.payload > max_payload) return "payload of " + std::to_string(h.payload) + " floats";
  return {};
}

}  // namespace mt
