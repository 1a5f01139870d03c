// A shard's side of elastic joins (ps/exchange/shard.hpp): the connections the listener accepted
// (ps/elastic/joins.hpp) taken in as members, and a late joiner admitted.
#include "ps/exchange/shard.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

void Shard::take_joins() {
  std::string error;
  std::vector<std::string> refused;
  const std::vector<MPI_Comm> comms = joins_->take(&refused, &error);
  if (!error.empty()) events_.log("mpi_trainer: warning: " + error);
  for (std::string& why : refused)
    events_.join_refused(PsEvents::JoinRefused{PsEvents::JoinRefused::Why::kUnauthenticated, -1, {}, std::move(why)});
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
      events_.join_refused(PsEvents::JoinRefused{failure_code_ != 0 ? Why::kFailed
                                                 : stop_at_         ? Why::kStopping
                                                                    : Why::kFull,
                                                 -1,
                                                 {},
                                                 {}});
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

}  // namespace mt
