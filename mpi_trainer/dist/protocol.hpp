// The one message format between workers and parameter-server shards. Every message is a
// fixed header followed by float32 payload in one contiguous buffer, so each exchange is a
// single MPI message.
//
//   worker -> shard  kJoin   (model_version = its parameter     "send me the model"
//                            count, batch = its batch size: checked by the shard; with
//                            reserved = kShmOffer the payload is the name of a shared-memory
//                            segment for this pair, dist/shm.hpp)
//   shard -> worker  kParams (the shard's parameters)          reply to kJoin and kPush; to a
//                            kJoin also its data cursor, correct = its data slot, batch = slots,
//                            reserved = kShmAccepted when it mapped the offered segment: from
//                            then on pushes and replies of this pair carry their payload there
//                            and the messages are headers alone (`payload` still counts it)
//   worker -> shard  kPush   (gradients [+ BN batch stats])    one global step
//   shard -> worker  kStop   (no payload)                      training is over
//   worker -> shard  kStop   (no payload)                      leaving: another shard said stop
//   worker -> shard  kLeave  (no payload; reserved = signal)   leaving on a preemption notice
//   worker -> shard  kHeartbeat on kTagHeartbeat (no payload)  alive (a thread, every
//                                                              --failure-timeout / 5 seconds)
//
// Between shards (shard 0 coordinates checkpoints, evaluation and the end):
//   shard 0 -> shard k  kSnapshotRequest (no payload; model_version = request id)
//   shard k -> shard 0  kSnapshot (parameters then momentum of shard k; step = its step)
//   shard k -> shard 0  kSnapshot on kTagFinal after its last update
//   shard 0 -> shard k  kStop    after every final arrived: no more requests
//   shard 0 -> shard k  kParams  at start: step, then parameters and momentum (a resume)
//   shard 0 -> shard k  kDrain   a preemption notice: apply no more pushes, stop the workers
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace mt {

inline constexpr std::uint32_t kMsgMagic = 0x5350544D;  // "MTPS"
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr int kTagToPs = 11;
inline constexpr int kTagToWorker = 12;
inline constexpr int kTagFinal = 13;     // shard k -> shard 0: final state
inline constexpr int kTagControl = 14;   // shard 0 -> shard k: requests, stop, start state
inline constexpr int kTagSnapshot = 15;  // shard k -> shard 0: requested state
inline constexpr int kTagHeartbeat = 16; // worker -> shard: alive

inline constexpr std::int32_t kShmOffer = 0x4f4d4853;     // "SHMO"
inline constexpr std::int32_t kShmAccepted = 0x414d4853;  // "SHMA"
// In `reserved` of a kStop that ends training while no rank is known lost: the receiver may wait
// long in MPI_Finalize, where Open MPI makes it wait for shard 0's final checkpoint and evaluation.
inline constexpr std::int32_t kCleanEnd = 0x444e4543;     // "CEND"

enum class MsgKind : std::uint16_t {
  kJoin = 1, kParams = 2, kPush = 3, kStop = 4, kSnapshotRequest = 5, kSnapshot = 6,
  kHeartbeat = 7, kLeave = 8, kDrain = 9
};

struct MsgHeader {
  std::uint32_t magic = kMsgMagic;
  std::uint16_t version = kProtocolVersion;
  MsgKind kind = MsgKind::kJoin;
  std::int64_t step = 0;           // shard -> worker: global step after this update
  std::int64_t model_version = 0;  // version of the parameters sent / the gradients were computed on
  std::int64_t payload = 0;        // floats after the header
  std::int64_t cursor_epoch = 0;   // worker -> shard: data cursor after this batch;
  std::int64_t cursor_position = 0;  // shard 0 -> worker (reply to kJoin): where to start
  float loss = 0;                  // worker -> shard: the batch's loss
  std::int32_t correct = 0;        // and its correct predictions
  std::int32_t batch = 0;
  std::int32_t reserved = 0;
};
static_assert(sizeof(MsgHeader) == 64, "header is 64 bytes = 16 floats");
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
