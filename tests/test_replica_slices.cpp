// ps/resilience/replica.hpp's paced slices against a fake standby: this process itself over
// MPI_COMM_SELF (the singleton MPI of mt_ps_transport_tests). A replica goes in slices, a few after
// each update, and the standby assembles it whole; one given up midway is dropped for the next.
#include <mpi.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "nn/resnet.hpp"
#include "ps/resilience/push_journal.hpp"
#include "ps/resilience/replica.hpp"
#include "ps/resilience/replica_pacing.hpp"
#include "ps/resilience/standbys.hpp"
#include "ps/wire/partition.hpp"

using namespace mt;

namespace {

// What the one shard of a resnet8 job with one data slot sends: its parameters, one state buffer
// (the momentum), its table of pushes handled, the BatchNorm statistics and the progress record.
struct ShardState {
  Model model{parse_model("resnet8")};
  Partition part{model.params(), 1};
  std::vector<float> params, momentum, handled, stats;
  std::string record = "the app's progress record";
  explicit ShardState(float v)
      : params(static_cast<std::size_t>(part.floats(0)), v),
        momentum(static_cast<std::size_t>(part.floats(0)), -v),
        handled(2),
        stats(static_cast<std::size_t>(model.stats().total()), v / 2) {
    const std::vector<std::int64_t> last{7};
    handled_to_floats(last, handled);
  }
  std::vector<std::span<const float>> pieces() const { return {params, momentum, handled, stats}; }
  std::int64_t floats() const {
    return static_cast<std::int64_t>(2 * params.size() + handled.size() + stats.size() + (record.size() + 3) / 4);
  }
};

const std::vector<ReplicaSender::Dest> kStandby{{1, MPI_COMM_SELF, 0}};

void check_holds(const ReplicaHost& host, const ShardState& s, std::int64_t step) {
  const auto r = host.assemble(s.model, s.part, 1);
  REQUIRE(r);
  CHECK(r->global_step == step);
  CHECK(r->record == s.record);
  REQUIRE(r->state.size() == 1);
  std::vector<float> p(s.params.size()), m(s.params.size());
  s.part.pack(0, r->params, p);
  s.part.pack(0, r->state[0], m);
  CHECK(p == s.params);
  CHECK(m == s.momentum);
  REQUIRE(r->handled.size() == 1);
  CHECK(r->handled[0] == std::vector<std::int64_t>{7});
}

// Updates until every slice of the replica in flight was sent (the first went with it), the
// standby polling before each: until its last slice it holds what it held before (`before` at
// `step`, or nothing).
int pace_out(ReplicaSender& sender, ReplicaHost& host, const ShardState* before = nullptr, std::int64_t step = 0) {
  int updates = 1;
  for (; sender.pacing(); ++updates) {
    host.poll(MPI_COMM_SELF);
    if (before) {
      check_holds(host, *before, step);
    } else {
      CHECK_FALSE(host.any());
    }
    sender.pace(kStandby);
  }
  host.poll(MPI_COMM_SELF);
  return updates;
}

}  // namespace

TEST_CASE("replica: a standby assembles it whole from slices sent a few after each update", "[mpi][ps][replica]") {
  ShardState s(0.25f);
  const std::int64_t reply = static_cast<std::int64_t>(s.params.size());  // fp32: the parameters
  const std::int64_t slices = replica_slices(s.floats()), each = replica_slices_per_update(s.floats(), 10, reply);
  REQUIRE(slices == 11);  // resnet8's parameters and momentum: 151 K floats, 60 KB a slice
  REQUIRE(each == 2);     // spread over 9 updates of the 10
  ReplicaSender sender(10, 1.0);
  ReplicaHost host(1);
  CHECK(host.newest_step(0) == -1);  // what its pushes tell the shard: none yet
  sender.send(100, 1, s.pieces(), s.record, kStandby, reply);
  CHECK(pace_out(sender, host) == 6);  // 2 slices after each of 6 updates
  REQUIRE(host.any());
  CHECK(sender.ready(kStandby));  // every slice sent and through: the next may go
  CHECK(sender.settled_step() == 100);
  check_holds(host, s, 100);
  CHECK(host.newest_step(0) == 100);
  // The next replica replaces it only once whole.
  ShardState later(0.75f);
  sender.send(110, 1, later.pieces(), later.record, kStandby, reply);
  host.poll(MPI_COMM_SELF);
  CHECK(host.newest_step(0) == 100);  // its first slices only
  pace_out(sender, host, &s, 100);
  check_holds(host, later, 110);
  CHECK(host.newest_step(0) == 110);
  CHECK(replica_age_at_most(s.floats(), 10, reply) == 15);  // the interval, and 5 updates of slices after the first
  CHECK(replica_age_at_most(1000, 10, reply) == 10);        // one slice: sent whole
  // A replica of 28 messages (dana's momenta of 26 workers): no more after an update than its
  // reply (5 slices of 60 KB beside 301 KB), over 29 updates: the next after them, 28 apart, not
  // 10; bf16 replies: 2.
  const std::int64_t big = 28 * reply;
  CHECK(replica_slices_per_update(big, 10, reply) == 5);
  CHECK(replica_interval_paced(big, 10, reply) == 28);
  CHECK(replica_age_at_most(big, 10, reply) == 56);
  CHECK(replica_slices_per_update(big, 10, reply / 2) == 2);
  CHECK(replica_interval_paced(s.floats(), 10, reply / 2) == 10);  // 11 slices, 2 after each update: within 10
}

TEST_CASE("replica: one given up midway is dropped, the standby keeps the one before until the next is whole",
          "[mpi][ps][replica]") {
  ShardState first(0.25f), cut(0.5f), next(0.75f);
  const std::int64_t reply = static_cast<std::int64_t>(first.params.size());
  ReplicaSender sender(10, 1.0);
  ReplicaHost host(1);
  sender.send(100, 1, first.pieces(), first.record, kStandby, reply);
  pace_out(sender, host);
  REQUIRE(sender.ready(kStandby));
  // Two of the next one's slices reach the standby; then it is no longer a standby (another took
  // its place): the rest goes to none, and the replica is given up.
  sender.send(110, 1, cut.pieces(), cut.record, kStandby, reply);
  host.poll(MPI_COMM_SELF);
  const std::vector<ReplicaSender::Dest> other{{2, MPI_COMM_SELF, 0}};
  CHECK(sender.ready(other));
  CHECK_FALSE(sender.pacing());
  CHECK(sender.settled_step() == 100);
  check_holds(host, first, 100);
  // It is the standby again: the next replica, whole, replaces the first; nothing of the cut one.
  sender.send(120, 1, next.pieces(), next.record, kStandby, reply);
  pace_out(sender, host, &first, 100);
  check_holds(host, next, 120);
}

// What a shard's replies tell the workers' push journals they need not keep (ReplicaSender's
// settled step is when the sends completed: the kernel holds the bytes, which on a full link may
// not cross it for a while): only a replica every standby of the last one said, in its pushes,
// it holds whole.
TEST_CASE("replica: the replies' replica step is one every standby said it holds", "[ps][replica]") {
  const std::vector<int> one{1}, two{1, 2};
  CHECK(confirmed_replica_step(-1, one, {}) == -1);            // none sent
  CHECK(confirmed_replica_step(100, one, {}) == -1);           // sent, the standby said nothing yet
  CHECK(confirmed_replica_step(100, one, {{1, 90}}) == 90);    // it holds the one before
  CHECK(confirmed_replica_step(100, one, {{1, 100}}) == 100);  // it holds this one
  CHECK(confirmed_replica_step(100, one, {{1, 110}}) == 100);  // never past what has left
  CHECK(confirmed_replica_step(100, two, {{1, 100}}) == -1);   // a new standby that holds none yet
  CHECK(confirmed_replica_step(100, two, {{1, 100}, {2, 90}}) == 90);
  CHECK(confirmed_replica_step(100, {}, {}) == 100);  // no standby named (no replica in the log yet)
}
