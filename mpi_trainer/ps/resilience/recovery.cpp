#include "ps/resilience/recovery.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

std::optional<TakeoverPlan> plan_takeover(const std::vector<SurvivorOffer>& offers, int num_ps, int me,
                                          std::string* why) {
  MT_ASSERT(me >= 0 && me < static_cast<int>(offers.size()) && num_ps >= 1, "a survivor among the offers");
  auto fail = [&](std::string text) -> std::optional<TakeoverPlan> {
    if (why) *why = std::move(text);
    return std::nullopt;
  };
  std::vector<int> shards;  // indexes into offers, by old shard index
  int chosen = -1;
  for (int i = 0; i < static_cast<int>(offers.size()); ++i) {
    const SurvivorOffer& o = offers[static_cast<std::size_t>(i)];
    if (o.shard >= 0) {
      shards.push_back(i);
    } else if (o.replica_step >= 0 &&
               (chosen < 0 || o.replica_step > offers[static_cast<std::size_t>(chosen)].replica_step)) {
      chosen = i;  // the newest replica; the lowest rank among equals (the first found)
    }
  }
  std::sort(shards.begin(), shards.end(), [&](int a, int b) {
    return offers[static_cast<std::size_t>(a)].shard < offers[static_cast<std::size_t>(b)].shard;
  });
  TakeoverPlan plan;
  for (int k = 0; k < num_ps; ++k)
    if (std::none_of(shards.begin(), shards.end(),
                     [&](int i) { return offers[static_cast<std::size_t>(i)].shard == k; }))
      plan.lost_shards.push_back(k);
  if (plan.lost_shards.empty()) return fail("no parameter-server shard is lost");
  if (plan.lost_shards.size() > 1)
    return fail(std::to_string(plan.lost_shards.size()) +
                " parameter-server shards lost at once (a takeover replaces one)");
  if (chosen < 0) return fail("no survivor holds a whole replica of the parameter server");
  const int workers = static_cast<int>(offers.size()) - static_cast<int>(shards.size()) - 1;
  if (workers < 1) return fail("no other worker survives to train");
  const SurvivorOffer& lead = offers[static_cast<std::size_t>(chosen)];
  plan.lead_rank = lead.rank;
  plan.replica_step = lead.replica_step;
  plan.first_step = lead.replica_step;
  for (const SurvivorOffer& o : offers)
    plan.first_step = std::max(plan.first_step, o.seen_step);
  plan.shard_ranks.push_back(lead.rank);
  if (me == chosen) plan.shard = 0;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    plan.shard_ranks.push_back(offers[static_cast<std::size_t>(shards[k])].rank);
    if (shards[k] == me) plan.shard = static_cast<int>(k) + 1;
  }
  for (const SurvivorOffer& o : offers)
    if (o.hung >= 0 && std::find(plan.hung.begin(), plan.hung.end(), o.hung) == plan.hung.end())
      plan.hung.push_back(o.hung);
  std::sort(plan.hung.begin(), plan.hung.end());
  for (int i = 0; i < static_cast<int>(offers.size()); ++i) {
    const SurvivorOffer& o = offers[static_cast<std::size_t>(i)];
    if (i == chosen || o.shard >= 0) continue;
    plan.worker_ranks.push_back(o.rank);
    plan.worker_slots.push_back(o.slot);
  }
  return plan;
}

namespace {

// Every survivor's bytes to rank 0 of `comm` (the new shard 0), as floats (4-byte aligned).
std::string gather_bytes(MPI_Comm comm, const std::string& log) {
  int me = 0, n = 0;
  MT_MPI(MPI_Comm_rank(comm, &me));
  MT_MPI(MPI_Comm_size(comm, &n));
  MT_ASSERT(log.size() % sizeof(float) == 0 && log.size() / sizeof(float) < (1u << 31), "bytes in floats");
  const int mine = static_cast<int>(log.size() / sizeof(float));
  std::vector<int> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  MT_MPI(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));  // each sees the total
  std::int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (total + counts[static_cast<std::size_t>(i)] >= (std::int64_t{1} << 31))
      throw Error(kExitInternal, "what the survivors hand the new parameter server exceeds 8 GiB");
    offsets[static_cast<std::size_t>(i)] = static_cast<int>(total);
    total += counts[static_cast<std::size_t>(i)];
  }
  std::string all(me == 0 ? static_cast<std::size_t>(total) * sizeof(float) : 0, '\0');
  MT_MPI(MPI_Gatherv(log.data(), mine, MPI_FLOAT, all.data(), counts.data(), offsets.data(), MPI_FLOAT, 0, comm));
  return all;
}

}  // namespace

std::optional<TakeoverPlan> agree_takeover(MPI_Comm comm, const SurvivorOffer& mine, int num_ps, std::string* why,
                                           const SurvivorData& data, SurvivorData* gathered) {
  MPI_Comm shrunk = ulfm_shrink(comm);
  int me = 0, n = 0;
  MT_MPI(MPI_Comm_rank(shrunk, &me));
  MT_MPI(MPI_Comm_size(shrunk, &n));
  constexpr int kFields = 6;
  const std::int64_t mine_fields[kFields] = {mine.replica_step, mine.seen_step, mine.rank,
                                             mine.shard,        mine.slot,      mine.hung};
  std::vector<std::int64_t> all(static_cast<std::size_t>(kFields * n));
  MT_MPI(MPI_Allgather(mine_fields, kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, shrunk));
  std::vector<SurvivorOffer> offers;
  for (int i = 0; i < n; ++i) {
    const std::int64_t* f = all.data() + static_cast<std::ptrdiff_t>(kFields * i);
    offers.push_back(SurvivorOffer{f[0], f[1], static_cast<int>(f[2]), static_cast<int>(f[3]), static_cast<int>(f[4]),
                                   static_cast<int>(f[5])});
  }
  std::optional<TakeoverPlan> plan = plan_takeover(offers, num_ps, me, why);
  if (!plan) {
    MT_MPI(MPI_Comm_free(&shrunk));
    return plan;
  }
  // The new order: shard 0 (the replica's holder), the surviving shards, then the workers.
  int key = 0;
  if (plan->shard >= 0) {
    key = plan->shard;
  } else {
    const auto it = std::find(plan->worker_ranks.begin(), plan->worker_ranks.end(), mine.rank);
    MT_ASSERT(it != plan->worker_ranks.end(), "this worker in the plan");
    key = num_ps + static_cast<int>(it - plan->worker_ranks.begin());
  }
  MT_MPI(MPI_Comm_split(shrunk, 0, key, &plan->comm));
  MT_MPI(MPI_Comm_set_errhandler(plan->comm, MPI_ERRORS_RETURN));
  MT_MPI(MPI_Comm_free(&shrunk));
  SurvivorData handed{gather_bytes(plan->comm, data.journal), gather_bytes(plan->comm, data.state)};
  if (gathered) *gathered = std::move(handed);
  return plan;
}

}  // namespace mt
