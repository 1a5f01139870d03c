// The push journal (ps/resilience/push_journal.hpp): what a worker keeps, when it lets go, how it travels and
// in which order a takeover replays it. The replay itself (bit for bit the lost shard's state) is
// checked end to end by tests/test_fault_ps_standby.sh under ULFM.
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "ps/resilience/push_journal.hpp"

using namespace mt;

namespace {

// A push of `floats` payload values to each of `shards` shards, value v + s.
void record(PushJournal& j, int shards, int slot, std::int64_t id, std::int64_t version, float v,
            std::size_t floats = 5) {
  j.record(slot, id);
  for (int s = 0; s < shards; ++s) {
    MsgHeader h;
    h.kind = MsgKind::kPush;
    h.push_id = id;
    h.model_version = version;
    const std::vector<float> payload(floats, v + float(s)), pulled(floats - 1, -v - float(s));
    j.part(s, h, payload, pulled);
  }
}

MsgHeader reply(std::int64_t id, std::int64_t step, std::int64_t replica_step, bool applied = true) {
  MsgHeader h;
  h.push_id = id;
  h.kind = MsgKind::kParams;
  h.step = step;
  h.replica_step = replica_step;
  h.applied = applied ? 1 : 0;
  h.lr = 0.05f;
  h.momentum = 0.9f;
  return h;
}

}  // namespace

TEST_CASE("push journal: an entry stays until every shard reports a replica holding it", "[ps][journal]") {
  PushJournal j(2);
  record(j, 2, 1, 1, 0, 1.f);
  j.acknowledge(0, reply(1, 11, 10));
  j.acknowledge(1, reply(1, 12, 12));  // shard 0's replica (10) is older than its step 11: kept
  CHECK(j.entries() == 1);
  record(j, 2, 1, 2, 11, 2.f);
  j.acknowledge(0, reply(1, 13, 11));  // a reply naming the previous push (left in the buffer): not this one's
  j.acknowledge(1, reply(2, 14, 14));
  CHECK(j.entries() == 2);
  j.acknowledge(0, reply(2, 13, 11));  // now shard 0's replica holds the first push (11), not the second (13)
  CHECK(j.entries() == 1);
  const std::size_t one = j.bytes();
  CHECK(one > 2 * (5 + 4) * sizeof(float));
  CHECK(j.peak_bytes() == 2 * one);
  // A reply whose replica holds everything lets every entry go.
  record(j, 2, 1, 3, 13, 3.f);
  j.acknowledge(0, reply(3, 15, 15));
  j.acknowledge(1, reply(3, 16, 16));
  CHECK(j.entries() == 0);
  CHECK(j.bytes() == 0);
}

TEST_CASE("push journal: what a takeover receives is what was sent, field for field", "[ps][journal]") {
  PushJournal j(2);
  record(j, 2, 3, 7, 40, 0.25f);
  j.acknowledge(0, reply(7, 42, -1, false));
  // shard 1 never answered (lost with its reply in flight)
  const std::string bytes = j.take();
  CHECK(j.entries() == 0);
  CHECK(bytes.size() % sizeof(float) == 0);
  const std::vector<LoggedPush> all = parse_push_journal(bytes);
  REQUIRE(all.size() == 2);
  const LoggedPush& a = all[0];
  CHECK(a.part == 0);
  CHECK(a.slot == 3);
  CHECK(a.push_id == 7);
  CHECK(a.acked);
  CHECK_FALSE(a.applied);
  CHECK(a.step == 42);
  CHECK(a.lr == 0.05f);
  CHECK(a.momentum == 0.9f);
  REQUIRE(a.message.size() == static_cast<std::size_t>(kHeaderFloats) + 5);
  MsgHeader h;
  std::memcpy(static_cast<void*>(&h), a.message.data(), sizeof h);
  CHECK(h.push_id == 7);
  CHECK(h.model_version == 40);
  CHECK(a.message.back() == 0.25f);
  CHECK(a.pulled == std::vector<float>(4, -0.25f));
  CHECK(all[1].part == 1);
  CHECK_FALSE(all[1].acked);
  CHECK(all[1].message.back() == 1.25f);
}

TEST_CASE("push journal: a replay skips what the replica holds, acknowledged pushes first by step", "[ps][journal]") {
  std::vector<LoggedPush> all;
  const auto add = [&](int part, int slot, std::int64_t id, bool acked, std::int64_t step) {
    LoggedPush p;
    p.part = part;
    p.slot = slot;
    p.push_id = id;
    p.acked = acked;
    p.step = step;
    all.push_back(p);
  };
  add(0, 1, 5, true, 23);
  add(0, 0, 9, true, 21);  // handled by the replica (slot 0 up to 9): left out
  add(0, 0, 10, true, 22);
  add(0, 2, 4, false, 0);  // no reply: after the acknowledged, by slot
  add(0, 1, 6, false, 0);
  add(1, 1, 5, true, 30);  // another part
  add(0, 1, 5, false, 0);  // the same push twice (never expected): once, where acknowledged
  const std::vector<std::int64_t> handled{9, 4, 3};
  const std::vector<LoggedPush> order = replay_order(all, 0, handled, 21);
  std::vector<std::pair<int, std::int64_t>> got;
  for (const auto& p : order)
    got.emplace_back(p.slot, p.push_id);
  CHECK(got == std::vector<std::pair<int, std::int64_t>>{{0, 10}, {1, 5}, {1, 6}, {2, 4}});
  CHECK(order[1].acked);
  CHECK(replay_order(all, 1, handled, 21).size() == 1);
  CHECK(replay_order(all, 1, std::vector<std::int64_t>{0, 5, 0}, 21).empty());
}

// A push the lost shard applied but never answered left a step no acknowledged push made: the
// replay fills it with a push without a reply that can have made it (computed on older
// parameters), so the new shard makes every step the lost one made, in its order.
TEST_CASE("push journal: a step no acknowledged push made is filled by a push whose reply never came",
          "[ps][journal]") {
  std::vector<LoggedPush> all;
  const auto add = [&](int slot, std::int64_t id, bool acked, std::int64_t step, std::int64_t version) {
    LoggedPush p;
    p.slot = slot;
    p.push_id = id;
    p.acked = acked;
    p.step = step;
    MsgHeader h;
    h.model_version = version;
    p.message.resize(static_cast<std::size_t>(kHeaderFloats));
    std::memcpy(p.message.data(), &h, sizeof h);
    all.push_back(p);
  };
  // From the replica of step 50: steps 51, 52, 54, 55 acknowledged; 53 and 56 made by the pushes
  // of slots 0 and 2 whose replies never came (computed on 50 and 54); slot 3's, computed on 55,
  // cannot have made 53.
  add(1, 20, true, 51, 49);
  add(1, 21, true, 52, 51);
  add(1, 22, true, 54, 52);
  add(1, 23, true, 55, 54);
  add(0, 7, false, 0, 50);
  add(2, 9, false, 0, 54);
  add(3, 4, false, 0, 55);
  std::vector<std::pair<int, std::int64_t>> got;
  for (const auto& p : replay_order(all, 0, std::vector<std::int64_t>{0, 19, 0, 0}, 50))
    got.emplace_back(p.slot, p.push_id);
  CHECK(got == std::vector<std::pair<int, std::int64_t>>{{1, 20}, {1, 21}, {0, 7}, {1, 22}, {1, 23}, {2, 9}, {3, 4}});
  // A step none can have made (a push lost with its worker) stays a gap: the one computed on 54
  // does not fill step 53.
  all.erase(all.begin() + 4);
  got.clear();
  for (const auto& p : replay_order(all, 0, std::vector<std::int64_t>{0, 19, 0, 0}, 50))
    got.emplace_back(p.slot, p.push_id);
  CHECK(got == std::vector<std::pair<int, std::int64_t>>{{1, 20}, {1, 21}, {1, 22}, {1, 23}, {2, 9}, {3, 4}});
}

TEST_CASE("push journal: a cut or malformed journal is an error, never a crash", "[ps][journal]") {
  PushJournal j(1);
  record(j, 1, 0, 1, 0, 1.f);
  const std::string bytes = j.take();
  CHECK(parse_push_journal({}).empty());
  for (std::size_t cut : {std::size_t{1}, std::size_t{8}, bytes.size() / 2, bytes.size() - 4})
    CHECK_THROWS_AS(parse_push_journal(std::string_view(bytes).substr(0, cut)), Error);
  std::string bad = bytes;
  bad[0] = char(0xff);  // a negative part
  bad[1] = bad[2] = bad[3] = char(0xff);
  CHECK_THROWS_AS(parse_push_journal(bad), Error);
}

TEST_CASE("push journal: a replica's table of pushes handled travels as floats, bit for bit", "[ps][journal]") {
  const std::vector<std::int64_t> handled{0, 1, std::numeric_limits<std::int64_t>::max(), 123456789012345};
  std::vector<float> f(2 * handled.size());
  handled_to_floats(handled, f);
  CHECK(handled_from_floats(f) == handled);
}

TEST_CASE("push journal: past its bound the oldest pushes go (a standby that never takes a replica)", "[ps][journal]") {
  PushJournal j(1, 4000);  // two pushes of this size (1788 bytes each)
  for (std::int64_t id = 1; id <= 5; ++id) {
    record(j, 1, 0, id, 0, float(id), 200);
    j.acknowledge(0, reply(id, id, -1));  // no replica ever reported
  }
  CHECK(j.entries() == 2);
  CHECK(j.dropped() == 3);
  CHECK(j.bytes() <= 4000);
  const std::vector<LoggedPush> left = parse_push_journal(j.take());
  REQUIRE(left.size() == 2);
  CHECK(left[0].push_id == 4);
  CHECK(left[1].push_id == 5);
  CHECK(j.bytes() == 0);
}

TEST_CASE("push journal: a surviving shard's part travels whole, a cut one is an error", "[ps][journal]") {
  PartState s;
  s.part = 1;
  s.step = 158;
  s.handled = {3, 7};
  s.params = {0.5f, -1.f};
  s.state = {1.f, 2.f, 3.f, 4.f};
  std::string bytes;
  append_part_state(bytes, s);
  append_part_state(bytes, PartState{});
  const std::vector<PartState> back = parse_part_states(bytes);
  REQUIRE(back.size() == 2);
  CHECK(back[0].part == 1);
  CHECK(back[0].step == 158);
  CHECK(back[0].handled == s.handled);
  CHECK(back[0].params == s.params);
  CHECK(back[0].state == s.state);
  CHECK(back[0].stats.empty());
  for (std::size_t cut = 1; cut < bytes.size(); cut += 7)
    CHECK_THROWS_AS(parse_part_states(std::string_view(bytes).substr(0, cut)), Error);
}

TEST_CASE("push journal: a dropped worker's last push, never acknowledged, is forgotten when it rejoins",
          "[ps][journal]") {
  PushJournal j(1);
  record(j, 1, 2, 1, 0, 1.f);
  j.acknowledge(0, reply(1, 5, 0));  // acknowledged, no replica holds it yet: kept for a takeover
  record(j, 1, 2, 2, 5, 2.f);        // sent while the shard was dropping this worker: never answered
  REQUIRE(j.entries() == 2);
  const std::size_t before = j.bytes();
  j.forget_unacknowledged();
  CHECK(j.entries() == 1);
  CHECK(j.bytes() < before);
  j.forget_unacknowledged();  // the acknowledged one stays
  CHECK(j.entries() == 1);
  const std::vector<LoggedPush> left = parse_push_journal(j.take());
  REQUIRE(left.size() == 1);
  CHECK(left[0].push_id == 1);
  CHECK(left[0].acked);
  PushJournal empty(1);
  empty.forget_unacknowledged();
  CHECK(empty.entries() == 0);
}
