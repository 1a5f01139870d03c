// Moving messages between workers and shards: clocks, polling with backoff, message buffers
// (header + payload, the payload optionally in a shared-memory segment, ps/wire/shm.hpp), sends and
// receives with deadlines. Open MPI 4.1 neither completes nor cancels a request to a dead peer
// (docs/fault-model.md): a buffer handed to such a peer is abandoned (kept alive until the
// process ends), never reused.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <vector>

#include "core/clock.hpp"
#include "ps/wire/bell.hpp"
#include "ps/wire/protocol.hpp"
#include "ps/wire/shm.hpp"

namespace mt {

void nap_microseconds(long us);

// Waiting for messages without spinning (MPI's blocking waits poll and would take the core from
// the ranks that share it). Naps double from `floor` up to a cap that follows how long these waits
// usually last: a tenth of their recent mean, within [floor, ceiling]. So a fast exchange (a
// benchmark's precomputed gradients, a fraction of a millisecond) is not slowed down by long naps,
// and a slow one (a real training step, a tenth of a second and more) wakes the core rarely; a
// message waits at most about a tenth of the usual wait for the nap to end.
class Backoff {
 public:
  Backoff(long floor_us, long ceiling_us) : floor_(floor_us), ceiling_(ceiling_us), nap_(floor_us) {}
  // Nothing arrived yet: sleep a little longer each time.
  void idle();
  // The next nap in microseconds, for a caller that sleeps it itself: twice the last, at most
  // `cap_us` (idle() sleeps next(cap())).
  long next(long cap_us);
  // The wait is over: remember how long it took and start the next one.
  void done();
  // A sign that the wait is nearly over: the next nap is the shortest again.
  void rearm() { nap_ = floor_; }
  void restart() {
    since_ = Clock::now();
    nap_ = floor_;
  }
  long cap() const;

 private:
  long floor_, ceiling_, nap_;
  double mean_us_ = -1;
  Clock::time_point since_ = Clock::now();
};

// Polls `req` with naps until it completes or `seconds` pass. False: it did not complete, or (ULFM)
// the MPI library reported its peer failed; the peer is presumed lost, and the caller abandons the
// request and its buffer. `status`: the completed request's (a receive's source and size).
bool wait_for(MPI_Request* req, double seconds, MPI_Status* status = MPI_STATUS_IGNORE);

// A message buffer of header + `payload` floats; or, once shared with a same-node peer, the
// header alone here and the payload in the pair's segment.
struct Buffer {
  std::vector<float> data;
  std::shared_ptr<ShmSegment> segment;
  float* shared = nullptr;
  explicit Buffer(std::int64_t payload = 0) : data(static_cast<std::size_t>(kHeaderFloats + payload)) {}
  MsgView view() { return MsgView{data.data()}; }
  MsgHeader& header() { return view().header(); }
  float* payload() { return shared ? shared : view().payload(); }
  // Floats an MPI message of this buffer carries at most.
  int count() const { return shared ? static_cast<int>(kHeaderFloats) : static_cast<int>(data.size()); }
  // The payload lives at `offset` floats into `seg` from now on (no receive may be pending).
  void share(std::shared_ptr<ShmSegment> seg, std::size_t offset);
};

// Sends `buf` (header + `payload` floats; the header alone when the payload is shared) without
// blocking.
void isend(Buffer& buf, std::int64_t payload, int dest, int tag, MPI_Request* req, MPI_Comm comm = MPI_COMM_WORLD);
void irecv(Buffer& buf, int source, int tag, MPI_Request* req, MPI_Comm comm = MPI_COMM_WORLD);

// A buffer whose request may never complete (its peer is presumed dead): kept alive, untouched,
// until the process ends, so MPI may still read or write it safely. Thread-safe.
void abandon(Buffer&& buf);
void abandon(std::vector<std::uint8_t>&& bytes);  // the same for a message of bytes (ps/elastic/join_auth.cpp)

// One (worker, shard) pair's segment: the push payload, then (64-byte aligned) the reply's, then
// (64-byte aligned) the pair's doorbells (ps/wire/bell.hpp).
inline std::size_t shm_reply_offset(std::int64_t push_floats) {
  return static_cast<std::size_t>((push_floats + 15) / 16 * 16);
}
inline std::size_t shm_bells_offset(std::int64_t push_floats, std::int64_t reply_floats) {
  return (shm_reply_offset(push_floats) + static_cast<std::size_t>(reply_floats) + 15) / 16 * 16;
}
inline std::size_t shm_bytes(std::int64_t push_floats, std::int64_t reply_floats) {
  return (shm_bells_offset(push_floats, reply_floats) + kPairBellsFloats) * sizeof(float);
}
inline PairBells shm_bells(const ShmSegment& seg, std::int64_t push_floats, std::int64_t reply_floats) {
  return PairBells{reinterpret_cast<std::uint32_t*>(seg.floats() + shm_bells_offset(push_floats, reply_floats))};
}

}  // namespace mt
