// ps/wire/ulfm: the parts that need no MPI_Init (the unit tests run without MPI). In this build
// without ULFM every answer is the no-op one; the configure-time probe decides which build it is.
#include <catch2/catch.hpp>

#include "ps/wire/ulfm.hpp"

using namespace mt;

TEST_CASE("ulfm: success and ordinary MPI errors are not process failures", "[ulfm]") {
  CHECK_FALSE(ulfm_is_proc_failed(MPI_SUCCESS));
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_OTHER));
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_COMM));
}

TEST_CASE("ulfm: without ULFM, unavailable and no failed ranks", "[ulfm]") {
  if (ulfm_available()) {
    SUCCEED("built with ULFM: covered by the MPI launches, not here");
    return;
  }
  CHECK_FALSE(ulfm_available());
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_OTHER));
  // Without ULFM no MPI call is made, so MPI need not be initialised.
  CHECK(ulfm_failed_ranks(MPI_COMM_WORLD).empty());
}

// ps/resilience/recovery: the plan every survivor computes from the same offers (docs/fault-model.md,
// "Takeover under ULFM"). Offers: {replica step, seen step, launched rank, shard (-1: worker), slot,
// hung shard reported (world rank, -1 when none; default)}.
#include "ps/resilience/recovery.hpp"

TEST_CASE("takeover plan: one shard, the newest replica's holder becomes the parameter server", "[ulfm][takeover]") {
  // PS (rank 0) lost; workers 1..3 survive, ranks 2 and 3 hold replicas of steps 150 and 151.
  const std::vector<SurvivorOffer> offers{{-1, 157, 1, -1, 0}, {150, 158, 2, -1, 1}, {151, 157, 3, -1, 2}};
  std::string why;
  for (int me = 0; me < 3; ++me) {
    const auto plan = plan_takeover(offers, 1, me, &why);
    REQUIRE(plan);
    CHECK(plan->lead_rank == 3);
    CHECK(plan->replica_step == 151);
    CHECK(plan->first_step == 158);  // the highest any survivor saw: never back
    CHECK(plan->lost_shards == std::vector<int>{0});
    CHECK(plan->shard_ranks == std::vector<int>{3});
    CHECK(plan->worker_ranks == std::vector<int>{1, 2});
    CHECK(plan->worker_slots == std::vector<int>{0, 1});
    CHECK(plan->shard == (me == 2 ? 0 : -1));
    CHECK(plan->hung.empty());
  }
  // A hung PS (world rank 0) that two of them reported failed: every survivor learns of it once,
  // to have the runtime end it when its own part is done.
  const std::vector<SurvivorOffer> hung{{-1, 157, 1, -1, 0, 0}, {150, 158, 2, -1, 1, -1}, {151, 157, 3, -1, 2, 0}};
  for (int me = 0; me < 3; ++me) CHECK(plan_takeover(hung, 1, me, &why)->hung == std::vector<int>{0});
}

TEST_CASE("takeover plan: one shard of three lost, the survivors follow the replica's holder", "[ulfm][takeover]") {
  // Shards 0 and 2 survive (ranks 0, 2), shard 1 (rank 1) is lost; workers 3..5, rank 3 the standby.
  // Listed as the shrunk communicator orders them: by launched rank.
  const std::vector<SurvivorOffer> offers{
      {-1, 160, 0, 0, -1}, {-1, 159, 2, 2, -1}, {155, 158, 3, -1, 0}, {-1, 158, 4, -1, 1}, {-1, 157, 5, -1, 2}};
  std::string why;
  const auto lead = plan_takeover(offers, 3, 2, &why);
  REQUIRE(lead);
  CHECK(lead->shard == 0);
  CHECK(lead->lost_shards == std::vector<int>{1});
  CHECK(lead->shard_ranks == std::vector<int>{3, 0, 2});  // new shards 0, 1, 2
  CHECK(lead->worker_ranks == std::vector<int>{4, 5});
  CHECK(lead->worker_slots == std::vector<int>{1, 2});
  CHECK(lead->first_step == 160);
  CHECK(plan_takeover(offers, 3, 0, &why)->shard == 1);  // the old shard 0 follows as shard 1
  CHECK(plan_takeover(offers, 3, 1, &why)->shard == 2);
  CHECK(plan_takeover(offers, 3, 4, &why)->shard == -1);
}

TEST_CASE("takeover plan: none without a whole replica, with two shards lost, or with no worker left", "[ulfm][takeover]") {
  std::string why;
  CHECK_FALSE(plan_takeover({{-1, 10, 1, -1, 0}, {-1, 10, 2, -1, 1}}, 1, 0, &why));
  CHECK(why == "no survivor holds a whole replica of the parameter server");
  CHECK_FALSE(plan_takeover({{-1, 10, 0, 0, -1}, {30, 10, 3, -1, 0}, {-1, 10, 4, -1, 1}}, 3, 0, &why));
  CHECK(why == "2 parameter-server shards lost at once (a takeover replaces one)");
  CHECK_FALSE(plan_takeover({{-1, 10, 0, 0, -1}, {30, 10, 2, -1, 0}}, 2, 1, &why));
  CHECK(why == "no other worker survives to train");
  CHECK_FALSE(plan_takeover({{-1, 10, 0, 0, -1}, {30, 10, 1, -1, 0}, {-1, 10, 2, -1, 1}}, 1, 1, &why));
  CHECK(why == "no parameter-server shard is lost");
}
