// How a shard paces its standby replicas (ps/resilience/replica.hpp): the slices a replica goes
// in and how many follow each update. The simulator and plan (plan/cluster_sim.cpp) pace them the
// same way.
#pragma once

#include <cstdint>

namespace mt {

// A standby replica (ps/resilience/replica.hpp) goes in slices of at most this many floats each
// (60,000 bytes, the header beside them under TCP's eager limit of 64 KB in both Open MPI builds:
// a slice leaves at once, without the rendezvous that waits for the standby to post its receive).
inline constexpr std::int64_t kReplicaSliceFloats = 15000;
inline std::int64_t replica_slices(std::int64_t floats) {
  return floats <= kReplicaSliceFloats ? 1 : (floats + kReplicaSliceFloats - 1) / kReplicaSliceFloats;
}
// The slices sent after each update: spread over one update fewer than the interval (`interval`),
// so that the last has left when the next replica is due; and no more bytes than the reply the
// update made (`reply_floats`, the shard's part of a message as floats' worth: half its floats
// for bf16 replies), so that replicas take at most half of the shard's outbound link, however
// large (with `dana`, a momentum per worker) and however rare the interval asks them.
inline std::int64_t replica_slices_per_update(std::int64_t floats, std::int64_t interval, std::int64_t reply_floats) {
  const std::int64_t updates = interval > 2 ? interval - 1 : 1;
  const std::int64_t even = (replica_slices(floats) + updates - 1) / updates;
  const std::int64_t cap = reply_floats / kReplicaSliceFloats > 1 ? reply_floats / kReplicaSliceFloats : 1;
  return even < cap ? even : cap;
}
// The updates the slices of a replica follow (the first with it).
inline std::int64_t replica_sending_updates(std::int64_t floats, std::int64_t interval, std::int64_t reply_floats) {
  const std::int64_t each = replica_slices_per_update(floats, interval, reply_floats);
  return (replica_slices(floats) + each - 1) / each;
}
// The updates between two replicas: the interval, or more where the cap above spreads one further
// (the next begins after the update that sent the last one's last slices: measured so, its sends
// complete at once).
inline std::int64_t replica_interval_paced(std::int64_t floats, std::int64_t interval, std::int64_t reply_floats) {
  const std::int64_t after = replica_sending_updates(floats, interval, reply_floats) - 1;
  return interval > after ? interval : after;
}
// The most updates a standby's newest whole replica can be behind the parameter server: the
// updates between two, and those the last one's slices followed its first.
inline std::int64_t replica_age_at_most(std::int64_t floats, std::int64_t interval, std::int64_t reply_floats) {
  return replica_interval_paced(floats, interval, reply_floats) + replica_sending_updates(floats, interval, reply_floats) - 1;
}

}  // namespace mt
