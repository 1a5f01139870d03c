// run_ps (ps/ps.hpp): the shard's life, through the takeovers it follows (ULFM).
#include "ps/exchange/shard.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/recovery.hpp"
#include "ps/wire/mpi_env.hpp"

namespace mt {

namespace {

// A shard superseded by a takeover, with its options: MPI may still hold its buffers (requests
// on the revoked communicator are never completed), so it is kept until the process ends, which
// it does without MPI_Finalize or static destructors (main's std::_Exit: PsResult::takeovers).
struct Superseded {
  std::unique_ptr<PsOptions> opts;
  std::unique_ptr<Shard> shard;
};
std::vector<Superseded> superseded;

}  // namespace

// A shard that survives the loss of another follows the takeover (ps/resilience/recovery.hpp): it agrees
// with the other survivors, then runs again as shard k >= 1 of the new parameter server, on the
// survivors' communicator, with its part of the replica the new shard 0 starts from.
void serve_survivors(PsOptions& o, MPI_Comm comm, std::vector<int> worker_ranks, std::vector<int> worker_slots,
                     int data_slots, std::int64_t first_step, int self_rank) {
  o.comm = comm;
  o.worker_ranks = std::move(worker_ranks);
  o.worker_slots = std::move(worker_slots);
  o.slots = data_slots;
  o.first_step = first_step;
  o.self_rank = self_rank;
  o.ps_standby = std::min(o.ps_standby, static_cast<int>(o.worker_ranks.size()));
  o.hand_over = o.hand_over && o.ps_standby > 0;
}

PsResult run_ps(const PsOptions& opts, const Model& model, const LrSchedule& schedule, Backend& update, FaultPlan plan,
                PsEvents& events, SnapshotSink& sink) {
  auto o = std::make_unique<PsOptions>(opts);
  int takeovers = 0;
  for (;;) {
    auto shard = std::make_unique<Shard>(*o, model, schedule, update, std::move(plan), events, sink);
    try {
      PsResult r = shard->run();
      r.takeovers = takeovers;
      return r;
    } catch (const ShardTakeover&) {
    }
    plan = shard->release_plan();
    const SurvivorOffer mine{-1, shard->step(), shard->self(), shard->index(), -1};
    std::string state;  // this shard's own part, for the new parameter server to start it from
    append_part_state(state, shard->part_state());
    const int slots = shard->slots();
    const bool was_lead = shard->index() == 0;
    const MPI_Comm comm = o->comm;
    auto next_opts = std::make_unique<PsOptions>(*o);
    superseded.push_back(Superseded{std::move(o), std::move(shard)});
    ++takeovers;
    std::string why;
    std::optional<TakeoverPlan> next;
    try {
      next = agree_takeover(comm, mine, next_opts->num_ps, &why, SurvivorData{{}, std::move(state)});
    } catch (const ProcessFailed&) {
      why = "another process failed during the takeover";
    }
    if (!next) {
      // The survivors end as without a takeover: the restart loop resumes from the newest
      // checkpoint (or a standby's replica).
      const std::string what = "parameter-server shard " + std::to_string(mine.shard) +
                               ": another shard is lost and cannot be taken over (" + why + "): exit " +
                               std::to_string(kExitPsLost);
      if (was_lead) {
        events.failed(mine.seen_step, kExitPsLost, what);
      } else {
        events.log("mpi_trainer: " + what);
      }
      PsResult lost;
      lost.global_step = mine.seen_step;
      lost.exit_code = kExitPsLost;
      lost.takeovers = takeovers;
      return lost;
    }
    serve_survivors(*next_opts, next->comm, next->worker_ranks, next->worker_slots, slots, next->first_step, mine.rank);
    events.followed(PsEvents::Followed{mine.shard, mine.rank, next->shard, next->lead_rank, next->lost_shards,
                                       next->first_step, next->replica_step});
    o = std::move(next_opts);
  }
}

}  // namespace mt
