// Doorbells: how a same-node worker and parameter-server shard wake each other instead of polling.
// Each (worker, shard) pair's shared-memory segment (ps/wire/shm.hpp) ends with a 64-byte block of two
// doorbells, one per direction. A doorbell is a counter that the sender increments after posting
// its MPI message (the header of a push, the header of a reply), and a flag the receiver raises
// while it sleeps on the counter with a futex: the sender calls the kernel only when someone
// sleeps. The receiver reads the counters it will sleep on *before* it tests its MPI requests, so
// a message posted after that test always finds the counter moved (the sleep returns at once).
//
// Sleeping is always bounded by a timeout: peers without a doorbell (another node, a heartbeat,
// shard 0's control messages) are still found by the caller's polling, at its old pace.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mt {

// One direction: the counter and the sleeping receiver's flag, in shared memory.
struct Doorbell {
  std::uint32_t* count = nullptr;
  std::uint32_t* sleeping = nullptr;
  explicit operator bool() const { return count != nullptr; }
  // The counter now (acquire): read before testing the requests this doorbell announces.
  std::uint32_t seen() const;
  // After the message is posted: moves the counter and wakes the receiver if it sleeps.
  void ring() const;
};

// A pair's block of doorbells, at `block` (64 bytes, zeroed when the segment was made).
struct PairBells {
  std::uint32_t* block = nullptr;
  explicit operator bool() const { return block != nullptr; }
  Doorbell to_shard() const { return block ? Doorbell{block, block + 1} : Doorbell{}; }
  Doorbell to_worker() const { return block ? Doorbell{block + 8, block + 9} : Doorbell{}; }
};
inline constexpr std::size_t kPairBellsFloats = 16;  // 64 bytes

// The longest nap of a process that sleeps on doorbells: what else it polls (heartbeats, timed
// revocations, shard 0's messages, notices) waits at most this long.
inline constexpr long kDoorbellNapUs = 10000;

// Whether this kernel lets one thread sleep on `n` doorbells at once (one: always; several:
// futex_waitv, Linux 5.16 and later). When not, callers keep their short naps.
bool can_wait_on(std::size_t n);

// Sleeps until one of `bells` differs from its `seen` value (from Doorbell::seen), a signal
// arrives, or `timeout_us` microseconds pass. With no bells (or more than can_wait_on allows) it
// sleeps the timeout. True when a doorbell rang (its message is posted: look again soon).
bool wait_bells(std::span<const Doorbell> bells, std::span<const std::uint32_t> seen, long timeout_us);

class Backoff;

// A polling loop's doorbells. Before each test of its requests the loop lists the peers it waits
// for (add: the peer's doorbell, or an empty one for a peer that rings none); after a test that
// found nothing, sleep() sleeps on them. While every peer rings, the sleep may last
// kDoorbellNapUs (a ring ends it); otherwise the backoff's naps, at the old pace.
class BellWait {
 public:
  void clear();
  void add(const Doorbell& bell);
  void sleep(Backoff& backoff) const;

 private:
  std::vector<Doorbell> bells_;
  std::vector<std::uint32_t> seen_;
  bool all_ring_ = true;
};

}  // namespace mt
