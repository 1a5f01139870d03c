// A shard's standbys (--ps-standby, docs/fault-model.md, "Standby replicas"): which workers hold
// its replicas, a replica to them every --replica-interval updates, and the handover of a notice
// to one (ULFM). The shard owns one of these when standbys are asked for; it hands over its part
// of the state only when a replica is sent (Content), so that nothing is copied otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ps/events.hpp"
#include "ps/exchange/membership.hpp"
#include "ps/inject/fault_injection.hpp"
#include "ps/resilience/replica.hpp"

namespace mt {

// The standbys among `members`: the first `count` working workers (the lowest-ranked: launched
// workers come first, joins after them), so that every shard chooses the same and each standby
// holds every shard's part.
std::vector<ReplicaSender::Dest> choose_standbys(const Membership& members, int count);

// Why the standbys changed from `before` to `now` (ranks; StandbyChange in ps/ps.hpp).
StandbyChange standby_change(const std::vector<int>& before, const std::vector<int>& now, const Membership& members);

class Standbys {
 public:
  // What a replica carries: the shard's part of the parameters and state buffers (and on shard 0
  // the BatchNorm statistics), and on shard 0 the app's record (SnapshotSink::replica_record).
  struct Content {
    std::vector<std::span<const float>> pieces;
    std::string record;
  };
  using ContentFn = std::function<Content()>;

  // `lead`: shard 0 (it logs the standbys). `state_buffers`: the shard's optimizer state buffers.
  // `plan`, `self`: the shard's injected faults (one may fire at a replica) and its rank.
  Standbys(const PsOptions& opts, bool lead, int state_buffers, PsEvents& events, FaultPlan& plan, int self);

  // After an update that made `step`: a replica to the standbys when one is due and the previous
  // one has left (ReplicaSender). Returns whether one was sent.
  bool after_update(std::int64_t step, const Membership& members, const ContentFn& content);
  // A notice (`signo`) hands the parameter server over (PsOptions::hand_over): the replica of this
  // very step to the standby, taken whole (it acknowledges it). False, with `why` filled: it could
  // not (no standby; it did not take the replica in time; it refused, having a notice too).
  bool hand_over(std::int64_t step, int signo, const Membership& members, const ContentFn& content,
                 PsEvents::NoHandover* why);
  // Before `rank` is told to stop: the replica in flight to it has left, every slice (or is given up).
  void settle(int rank, const Membership& members);

  std::int64_t sent() const { return sender_.sent(); }
  std::int64_t settled_step() const { return sender_.settled_step(); }
  double mean_interval() const { return sender_.mean_interval(); }
  double mean_cost_seconds() const { return sender_.mean_cost_seconds(); }

 private:
  void send(std::int64_t step, const std::vector<ReplicaSender::Dest>& dests, const ContentFn& content, bool handover);
  const PsOptions& opts_;
  const bool lead_;
  const int state_buffers_;
  PsEvents& events_;
  FaultPlan& plan_;
  const int self_;
  ReplicaSender sender_;
  std::vector<int> ranks_;  // the standbys of the last replica, for the log
};

}  // namespace mt
