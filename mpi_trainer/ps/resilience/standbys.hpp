// A shard's standbys (--ps-standby, docs/fault-model.md, "Standby replicas"): which workers hold
// its replicas, a replica to them every --replica-interval updates, and the handover of a notice
// to one (ULFM). The shard owns one of these when standbys are asked for; it hands over its part
// of the state only when a replica is sent (Content), so that nothing is copied otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

// The newest replica that has left for the standbys `ranks` (`sent`, ReplicaSender::settled_step)
// and that each of them said it holds (`held`, per rank; one that said nothing holds none); -1: none.
std::int64_t confirmed_replica_step(std::int64_t sent, const std::vector<int>& ranks,
                                    const std::map<int, std::int64_t>& held);

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

  // A push of worker `rank` said it holds this shard's replica of `step` whole
  // (MsgHeader::replica_step): the standbys confirm what arrived.
  void held(int rank, std::int64_t step);
  std::int64_t sent() const { return sender_.sent(); }
  // The newest replica that has left for the standbys of the last one and that each of them said
  // it holds (-1: none): what the replies tell the workers' push journals they need not keep. A
  // send completes once the kernel holds the bytes, which on a full link may be long before they
  // cross it: a parameter server's node lost meanwhile (revoked, cut off) takes them with it.
  std::int64_t settled_step() const;
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
  std::vector<int> ranks_;  // the standbys of the last replica
  std::map<int, std::int64_t> held_;  // per worker rank, the newest replica it said it holds
};

}  // namespace mt
