// The agreement of the survivors when a parameter-server shard is lost under ULFM (docs/
// fault-model.md, "Takeover under ULFM"). Every surviving process of the job, workers and the
// surviving shards alike, calls `agree_takeover` on the revoked communicator: it shrinks it to the
// survivors and, from what each of them offers, every one computes the same plan:
//   - the new shard 0 is the worker that holds the newest whole replica of the parameter server
//     (every shard's part; the lowest rank among equals): it starts the whole parameter server
//     from it, as a checkpoint, and hands each other shard its part;
//   - the surviving shards are shards 1..S-1 of the new parameter server, in their old order
//     (their parts may change: the partition is the same, the indexes move up by one where the
//     lost shard was before them); they wait for their part from the new shard 0;
//   - the other workers keep their data slots and cursors and join it;
//   - the global step counts on from the highest any survivor saw.
// No takeover (each caller then ends as without one: a worker exits 10, a standby writing its
// replica first, for the restart loop to resume from the newest checkpoint) when no survivor
// holds a whole replica, when more than one shard is lost at once, or when no worker would be
// left to train.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mt {

// What one survivor brings to the agreement.
struct SurvivorOffer {
  std::int64_t replica_step = -1;  // the global step of its whole replica (-1: none)
  std::int64_t seen_step = 0;      // the highest global step it knows of
  int rank = 0;                    // its rank in the launched job (the name in the reports)
  int shard = -1;                  // its shard index, or -1: a worker
  int slot = -1;                   // a worker's data slot
  int hung = -1;                   // the world rank of a hung shard it reported failed (ulfm_report_failed), or -1
};

struct TakeoverPlan {
  MPI_Comm comm = MPI_COMM_NULL;  // the survivors: the new shards at ranks 0..S-1, then the workers
  int shard = -1;                 // this process's new shard index, or -1: a worker
  int lead_rank = 0;              // the launched rank of the new shard 0 (the replica's holder)
  std::int64_t replica_step = 0;  // its replica's global step
  std::int64_t first_step = 0;    // the highest global step any survivor saw (never less than the replica's)
  std::vector<int> lost_shards;   // the old indexes of the shards lost
  std::vector<int> shard_ranks;   // the launched rank of each new shard
  std::vector<int> worker_ranks, worker_slots;  // each worker of `comm` (ranks S..): its name and data slot
  std::vector<int> hung;  // world ranks of the hung shards any survivor reported failed: ended at the end
};

// The plan computed from every survivor's offer (index = rank in the shrunk communicator), for
// `num_ps` shards. nullopt with `why` set when no takeover is possible. Pure: unit-tested.
std::optional<TakeoverPlan> plan_takeover(const std::vector<SurvivorOffer>& offers, int num_ps, int me,
                                          std::string* why);

// Collective over the survivors of the revoked `comm`: shrinks it, agrees on the plan and splits
// the survivors into its communicator (errors returned). nullopt with `why`: no takeover (the
// survivors' communicator is freed). Throws ProcessFailed when another process fails meanwhile.
// What each survivor hands the new shard 0 (ps/resilience/push_journal.hpp): a worker its push journal, a
// surviving shard its own part's state (PartState).
struct SurvivorData {
  std::string journal, state;
};
// `data`: this survivor's; the new shard 0 gets every survivor's, one after another, in `gathered`.
std::optional<TakeoverPlan> agree_takeover(MPI_Comm comm, const SurvivorOffer& mine, int num_ps, std::string* why,
                                           const SurvivorData& data = {}, SurvivorData* gathered = nullptr);

}  // namespace mt
