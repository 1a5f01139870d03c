// A shard's side of elastic joins (ps/exchange/shard.hpp): the connections the listener accepted
// (ps/elastic/joins.hpp) and the replacements the spawner started (ps/elastic/replacements.hpp)
// taken in as members, a late joiner admitted, and a worker dropped while alive taken back.
#include "ps/exchange/shard.hpp"

#include <optional>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

void Shard::take_joins() {
  if (joins_ && joins_->pending()) {
    std::string error;
    std::vector<std::string> refused;
    const std::vector<MPI_Comm> comms = joins_->take(&refused, &error);
    if (!error.empty()) events_.log("mpi_trainer: warning: " + error);
    for (std::string& why : refused)
      events_.join_refused(
          PsEvents::JoinRefused{PsEvents::JoinRefused::Why::kUnauthenticated, -1, {}, std::move(why)});
    admit_connections(comms, false);
  }
  if (spawner_ && spawner_->pending()) {
    std::string error;
    const std::vector<MPI_Comm> comms = spawner_->take(&error);
    if (!error.empty()) events_.log("mpi_trainer: warning: " + error);
    admit_connections(comms, true);
  }
}

void Shard::admit_connections(const std::vector<MPI_Comm>& comms, bool replacements) {
  for (const MPI_Comm comm : comms) {
    const auto slot = members_.free_slot();
    if (stop_at_ || failure_code_ != 0 || step_ >= opts_.train_steps ||
        (opts_.max_workers > 0 && members_.live() >= opts_.max_workers) || !slot) {
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
      events_.join_refused(PsEvents::JoinRefused{failure_code_ != 0 ? Why::kFailed
                                                 : stop_at_ || step_ >= opts_.train_steps ? Why::kStopping
                                                                                          : Why::kFull,
                                                 -1,
                                                 {},
                                                 {}});
      continue;
    }
    // A replacement is billed as the worker whose slot it takes; a joiner at --instance-type.
    const auto s = static_cast<std::size_t>(*slot);
    const std::string& type =
        replacements && s < opts_.worker_types.size() ? opts_.worker_types[s] : opts_.join_type;
    Member& m = members_.add(shards_ + workers_ + connected_, comm, 0, *slot, type, Clock::now());
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
  ++(m.rejoined ? rejoined_ : joined_);  // joined_: new processes
  const int live = members_.live();
  policy_.joined(step_, live - 1, live);
  events_.join(PsEvents::Join{step_, m.rank, m.slot, m.type, live, policy_.lr_divisor(live), policy_.momentum(live),
                              m.rejoined});
}

void Shard::replace(const Member& gone) {
  std::string why_not;
  if (spawner_->request(&why_not)) {
    events_.log("mpi_trainer: starting a replacement for worker rank " + std::to_string(gone.rank) + " (data slot " +
                std::to_string(gone.slot) + ", --replace-workers) at global step " + std::to_string(step_));
  } else {
    events_.log("mpi_trainer: warning: no replacement for worker rank " + std::to_string(gone.rank) + ": " + why_not);
  }
}

void Shard::refill() {
  const int missing = members_.slots() - members_.live();
  int started = 0;
  std::string why_not;
  for (int i = 0; i < missing && spawner_->request(&why_not); ++i) ++started;
  if (started > 0)
    events_.log("mpi_trainer: starting " + std::to_string(started) + " replacement(s) for the data slot(s) no worker " +
                "holds (--replace-workers) at global step " + std::to_string(step_));
  if (started < missing) events_.log("mpi_trainer: warning: " + std::to_string(missing - started) +
                                     " data slot(s) left empty: " + why_not);
}

// A member no longer live spoke: a worker dropped for its silence while it was alive (drop keeps
// its push receive posted), or a replacement that gave its slot back (retired). The former's join
// (Worker::rejoin: it found it had been suspended past --failure-timeout) is taken back; a push it
// computed before it found out is not applied (its slot's data goes on from its cursor), and the
// receive is posted again. The latter's next message is answered with a stop (kRetiredEnd).
void Shard::heard_from_dropped(Member& m) {
  const MsgHeader h = m.recv.header();
  m.owes_reply = false;
  try {
    if (m.retired) {
      if ((h.kind == MsgKind::kJoin || h.kind == MsgKind::kPush) && wait_for(&m.sreq, opts_.failure_timeout))
        reply(m, MsgKind::kStop, kRetiredEnd);
      return;
    }
    if (h.kind == MsgKind::kJoin) return take_back(m, h);
    if (h.kind == MsgKind::kPush) irecv(m.recv, m.peer, kTagToPs, &m.rreq, m.comm);
  } catch (const ProcessFailed&) {  // ULFM: it died since: it stays dropped
    check_revoked();
  }
}

// The data slot a worker dropped while alive (`gone`) takes on its return, or none (it is
// refused): its own while no live member holds it, else a free one; a launched worker (one that can
// take the parameter server over, ULFM) takes its own back from the replacement spawned for it,
// which is retired (stopped at its next message). One shard only: with several, each dropped it
// on its own and their slots could disagree.
std::optional<int> Shard::slot_on_return(const Member& gone) {
  if (!lead() || shards_ > 1 || stop_at_ || failure_code_ != 0 || step_ >= opts_.train_steps) return std::nullopt;
  Member* holder = nullptr;
  for (Member& o : members_.members())
    if (o.live() && o.slot == gone.slot) holder = &o;
  if (!holder) return gone.slot;
  if (const auto free = members_.free_slot()) return free;
  if (gone.late || !holder->late || !spawner_) return std::nullopt;
  holder->retired = true;
  ++retired_;
  Membership::finished(*holder, Clock::now());
  events_.log("mpi_trainer: worker rank " + std::to_string(gone.rank) + " is back: its replacement in data slot " +
              std::to_string(gone.slot) + " (worker rank " + std::to_string(holder->rank) +
              ") gives the slot back and stops at its next message");
  return gone.slot;
}

// A dropped worker's join: it comes back as a new member (`rejoined`: numbered on like a joiner,
// counted as a join) in the slot slot_on_return gives, from that slot's cursor; refused (a stop)
// when there is none. Its messages go through MPI from now on (its join offers no segment).
void Shard::take_back(Member& gone, const MsgHeader& join) {
  abandon(std::move(gone.recv));  // its receive completed with this join: the member ends here
  const std::optional<int> slot = slot_on_return(gone);
  Member& m = members_.add(gone.rank, gone.comm, gone.peer, slot.value_or(gone.slot), gone.type, Clock::now());
  m.late = gone.late;
  m.rejoined = true;
  give_buffers(m);
  m.recv.header() = join;
  m.recv.header().payload = 0;
  if (slot) m.cursor = coord_->cursor(m.slot);
  events_.log("mpi_trainer: worker rank " + std::to_string(m.rank) + ", dropped at --failure-timeout, asks to rejoin " +
              "at global step " + std::to_string(step_) + ": " +
              (slot ? "taken back in data slot " + std::to_string(m.slot)
                    : std::string("refused (") +
                          (stop_at_ || step_ >= opts_.train_steps ? "training is over" : "no data slot for it") + ")"));
  try {
    if (!slot) {
      if (reply(m, MsgKind::kStop)) Membership::finished(m, Clock::now());
      return;
    }
    handle_worker(m);  // the join: answered with the parameters, its slot and cursor
    if (m.live()) irecv(m.hb, m.peer, kTagHeartbeat, &m.hbreq, m.comm);
  } catch (const ProcessFailed&) {  // ULFM: it died since
    check_revoked();
    if (m.live()) drop(m, /*lost=*/true, kUlfmReported);
  }
}

bool Shard::awaiting_workers() const {
  if (stop_at_ || failure_code_ != 0 || step_ >= opts_.train_steps) return false;
  return opts_.max_workers > 0 || (spawner_ && spawner_->outstanding() > 0);
}

}  // namespace mt
