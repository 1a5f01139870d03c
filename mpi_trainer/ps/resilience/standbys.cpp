// A shard's standbys (ps/resilience/standbys.hpp).
#include "ps/resilience/standbys.hpp"

#include <algorithm>

#include "ps/wire/mpi_env.hpp"

namespace mt {

std::vector<ReplicaSender::Dest> choose_standbys(const Membership& members, int count) {
  std::vector<ReplicaSender::Dest> out;
  for (const Member& m : members.members()) {
    if (static_cast<int>(out.size()) >= count) break;
    if (m.working()) out.push_back(ReplicaSender::Dest{m.rank, m.comm, m.peer});
  }
  return out;
}

void Standbys::settle(int rank, const Membership& members) {
  sender_.flush(choose_standbys(members, opts_.ps_standby));
  sender_.settle(rank, opts_.failure_timeout);
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

void Standbys::held(int rank, std::int64_t step) {
  std::int64_t& h = held_.try_emplace(rank, -1).first->second;
  h = std::max(h, step);
}

std::int64_t confirmed_replica_step(std::int64_t sent, const std::vector<int>& ranks,
                                    const std::map<int, std::int64_t>& held) {
  std::int64_t step = sent;
  for (const int r : ranks) {
    const auto it = held.find(r);
    step = std::min(step, it == held.end() ? std::int64_t{-1} : it->second);
  }
  return step;
}

std::int64_t Standbys::settled_step() const { return confirmed_replica_step(sender_.settled_step(), ranks_, held_); }

bool Standbys::after_update(std::int64_t step, const Membership& members, const ContentFn& content) {
  const bool due = sender_.due(step);
  std::vector<ReplicaSender::Dest> dests;
  if (due || sender_.pacing()) dests = choose_standbys(members, opts_.ps_standby);
  if (sender_.pacing()) sender_.pace(dests);  // the next slices
  if (!due) {
    sender_.progress();
    return false;
  }
  if (dests.empty() || !sender_.ready(dests)) return false;
  std::vector<int> ranks;
  for (const auto& d : dests)
    ranks.push_back(d.id);
  const StandbyChange change = standby_change(ranks_, ranks, members);
  if (lead_ && change != StandbyChange::kNone)
    events_.standbys_chosen(PsEvents::StandbysChosen{ranks, step, opts_.replica_interval, change});
  ranks_ = std::move(ranks);
  send(step, dests, content, false);
  return true;
}

void Standbys::send(std::int64_t step, const std::vector<ReplicaSender::Dest>& dests, const ContentFn& content,
                    bool handover) {
  const Content c = content();
  // The reply an update makes: the shard's part of the parameters, half of it as floats for bf16.
  const auto part = static_cast<std::int64_t>(c.pieces.empty() ? 0 : c.pieces.front().size());
  const std::int64_t reply = opts_.push_precision == PushPrecision::kBf16 ? part / 2 : part;
  sender_.send(step, state_buffers_, c.pieces, c.record, dests, reply, handover);
  plan_.at_replica(self_, sender_.sent(), step);
}

// Then the shard serves no more and the process leaves: the survivors find it gone (ULFM) and the
// standby takes over from the replica, no update lost. The workers' pushes in flight are not applied.
bool Standbys::hand_over(std::int64_t step, int signo, const Membership& members, const ContentFn& content,
                         PsEvents::NoHandover* why) {
  using Why = PsEvents::NoHandover::Why;
  *why = PsEvents::NoHandover{Why::kNoStandby, signo, -1, 0};
  const std::vector<ReplicaSender::Dest> dests = choose_standbys(members, opts_.ps_standby);
  if (dests.empty()) return false;
  why->standby = dests.front().id;
  why->why = Why::kLate;  // unless it answers in time below
  try {
    sender_.flush(dests);  // the replica in flight: its slices not sent yet
    for (const auto& d : dests)
      if (!sender_.settle(d.id, opts_.failure_timeout)) return false;
    if (!sender_.ready(dests)) return false;
    send(step, dests, content, true);
    for (const auto& d : dests) {
      int theirs = 0;
      const ReplicaSender::Answer a = sender_.settle(d.id, opts_.failure_timeout)
                                          ? ReplicaSender::acknowledged(d, step, opts_.failure_timeout, &theirs)
                                          : ReplicaSender::Answer::kNone;
      if (a == ReplicaSender::Answer::kTaken) continue;
      if (a == ReplicaSender::Answer::kRefused) *why = PsEvents::NoHandover{Why::kRefused, signo, d.id, theirs};
      return false;
    }
  } catch (const ProcessFailed&) {  // ULFM: the standby is gone
    why->why = Why::kStandbyGone;
    return false;
  }
  events_.handed_over(step, dests.front().id, signo);
  return true;
}

}  // namespace mt
