// A shard's side of elastic joins (ps/exchange/shard.hpp): the connections the listener accepted
// (ps/elastic/joins.hpp) and the replacements the spawner started (ps/elastic/replacements.hpp)
// taken in as members, and a late joiner admitted.
#include "ps/exchange/shard.hpp"

#include <string>
#include <vector>

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
  ++joined_;
  const int live = members_.live();
  policy_.joined(step_, live - 1, live);
  events_.join(PsEvents::Join{step_, m.rank, m.slot, m.type, live, policy_.lr_divisor(live), policy_.momentum(live)});
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

bool Shard::awaiting_workers() const {
  if (stop_at_ || failure_code_ != 0 || step_ >= opts_.train_steps) return false;
  return opts_.max_workers > 0 || (spawner_ && spawner_->outstanding() > 0);
}

}  // namespace mt
