// A shard's standbys (ps/standbys.hpp).
#include "ps/standbys.hpp"

#include <algorithm>

#include "ps/mpi_env.hpp"

namespace mt {

std::vector<ReplicaSender::Dest> choose_standbys(const Membership& members, int count) {
  std::vector<ReplicaSender::Dest> out;
  for (const Member& m : members.members()) {
    if (static_cast<int>(out.size()) >= count) break;
    if (m.working()) out.push_back(ReplicaSender::Dest{m.rank, m.comm, m.peer});
  }
  return out;
}

StandbyChange standby_change(const std::vector<int>& before, const std::vector<int>& now, const Membership& members) {
  if (before == now) return StandbyChange::kNone;
  if (before.empty()) return StandbyChange::kFirst;
  const auto& ms = members.members();
  for (const int r : before)
    if (std::none_of(ms.begin(), ms.end(), [r](const Member& m) { return m.rank == r && m.working(); }))
      return StandbyChange::kGone;
  return StandbyChange::kLowerJoined;
}

Standbys::Standbys(const PsOptions& opts, bool lead, int state_buffers, PsEvents& events, FaultPlan& plan, int self)
    : opts_(opts),
      lead_(lead),
      state_buffers_(state_buffers),
      events_(events),
      plan_(plan),
      self_(self),
      sender_(std::max<std::int64_t>(1, opts.replica_interval), opts.replica_budget) {}

bool Standbys::after_update(std::int64_t step, const Membership& members, const ContentFn& content) {
  if (!sender_.due(step)) return false;
  const std::vector<ReplicaSender::Dest> dests = choose_standbys(members, opts_.ps_standby);
  if (dests.empty() || !sender_.ready(dests)) return false;
  std::vector<int> ranks;
  for (const auto& d : dests)
    ranks.push_back(d.id);
  const StandbyChange change = standby_change(ranks_, ranks, members);
  if (lead_ && change != StandbyChange::kNone && !opts_.quiet) {
    std::string names;
    for (const int r : ranks)
      names += (names.empty() ? "" : ", ") + std::to_string(r);
    events_.log("mpi_trainer: parameter server: standby replica on worker rank " + names + " at global step " +
                std::to_string(step) + ", every " + std::to_string(opts_.replica_interval) + " updates" +
                (change == StandbyChange::kFirst ? ""
                 : change == StandbyChange::kGone
                     ? " (the previous standby is gone)"
                     : " (a lower-ranked worker joined: the lowest-ranked workers are the standbys)"));
  }
  ranks_ = std::move(ranks);
  send(step, dests, content, false);
  return true;
}

void Standbys::send(std::int64_t step, const std::vector<ReplicaSender::Dest>& dests, const ContentFn& content,
                    bool handover) {
  const Content c = content();
  sender_.send(step, state_buffers_, c.pieces, c.record, dests, handover);
  plan_.at_replica(self_, sender_.sent(), step);
}

// Then the shard serves no more and the process leaves: the survivors find it gone (ULFM) and the
// standby takes over from the replica, no update lost. The workers' pushes in flight are not applied.
bool Standbys::hand_over(std::int64_t step, int signo, const Membership& members, const ContentFn& content,
                         std::string* why) {
  const std::vector<ReplicaSender::Dest> dests = choose_standbys(members, opts_.ps_standby);
  if (dests.empty()) {
    *why = "no standby is left to take it";
    return false;
  }
  const std::string late = "the standby did not take the handover within --failure-timeout";
  try {
    for (const auto& d : dests)
      if (!sender_.settle(d.id, opts_.failure_timeout)) {  // the replica in flight
        *why = late;
        return false;
      }
    if (!sender_.ready(dests)) {
      *why = late;
      return false;
    }
    send(step, dests, content, true);
    for (const auto& d : dests) {
      int theirs = 0;
      const ReplicaSender::Answer a = sender_.settle(d.id, opts_.failure_timeout)
                                          ? ReplicaSender::acknowledged(d, step, opts_.failure_timeout, &theirs)
                                          : ReplicaSender::Answer::kNone;
      if (a == ReplicaSender::Answer::kTaken) continue;
      *why = a == ReplicaSender::Answer::kNone
                 ? late
                 : "the standby (worker rank " + std::to_string(d.id) + ") has a notice too (" + signal_name(theirs) +
                       "): the whole job is being stopped";
      return false;
    }
  } catch (const ProcessFailed&) {  // ULFM: the standby is gone
    *why = "the standby is gone";
    return false;
  }
  events_.handed_over(step, dests.front().id, signo);
  return true;
}

}  // namespace mt
