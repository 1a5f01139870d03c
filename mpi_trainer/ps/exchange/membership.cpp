#include "ps/exchange/membership.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace mt {

const char* to_string(MemberState s) {
  switch (s) {
    case MemberState::kJoining: return "joining";
    case MemberState::kActive: return "active";
    case MemberState::kDraining: return "draining";
    case MemberState::kFinished: return "finished";
    case MemberState::kLeft: return "left";
    case MemberState::kLost: return "lost";
  }
  return "?";
}

double Member::seconds_active(Clock::time_point now) const {
  if (!live()) return active_seconds;
  return joined_at ? seconds_between(*joined_at, now) : 0.0;
}

int Membership::count(MemberState s) const {
  return static_cast<int>(
      std::count_if(members_.begin(), members_.end(), [s](const Member& m) { return m.state == s; }));
}

int Membership::live() const {
  return static_cast<int>(std::count_if(members_.begin(), members_.end(), [](const Member& m) { return m.live(); }));
}

std::int64_t Membership::dropped_stale() const {
  std::int64_t n = 0;
  for (const auto& m : members_)
    n += m.dropped;
  return n;
}

std::int64_t Membership::rejected() const {
  std::int64_t n = 0;
  for (const auto& m : members_)
    n += m.rejected;
  return n;
}

std::optional<int> Membership::free_slot() const {
  std::vector<bool> used(static_cast<std::size_t>(slots_), false);
  for (const auto& m : members_)
    if (m.live()) used[static_cast<std::size_t>(m.slot)] = true;
  const auto it = std::find(used.begin(), used.end(), false);
  if (it == used.end()) return std::nullopt;
  return static_cast<int>(it - used.begin());
}

Member& Membership::add(int rank, MPI_Comm comm, int peer, int slot, std::string type, Clock::time_point now) {
  MT_ASSERT(slot >= 0 && slot < slots_, "data slot " + std::to_string(slot) + " of " + std::to_string(slots_));
  Member& m = members_.emplace_back();
  m.rank = rank;
  m.comm = comm;
  m.peer = peer;
  m.slot = slot;
  m.type = std::move(type);
  m.added_at = now;
  return m;
}

void Membership::joined(Member& m, Clock::time_point now, bool stopping) {
  MT_ASSERT(m.state == MemberState::kJoining, std::string("join of a member that is ") + to_string(m.state));
  m.state = stopping ? MemberState::kDraining : MemberState::kActive;
  m.joined_at = now;
}

void Membership::drain() {
  for (auto& m : members_)
    if (m.state == MemberState::kActive) m.state = MemberState::kDraining;
}

void Membership::finished(Member& m, Clock::time_point now) {
  MT_ASSERT(m.live(), std::string("finish of a member that is ") + to_string(m.state));
  m.active_seconds = m.joined_at ? seconds_between(*m.joined_at, now) : 0.0;
  m.state = MemberState::kFinished;
}

void Membership::departed(Member& m, bool lost, Clock::time_point now) {
  MT_ASSERT(m.live(), std::string("departure of a member that is ") + to_string(m.state));
  const Clock::time_point until = lost ? m.last_heard.value_or(m.added_at) : now;
  m.active_seconds = m.joined_at ? std::max(0.0, seconds_between(*m.joined_at, until)) : 0.0;
  m.state = lost ? MemberState::kLost : MemberState::kLeft;
}

std::optional<std::string> Membership::overdue(const Member& m, Clock::time_point now,
                                               std::optional<Clock::time_point> stop_at) const {
  if (!m.live()) return std::nullopt;
  const double silent = seconds_between(m.last_heard.value_or(m.added_at), now);
  if (silent > (m.last_heard ? deadlines_.failure_timeout : deadlines_.startup_grace))
    return m.last_heard ? "no push or heartbeat within --failure-timeout" : "never joined";
  if (stop_at && seconds_between(*stop_at, now) > deadlines_.drain_deadline)
    return "did not stop within --drain-deadline";
  return std::nullopt;
}

}  // namespace mt
