// The shard's side of coordination (ps/shard.hpp): a worker's buffers and shared-memory segment,
// joins taken from the listener, and after each step shard 0's coordinator (ps/coordinator.hpp)
// and the standbys' replicas (ps/standbys.hpp).
#include "ps/shard.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ps/push_journal.hpp"
#include "ps/mpi_env.hpp"

namespace mt {

void Shard::give_buffers(Member& m) const {
  m.recv = Buffer(push_slots_);
  m.send = Buffer(reply_slots_);
  if (bf16_) m.sent.assign(static_cast<std::size_t>(mine_), 0.f);
}

// A joining worker on this node offered a segment for this pair: map it and move both buffers'
// payloads there. A worker on another node (no such segment here) keeps plain messages.
void Shard::accept_segment(Member& m, const MsgHeader& h) {
  const auto* chars = reinterpret_cast<const char*>(m.recv.payload());
  const std::string name(chars, strnlen(chars, static_cast<std::size_t>(h.payload) * sizeof(float)));
  std::string why;
  auto seg = ShmSegment::open(name, shm_bytes(push_slots_, reply_slots_), &why);
  if (!seg) {
    if (opts_.shm_debug)
      events_.log("mpi_trainer: shard " + std::to_string(shard_) + ": worker rank " + std::to_string(m.rank) +
                  ": plain messages (" + why + ")");
    return;
  }
  m.recv.share(seg, 0);
  m.send.share(seg, shm_reply_offset(push_slots_));
  m.bells = shm_bells(*seg, push_slots_, reply_slots_);
  ++shm_workers_;
}

void Shard::take_joins() {
  std::string error;
  std::vector<std::string> refused;
  const std::vector<MPI_Comm> comms = joins_->take(&refused, &error);
  if (!error.empty()) events_.log("mpi_trainer: warning: " + error);
  for (std::string& why : refused)
    events_.join_refused(
        PsEvents::JoinRefused{PsEvents::JoinRefused::Why::kUnauthenticated, -1, {}, std::move(why)});
  for (const MPI_Comm comm : comms) {
    const auto slot = members_.free_slot();
    if (stop_at_ || failure_code_ != 0 || members_.live() >= opts_.max_workers || !slot) {
      // Full (or stopping): the joiner's join is answered with stop.
      Buffer b(0);
      b.header() = MsgHeader{};
      b.header().kind = MsgKind::kStop;
      stamp_failure(b.header());
      MPI_Request req = MPI_REQUEST_NULL;
      isend(b, 0, 0, kTagToWorker, &req, comm);
      MT_MPI(MPI_Request_free(&req));
      abandon(std::move(b));
      using Why = PsEvents::JoinRefused::Why;
      events_.join_refused(PsEvents::JoinRefused{
          failure_code_ != 0 ? Why::kFailed : stop_at_ ? Why::kStopping : Why::kFull, -1, {}, {}});
      continue;
    }
    Member& m = members_.add(shards_ + workers_ + connected_, comm, 0, *slot, opts_.join_type, Clock::now());
    ++connected_;
    m.late = true;
    give_buffers(m);
    m.cursor = coord_->cursor(m.slot);
    irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
    irecv(m.hb, m.peer, kTagHeartbeat, &m.hbreq, m.comm);
  }
}

// A late member's join was answered with the parameters (its model and batch size matched): it
// counts as joined from now on, not when it connected (its join could still be refused then).
void Shard::admit_late(const Member& m) {
  ++joined_;
  const int live = members_.live();
  policy_.joined(step_, live - 1, live);
  events_.join(PsEvents::Join{step_, m.rank, m.slot, m.type, live, policy_.lr_divisor(live), policy_.momentum(live)});
}

void Shard::after_step(double lr) {
  if (coord_) coord_->after_step(part(), lr, stop_at_.has_value());
  // The final checkpoint follows a stop or the end: no replica then.
  if (standbys_ && !stop_at_ && step_ < opts_.train_steps && failure_code_ == 0)
    standbys_->after_update(step_, members_, [this] { return replica_content(); });
}

Standbys::Content Shard::replica_content() const {
  handled_to_floats(handled_, handled_floats_);
  Standbys::Content c{{current(), velocity_, handled_floats_}, {}};
  if (coord_) {
    c.pieces.push_back(stats_.span());
    c.record = coord_->replica_record(step_);
  }
  return c;
}

void Shard::poll_background() {
  if (!coord_ || failure_code_ != 0) return;
  if (const std::string why = coord_->poll(part(), stop_at_.has_value()); !why.empty()) begin_stop(why);
}

}  // namespace mt
