// A shard's standbys (ps/shard.hpp): replicas streamed to them every --replica-interval updates,
// and the handover of a notice to one (ULFM).
#include "ps/shard.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/mpi_env.hpp"
#include "ps/recovery.hpp"
#include "ps/ulfm.hpp"

namespace mt {

std::vector<ReplicaSender::Dest> Shard::standbys() const {
  std::vector<ReplicaSender::Dest> out;
  for (const Member& m : members_.members()) {
    if (static_cast<int>(out.size()) >= opts_.ps_standby) break;
    if (m.working()) out.push_back(ReplicaSender::Dest{m.rank, m.comm, m.peer});
  }
  return out;
}

void Shard::replicate() {
  if (stop_at_ || step_ >= opts_.train_steps || failure_code_ != 0) return;  // the final checkpoint follows
  if (!replicas_->due(step_)) return;
  const std::vector<ReplicaSender::Dest> dests = standbys();
  if (dests.empty() || !replicas_->ready(dests)) return;
  std::vector<int> ranks;
  for (const auto& d : dests) ranks.push_back(d.id);
  if (lead() && ranks != standby_ranks_ && !opts_.quiet) {
    std::string names;
    for (const int r : ranks) names += (names.empty() ? "" : ", ") + std::to_string(r);
    // A standby replaced while it still works: a lower-ranked worker joined after it (the shards
    // all choose the lowest-ranked working workers, so that each standby holds every shard's part).
    bool gone = false;
    for (const int r : standby_ranks_)
      gone = gone || std::none_of(members_.members().begin(), members_.members().end(),
                                  [r](const Member& m) { return m.rank == r && m.working(); });
    events_.log("mpi_trainer: parameter server: standby replica on worker rank " + names + " at global step " +
                std::to_string(step_) + ", every " + std::to_string(opts_.replica_interval) + " updates" +
                (standby_ranks_.empty() ? ""
                 : gone             ? " (the previous standby is gone)"
                                    : " (a lower-ranked worker joined: the lowest-ranked workers are the standbys)"));
  }
  standby_ranks_ = std::move(ranks);
  send_replica(dests, false);
}

void Shard::send_replica(const std::vector<ReplicaSender::Dest>& dests, bool handover) {
  std::vector<std::span<const float>> pieces{current(), velocity_};
  std::string record;
  if (lead()) {
    pieces.push_back(stats_.span());
    record = sink_.replica_record(step_, slot_cursors_, since(t0_), schedule_lr_now(), usage());
  }
  replicas_->send(step_, state_buffers(), pieces, record, dests, handover);
  plan_.at_replica(self_, replicas_->sent(), step_);
}

// The replica of this very step to the standby, taken whole (it acknowledges it; it receives
// while it waits for a reply or between heartbeats); then the shard serves no more and the
// process leaves: the survivors find it gone (ULFM) and the standby takes over from the replica,
// no update lost. The workers' pushes in flight are not applied.
bool Shard::hand_over(int signo, std::string* why) {
  const std::vector<ReplicaSender::Dest> dests = standbys();
  if (dests.empty()) {
    *why = "no standby is left to take it";
    return false;
  }
  const std::string late = "the standby did not take the handover within --failure-timeout";
  try {
    for (const auto& d : dests)
      if (!replicas_->settle(d.id, opts_.failure_timeout)) {  // the replica in flight
        *why = late;
        return false;
      }
    if (!replicas_->ready(dests)) {
      *why = late;
      return false;
    }
    send_replica(dests, true);
    for (const auto& d : dests) {
      int theirs = 0;
      const ReplicaSender::Answer a = replicas_->settle(d.id, opts_.failure_timeout)
                                          ? ReplicaSender::acknowledged(d, step_, opts_.failure_timeout, &theirs)
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
  handed_over_ = true;
  events_.handed_over(step_, dests.front().id, signo);
  return true;
}

}  // namespace mt
