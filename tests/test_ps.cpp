// The parameter-server runtime's parts that need no MPI job: membership transitions, the failure
// detector on a fake clock, the learning-rate / momentum policy, snapshot consistency, shard 0's
// cadence of progress reports, checkpoints and evaluations, the standbys' bookkeeping, a
// surviving shard's options after a takeover, and the wire's bf16 values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "ps/exchange/cadence.hpp"
#include "ps/exchange/membership.hpp"
#include "ps/inject/fault_injection.hpp"
#include "ps/ps.hpp"
#include "ps/wire/partition.hpp"
#include "ps/wire/precision.hpp"
#include "ps/exchange/push_check.hpp"
#include "ps/exchange/snapshot.hpp"
#include "ps/resilience/standbys.hpp"
#include "ps/exchange/update_policy.hpp"

using namespace mt;
using namespace std::chrono_literals;

namespace {

Membership::Deadlines deadlines() { return Membership::Deadlines{1.5, 60.0, 10.0}; }
const Clock::time_point t0{std::chrono::seconds(1000)};  // a fake clock: nothing here reads the real one

}  // namespace

TEST_CASE("membership: a worker joins, pushes, and finishes", "[unit][ps]") {
  Membership ms(2, deadlines());
  Member& m = ms.add(1, MPI_COMM_WORLD, 1, 0, "k80", t0);
  CHECK(m.state == MemberState::kJoining);
  CHECK(ms.live() == 1);
  CHECK_FALSE(m.working());
  Membership::heard(m, t0 + 1s);
  Membership::joined(m, t0 + 1s, /*stopping=*/false);
  CHECK(m.state == MemberState::kActive);
  CHECK(m.seconds_active(t0 + 4s) == Approx(3.0));
  Membership::finished(m, t0 + 11s);
  CHECK(m.state == MemberState::kFinished);
  CHECK(m.active_seconds == Approx(10.0));
  CHECK(m.seconds_active(t0 + 100s) == Approx(10.0));  // fixed once it is no longer live
  CHECK(ms.live() == 0);
}

TEST_CASE("membership: a lost worker never comes back as the same member", "[unit][ps]") {
  Membership ms(2, deadlines());
  Member& a = ms.add(1, MPI_COMM_WORLD, 1, 0, "k80", t0);
  ms.add(2, MPI_COMM_WORLD, 2, 1, "k80", t0);
  Membership::heard(a, t0 + 1s);
  Membership::joined(a, t0 + 1s, false);
  Membership::heard(a, t0 + 5s);
  Membership::departed(a, /*lost=*/true, t0 + 7s);
  CHECK(a.state == MemberState::kLost);
  CHECK(a.active_seconds == Approx(4.0));  // billed until its last sign of life, not until noticed
  CHECK(ms.lost() == 1);
  CHECK(ms.live() == 1);
  // Final: no transition leads out of lost.
  CHECK_THROWS_AS(Membership::joined(a, t0 + 8s, false), Error);
  CHECK_THROWS_AS(Membership::finished(a, t0 + 8s), Error);
  CHECK_THROWS_AS(Membership::departed(a, false, t0 + 8s), Error);
  CHECK_FALSE(ms.overdue(a, t0 + 1000s, std::nullopt));  // the detector ignores it
  // Its data slot is free again; a replacement is a new member.
  REQUIRE(ms.free_slot() == 0);
  Member& b = ms.add(3, MPI_COMM_WORLD, 0, *ms.free_slot(), "p100", t0 + 9s);
  CHECK(&b != &a);
  CHECK(a.state == MemberState::kLost);
  CHECK(b.state == MemberState::kJoining);
  CHECK(ms.members().size() == 3);
  CHECK_FALSE(ms.free_slot());
  // Stale pushes dropped stay counted after their worker is lost.
  a.dropped = 2;
  b.dropped = 1;
  CHECK(ms.dropped_stale() == 3);
}

TEST_CASE("membership: a notice drains the workers; one that left is billed until it left", "[unit][ps]") {
  Membership ms(3, deadlines());
  Member& a = ms.add(1, MPI_COMM_WORLD, 1, 0, "k80", t0);
  Member& b = ms.add(2, MPI_COMM_WORLD, 2, 1, "k80", t0);
  Member& c = ms.add(3, MPI_COMM_WORLD, 3, 2, "k80", t0);
  Membership::joined(a, t0 + 1s, false);
  Membership::joined(b, t0 + 1s, false);
  ms.drain();
  CHECK(a.state == MemberState::kDraining);
  CHECK(b.state == MemberState::kDraining);
  CHECK(c.state == MemberState::kJoining);  // not joined yet: drains when it joins
  Membership::joined(c, t0 + 2s, /*stopping=*/true);
  CHECK(c.state == MemberState::kDraining);
  CHECK(ms.live() == 3);
  Membership::finished(a, t0 + 3s);
  Membership::departed(b, /*lost=*/false, t0 + 4s);
  CHECK(b.state == MemberState::kLeft);
  CHECK(b.active_seconds == Approx(3.0));
  CHECK(ms.left() == 1);
  CHECK(ms.live() == 1);
}

TEST_CASE("membership: a join takes the lowest free data slot", "[unit][ps]") {
  Membership ms(3, deadlines());
  Member& a = ms.add(1, MPI_COMM_WORLD, 1, 0, "k80", t0);
  ms.add(2, MPI_COMM_WORLD, 2, 1, "k80", t0);
  CHECK(ms.free_slot() == 2);
  ms.add(3, MPI_COMM_WORLD, 0, 2, "k80", t0);
  CHECK_FALSE(ms.free_slot());
  Membership::departed(a, true, t0 + 1s);
  CHECK(ms.free_slot() == 0);
  CHECK_THROWS_AS(ms.add(9, MPI_COMM_WORLD, 0, 3, "k80", t0), Error);  // no such slot
}

TEST_CASE("failure detector: fires after the timeout and not before, on a fake clock", "[unit][ps][fault]") {
  Membership ms(2, deadlines());
  Member& m = ms.add(1, MPI_COMM_WORLD, 1, 0, "k80", t0);
  // Never heard: the start-up grace (60 s) from when it appeared.
  CHECK_FALSE(ms.overdue(m, t0 + 59s, std::nullopt));
  CHECK_FALSE(ms.overdue(m, t0 + 60s, std::nullopt));
  CHECK(ms.overdue(m, t0 + 60s + 1ms, std::nullopt) == std::optional<std::string>("never joined"));
  // Heard: --failure-timeout (1.5 s) from its last sign of life.
  Membership::heard(m, t0 + 10s);
  CHECK_FALSE(ms.overdue(m, t0 + 11s, std::nullopt));
  CHECK_FALSE(ms.overdue(m, t0 + 11500ms, std::nullopt));
  CHECK(ms.overdue(m, t0 + 11501ms, std::nullopt) ==
        std::optional<std::string>("no push or heartbeat within --failure-timeout"));
  Membership::heard(m, t0 + 11s);  // a heartbeat resets the clock
  CHECK_FALSE(ms.overdue(m, t0 + 12s, std::nullopt));
  // A joiner's grace counts from when it connected, not from the shard's start.
  Member& late = ms.add(5, MPI_COMM_WORLD, 0, 1, "k80", t0 + 100s);
  CHECK_FALSE(ms.overdue(late, t0 + 101s, std::nullopt));
  // Stopping: every member must be gone within --drain-deadline (10 s) of the stop.
  const auto stop = t0 + 11s;
  Membership::heard(m, t0 + 20s);
  CHECK_FALSE(ms.overdue(m, t0 + 21s, stop));
  CHECK(ms.overdue(m, t0 + 21001ms, stop) == std::optional<std::string>("did not stop within --drain-deadline"));
}

TEST_CASE("update policy: learning rate scaled by active workers or staleness", "[unit][ps]") {
  LrSchedule constant;
  constant.kind = LrSchedule::Kind::kConstant;
  constant.base_lr = 0.1;
  const UpdatePolicy active(constant, LrScaling::kActiveWorkers, MomentumCorrection::kNone, 0.9);
  CHECK(active.lr(5, 4, 7) == Approx(0.025));
  CHECK(active.lr(5, 0, 7) == Approx(0.1));  // no worker counted: never divide by 0
  CHECK(active.lr_divisor(4) == 4);
  const UpdatePolicy stale(constant, LrScaling::kStaleness, MomentumCorrection::kNone, 0.9);
  CHECK(stale.lr(5, 4, 3) == Approx(0.025));
  CHECK(stale.lr_divisor(4) == 1);
  const UpdatePolicy root(constant, LrScaling::kSqrtStaleness, MomentumCorrection::kDana, 0.9);
  CHECK(root.lr(5, 4, 3) == Approx(0.05));  // 0.1 / sqrt(1 + 3)
  CHECK(root.lr(5, 4, 0) == 0.1);           // a fresh push: the schedule's rate, exactly
  CHECK(std::string(to_string(parse_lr_scaling("sqrt-staleness"))) == "sqrt-staleness");
  const UpdatePolicy none(constant, LrScaling::kNone, MomentumCorrection::kNone, 0.9);
  CHECK(none.lr(5, 4, 3) == Approx(0.1));
  // The schedule itself still applies: step decay at its boundaries.
  LrSchedule step;
  step.boundaries = {10};
  const UpdatePolicy stepped(step, LrScaling::kActiveWorkers, MomentumCorrection::kNone, 0.9);
  CHECK(stepped.lr(10, 2, 0) == Approx(0.005));
}

TEST_CASE("update policy: gap-aware penalties follow how far each parameter moved", "[unit][ps]") {
  LrSchedule constant;
  constant.kind = LrSchedule::Kind::kConstant;
  constant.base_lr = 0.1;
  const UpdatePolicy gap(constant, LrScaling::kGap, MomentumCorrection::kDana, 0.9);
  CHECK(gap.gap_aware());
  CHECK(gap.lr(0, 4, 7) == Approx(0.1));  // the rate is left alone: each element is penalized instead
  std::vector<float> mean_step(3, 0.f);  // the caller's storage (the parameter server's optimizer state)
  GapPenalty p(mean_step, 0.5);
  // No history: a parameter that moved since the pull gets the staleness rule, one that did not, none.
  std::vector<float> g{1, 1, 1};
  const std::vector<float> now{1.0f, 2.0f, 3.0f}, pulled{1.0f, 1.5f, 3.0f};
  p.penalize(g, now, pulled, 3);
  CHECK(g == std::vector<float>{1.0f, 0.25f, 1.0f});
  // Steps of 0.1, 0.2 and 0 per update: C follows them (the first one is taken whole).
  const std::vector<float> a{0, 0, 0}, b{0.1f, -0.2f, 0}, c{0.2f, -0.4f, 0};
  p.track(a, b);
  p.track(b, c);
  CHECK(p.mean_step()[0] == Approx(0.1));
  CHECK(p.mean_step()[1] == Approx(0.2));
  CHECK(p.mean_step()[2] == 0.0f);
  CHECK(p.mean_step().data() == mean_step.data());
  // A parameter 4 steps away from where the gradient was computed is penalized 4 times; one that
  // went back and forth (gap under one step) not at all.
  g = {1, 1, 1};
  const std::vector<float> here{0.4f, 0.1f, 0}, there{0, 0, 0};
  p.penalize(g, here, there, 3);
  CHECK(g[0] == Approx(0.25));
  CHECK(g[1] == Approx(1.0));
  CHECK(g[2] == Approx(1.0));
  CHECK(parse_lr_scaling("gap") == LrScaling::kGap);
  CHECK(std::string(to_string(LrScaling::kGap)) == "gap");
}

TEST_CASE("push check: the penalty's pass sums the squares; non-finite values and outliers are rejected", "[unit][ps]") {
  // The sum of squares comes from the gradient as it came, before the penalty divided it.
  std::vector<float> mean_step(4, 0.f);
  const GapPenalty gap(mean_step, 0.5);
  std::vector<float> g{3, 4, 0, 12};
  const std::vector<float> now{1, 2, 3, 4}, pulled{1, 1, 3, 4};
  CHECK(gap.penalize(g, now, pulled, 3) == 169.0);
  CHECK(g[1] == 1.0f);  // 4 / (1 + staleness 3)
  CHECK(sum_of_squares(std::vector<float>{3, 4, 12}) == 169.0);
  // In double, no finite float overflows it; any NaN or infinity makes it non-finite.
  const float big = std::numeric_limits<float>::max();
  CHECK(std::isfinite(sum_of_squares(std::vector<float>{big, big})));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> v(1000, 0.5f), w(1000, 0.f);
    v[777] = bad;
    CHECK_FALSE(std::isfinite(sum_of_squares(v)));
    std::vector<float> m(1000, 0.f);
    CHECK_FALSE(std::isfinite(GapPenalty(m).penalize(v, w, w, 1)));
  }
  PushCheck finite_only(0);
  CHECK(finite_only.judge(1e30, {}).empty());
  CHECK(finite_only.judge(std::nan(""), {}).find("not finite") != std::string::npos);
  const std::vector<float> bad_stats{1.f, std::numeric_limits<float>::infinity()};
  CHECK(finite_only.judge(1.0, bad_stats).find("BatchNorm") != std::string::npos);
  // The norm guard waits for a history, then rejects a push far above the median of the accepted.
  PushCheck guard(100);
  CHECK(guard.judge(1e12, {}).empty());  // no history yet: accepted (and remembered)
  for (std::size_t i = 1; i < PushCheck::kMinHistory; ++i) CHECK(guard.judge(2.0 * 2.0, {}).empty());  // norm 2
  CHECK(guard.judge(1e4 * 1e4, {}).find("is 5000 times the median 2") != std::string::npos);
  CHECK(guard.judge(201.0 * 201.0, {}).find("times the median") != std::string::npos);
  CHECK(guard.judge(200.0 * 200.0, {}).empty());  // 100 x the median: not above it
}

TEST_CASE("update policy: implicit momentum of asynchrony is subtracted", "[unit][ps]") {
  LrSchedule s;
  const UpdatePolicy p(s, LrScaling::kActiveWorkers, MomentumCorrection::kImplicit, 0.9);
  CHECK(p.momentum(1) == Approx(0.9));
  CHECK(p.momentum(2) == Approx(0.4));
  CHECK(p.momentum(4) == Approx(0.15));
  CHECK(p.momentum(20) == 0.0);  // never negative
  const UpdatePolicy off(s, LrScaling::kActiveWorkers, MomentumCorrection::kNone, 0.9);
  CHECK(off.momentum(4) == Approx(0.9));
  CHECK(parse_lr_scaling("active-workers") == LrScaling::kActiveWorkers);
  CHECK(std::string(to_string(parse_lr_scaling("staleness"))) == "staleness");
  CHECK_THROWS_AS(parse_lr_scaling("fast"), UsageError);
  CHECK_THROWS_AS(parse_momentum_correction("explicit"), UsageError);
}

TEST_CASE("update policy: dana gives every data slot its own Nesterov momentum", "[unit][ps]") {
  LrSchedule s;
  const UpdatePolicy p(s, LrScaling::kNone, MomentumCorrection::kDana, 0.9);
  CHECK(p.momentum(1) == Approx(0.9));
  CHECK(p.momentum(8) == Approx(0.9));  // not lowered: the look-ahead handles the staleness
  CHECK(p.per_slot_momentum());
  CHECK(p.nesterov(false));
  const UpdatePolicy implicit(s, LrScaling::kNone, MomentumCorrection::kImplicit, 0.9);
  CHECK_FALSE(implicit.per_slot_momentum());
  CHECK_FALSE(implicit.nesterov(false));
  CHECK(implicit.nesterov(true));
  CHECK(parse_momentum_correction("dana") == MomentumCorrection::kDana);
  CHECK(std::string(to_string(MomentumCorrection::kDana)) == "dana");
}

TEST_CASE("update policy: --momentum auto raises dana's momentum with more than 4 workers", "[unit][ps]") {
  LrSchedule s;
  const UpdatePolicy p(s, LrScaling::kGap, MomentumCorrection::kDana, 0.9, 0, true);
  CHECK(p.momentum_by_workers());
  for (int n : {0, 1, 2, 3, 4}) CHECK(p.momentum(n) == Approx(0.9));  // 4 and fewer: their best, 0.9
  CHECK(p.momentum(5) == Approx(0.92));
  CHECK(p.momentum(6) == Approx(1 - 0.4 / 6));
  CHECK(p.momentum(7) == Approx(1 - 0.4 / 7));
  // 8 applies exactly what --momentum 0.95 does (the runs bench/README.md measured).
  CHECK(static_cast<float>(p.momentum(8)) == 0.95f);
  CHECK(static_cast<float>(p.momentum(64)) == 0.95f);  // not raised past what was measured
  for (int n = 1; n < 12; ++n) CHECK(p.momentum(n + 1) >= p.momentum(n));
  // Only under the default policy, dana with the gap penalty, and only for auto.
  CHECK_FALSE(UpdatePolicy(s, LrScaling::kGap, MomentumCorrection::kDana, 0.9).momentum_by_workers());
  CHECK(UpdatePolicy(s, LrScaling::kGap, MomentumCorrection::kDana, 0.9).momentum(8) == Approx(0.9));
  CHECK(UpdatePolicy(s, LrScaling::kStaleness, MomentumCorrection::kDana, 0.9, 0, true).momentum(8) == Approx(0.9));
  CHECK(UpdatePolicy(s, LrScaling::kGap, MomentumCorrection::kNone, 0.9, 0, true).momentum(8) == Approx(0.9));
  CHECK(UpdatePolicy(s, LrScaling::kGap, MomentumCorrection::kImplicit, 0.9, 0, true).momentum(8) == Approx(0.025));
  // The start-up line says what is applied.
  CHECK(describe_momentum(MomentumCorrection::kDana, 0.9, 8, p.momentum(8)) ==
        ", Nesterov momentum 0.95 per worker (dana; --momentum auto: 0.9, raised with 8 workers)");
  CHECK(describe_momentum(MomentumCorrection::kDana, 0.9, 4, p.momentum(4)) == ", Nesterov momentum 0.9 per worker (dana)");
}

TEST_CASE("update policy: the rate warms up again after a join", "[unit][ps]") {
  LrSchedule constant;
  constant.kind = LrSchedule::Kind::kConstant;
  constant.base_lr = 0.1;
  UpdatePolicy p(constant, LrScaling::kNone, MomentumCorrection::kNone, 0.9, 100);
  CHECK(p.lr(50, 2, 1) == Approx(0.1));  // no join yet: no ramp
  p.joined(200, 2, 4);                   // 2 -> 4 workers at step 200: from half the rate
  CHECK(p.lr(200, 4, 3) == Approx(0.05));
  CHECK(p.lr(250, 4, 3) == Approx(0.075));
  CHECK(p.lr(300, 4, 3) == Approx(0.1));
  CHECK(p.lr(1000, 4, 3) == Approx(0.1));
  p.joined(250, 4, 5);  // mid-ramp (factor 0.75): starts from 0.75 * 4/5 = 0.6
  CHECK(p.join_factor(250) == Approx(0.6));
  CHECK(p.join_factor(300) == Approx(0.8));
  CHECK(p.join_factor(350) == Approx(1.0));
  p.joined(400, 0, 3);  // the first workers, or a shrink: no ramp
  p.joined(400, 3, 2);
  CHECK(p.join_factor(400) == 1.0);
  // It multiplies whatever the scaling gives; without --join-warmup a join changes nothing.
  UpdatePolicy active(constant, LrScaling::kActiveWorkers, MomentumCorrection::kNone, 0.9, 10);
  active.joined(0, 1, 2);
  CHECK(active.lr(0, 2, 1) == Approx(0.025));
  UpdatePolicy off(constant, LrScaling::kActiveWorkers, MomentumCorrection::kNone, 0.9);
  off.joined(0, 1, 2);
  CHECK(off.lr(0, 2, 1) == Approx(0.05));
}

TEST_CASE("snapshot: one momentum per data slot (dana) travels whole, with their mean", "[unit][ps]") {
  const Model model(parse_model("resnet8"));
  const Partition part(model.params(), 1);
  SnapshotGather gather(model, part, 60.0, 2);
  const auto n = static_cast<std::size_t>(part.floats(0));
  std::vector<float> params(n, 1.f), velocity(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    velocity[i] = 2.f;       // slot 0
    velocity[n + i] = 4.f;   // slot 1
  }
  FlatTensors stats(model.stats());
  gather.begin(kForCheckpoint, params, velocity, stats, SnapshotMeta{7, {LoaderCursor{}, LoaderCursor{}}, 1.0, 0.1, {}});
  REQUIRE(gather.arrived());
  const Snapshot s = gather.complete();
  REQUIRE(s.extra.slot_momenta.size() == 2);
  CHECK(s.extra.gap_mean_step == nullptr);
  std::vector<float> v0(n), v1(n), mean(n);
  part.pack(0, s.extra.slot_momenta[0], v0);
  part.pack(0, s.extra.slot_momenta[1], v1);
  part.pack(0, s.momentum, mean);
  CHECK(std::all_of(v0.begin(), v0.end(), [](float x) { return x == 2.f; }));
  CHECK(std::all_of(v1.begin(), v1.end(), [](float x) { return x == 4.f; }));
  CHECK(std::all_of(mean.begin(), mean.end(), [](float x) { return x == 3.f; }));
  // One buffer: no slot momenta.
  SnapshotGather single(model, part, 60.0);
  std::vector<float> one(n, 5.f);
  single.begin(kForCheckpoint, params, one, stats, SnapshotMeta{7, {LoaderCursor{}}, 1.0, 0.1, {}});
  REQUIRE(single.arrived());
  CHECK(single.complete().extra.slot_momenta.empty());
}

TEST_CASE("snapshot: the state at the request, not what the shard applied after it", "[unit][ps]") {
  ModelSpec spec = parse_model("resnet8");
  const Model model(spec);
  const Partition part(model.params(), 1);
  SnapshotGather gather(model, part, 60.0);
  const auto n = static_cast<std::size_t>(part.floats(0));
  std::vector<float> params(n), velocity(n);
  for (std::size_t i = 0; i < n; ++i) {
    params[i] = 0.5f * static_cast<float>(i);
    velocity[i] = -static_cast<float>(i);
  }
  FlatTensors stats(model.stats());
  stats.flat().fill(3.f);
  CHECK_FALSE(gather.gathering());
  gather.begin(kForCheckpoint | kForEval, params, velocity, stats,
               SnapshotMeta{42, {LoaderCursor{1, 7}, LoaderCursor{2, 3}}, 5.0, 0.1, {}});
  CHECK(gather.gathering());
  CHECK(gather.purposes() == (kForCheckpoint | kForEval));
  // The shard goes on updating while the snapshot is gathered (here: complete at once, one shard).
  for (auto& p : params)
    p += 1.f;
  stats.flat().fill(9.f);
  gather.defer(kForEval);
  REQUIRE(gather.arrived());
  const Snapshot s = gather.complete();
  CHECK_FALSE(gather.gathering());
  CHECK(gather.take_deferred() == kForEval);
  CHECK(gather.take_deferred() == 0u);
  CHECK(s.global_step == 42);
  REQUIRE(s.slot_cursors.size() == 2);
  CHECK(s.slot_cursors[1].epoch == 2);
  std::vector<float> packed(n), vpacked(n);
  part.pack(0, s.params, packed);
  part.pack(0, s.momentum, vpacked);
  bool same = true;
  for (std::size_t i = 0; i < n; ++i)
    same = same && packed[i] == 0.5f * static_cast<float>(i) && vpacked[i] == -static_cast<float>(i);
  CHECK(same);
  CHECK(s.bn_stats.flat().data()[0] == 3.f);
}

TEST_CASE("cadence: progress, checkpoints and evaluations fall due at their steps and seconds", "[unit][ps]") {
  PsOptions o;
  o.train_steps = 100;
  o.log_every_steps = 10;
  o.ckpt_every_steps = 25;
  o.eval_every_steps = 20;
  auto at = [&](std::int64_t step, bool stopping = false, double since_ckpt = 0) {
    return cadence_after_step(o, step, stopping, true, true, since_ckpt);
  };
  CHECK(at(10).progress);
  CHECK_FALSE(at(11).progress);
  CHECK(at(100).progress);  // the last step reports, whatever the interval
  CHECK(at(25).checkpoint);
  CHECK_FALSE(at(24).checkpoint);
  CHECK(at(40).eval);
  CHECK_FALSE(at(40).checkpoint);
  CHECK_FALSE(at(30).eval);
  // The last step and a stop under way take neither: the final checkpoint and evaluation follow.
  CHECK_FALSE(at(100).checkpoint);
  CHECK_FALSE(at(100).eval);
  CHECK(at(50, true).progress);
  CHECK_FALSE(at(50, true).checkpoint);
  CHECK_FALSE(at(60, true).eval);
  // --ckpt-every-seconds: due once the interval has passed, at any step.
  o.ckpt_every_seconds = 30;
  CHECK(at(7, false, 30.0).checkpoint);
  CHECK_FALSE(at(7, false, 29.9).checkpoint);
  // Nothing the sink does not take; an interval of 0 is never due; --log-every-steps 0 is every step.
  CHECK_FALSE(cadence_after_step(o, 25, false, false, false, 100).checkpoint);
  CHECK_FALSE(cadence_after_step(o, 40, false, false, false, 0).eval);
  o.eval_every_steps = 0;
  o.log_every_steps = 0;
  CHECK_FALSE(at(40).eval);
  CHECK(at(41).progress);
}

TEST_CASE("standbys: the lowest-ranked working workers, and why they changed", "[unit][ps]") {
  Membership ms(4, deadlines());
  Member& a = ms.add(2, MPI_COMM_WORLD, 2, 0, "k80", t0);
  Member& b = ms.add(3, MPI_COMM_WORLD, 3, 1, "k80", t0);
  Member& c = ms.add(4, MPI_COMM_WORLD, 4, 2, "k80", t0);
  CHECK(choose_standbys(ms, 1).empty());  // nobody has joined yet: nobody can hold a replica
  for (Member* m : {&a, &b, &c})
    Membership::joined(*m, t0 + 1s, false);
  auto ranks = [](const std::vector<ReplicaSender::Dest>& d) {
    std::vector<int> out;
    for (const auto& x : d)
      out.push_back(x.id);
    return out;
  };
  CHECK(ranks(choose_standbys(ms, 1)) == std::vector<int>{2});
  CHECK(ranks(choose_standbys(ms, 2)) == std::vector<int>{2, 3});
  CHECK(ranks(choose_standbys(ms, 5)) == std::vector<int>{2, 3, 4});  // no more than there are
  CHECK(choose_standbys(ms, 2).front().peer == 2);
  CHECK(standby_change({}, {2}, ms) == StandbyChange::kFirst);
  CHECK(standby_change({2}, {2}, ms) == StandbyChange::kNone);
  Membership::departed(a, /*lost=*/true, t0 + 5s);  // the standby is lost: the next one takes its place
  CHECK(ranks(choose_standbys(ms, 1)) == std::vector<int>{3});
  CHECK(standby_change({2}, {3}, ms) == StandbyChange::kGone);
  // Every standby still works, but another (lower-ranked, earlier member) is now chosen first.
  CHECK(standby_change({4}, {3}, ms) == StandbyChange::kLowerJoined);
  // A draining worker still holds replicas; a finished one does not.
  ms.drain();
  CHECK(ranks(choose_standbys(ms, 1)) == std::vector<int>{3});
  Membership::finished(b, t0 + 6s);
  CHECK(ranks(choose_standbys(ms, 1)) == std::vector<int>{4});
}

TEST_CASE("takeover: a surviving shard's options on the survivors' communicator", "[unit][ps]") {
  PsOptions o;
  o.num_ps = 2;
  o.ps_standby = 3;
  o.hand_over = true;
  // Two workers survive (launched ranks 3 and 5, data slots 1 and 0 of 3), the newest step seen 120.
  serve_survivors(o, MPI_COMM_SELF, {3, 5}, {1, 0}, 3, 120, 1);
  CHECK(o.comm == MPI_COMM_SELF);
  CHECK(o.worker_ranks == std::vector<int>{3, 5});
  CHECK(o.worker_slots == std::vector<int>{1, 0});
  CHECK(o.slots == 3);  // the data slots stay: a lost worker's slot waits for a join
  CHECK(o.first_step == 120);
  CHECK(o.self_rank == 1);
  CHECK(o.ps_standby == 2);  // no more standbys than workers
  CHECK(o.hand_over);
  serve_survivors(o, MPI_COMM_SELF, {}, {}, 3, 130, 1);  // no worker left: no standby, no handover
  CHECK(o.ps_standby == 0);
  CHECK_FALSE(o.hand_over);
}

TEST_CASE("push precision: bf16 rounds to nearest even, keeps NaN and infinities", "[unit][ps]") {
  const auto bf = [](float f) { return std::bit_cast<float>(std::uint32_t{to_bf16(std::bit_cast<std::uint32_t>(f))} << 16); };
  CHECK(bf(1.0f) == 1.0f);
  CHECK(bf(-2.5f) == -2.5f);
  // bf16 keeps 8 significant bits: 1 + 2^-7 is one step above 1. Half a step is a tie: to the even one.
  CHECK(bf(1.0f + 0x1p-8f) == 1.0f);
  CHECK(bf(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(bf(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);  // past the tie: up
  CHECK(bf(1.0f + 0x1p-8f - 0x1p-20f) == 1.0f);            // below it: down
  CHECK(std::isnan(bf(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(bf(std::bit_cast<float>(0x7f800001u))));  // a NaN whose payload sits in the low bits
  CHECK(bf(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(bf(-std::numeric_limits<float>::infinity()) == -std::numeric_limits<float>::infinity());
  CHECK(bf(std::numeric_limits<float>::max()) == std::numeric_limits<float>::infinity());  // rounds past the largest
  CHECK(bf(0.0f) == 0.0f);
  CHECK(std::signbit(bf(-0.0f)));
  CHECK(to_string(parse_push_precision("bf16")) == std::string("bf16"));
  CHECK_THROWS_AS(parse_push_precision("fp16"), UsageError);
}

TEST_CASE("push precision: two bf16 values per float slot, decoded as rounded; fp32 as it is", "[unit][ps]") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1000}}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i + 1)) * std::pow(10.f, float(i % 9) - 4);
    CHECK(wire_floats(PushPrecision::kBf16, std::int64_t(n)) == std::int64_t((n + 1) / 2));
    CHECK(wire_floats(PushPrecision::kFp32, std::int64_t(n)) == std::int64_t(n));
    std::vector<float> slots(static_cast<std::size_t>(wire_floats(PushPrecision::kBf16, std::int64_t(n))), -1.f);
    encode_values(PushPrecision::kBf16, x, slots.data());
    std::vector<float> back(n), rounded = x;
    decode_values(PushPrecision::kBf16, slots.data(), back);
    round_to_wire(PushPrecision::kBf16, rounded);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(std::memcmp(&back[i], &rounded[i], sizeof(float)) == 0);
      CHECK(std::abs(back[i] - x[i]) <= 0x1p-8f * std::abs(x[i]));  // half a step of 8 significant bits
    }
    std::vector<float> plain(n), plain_back(n);
    encode_values(PushPrecision::kFp32, x, plain.data());
    decode_values(PushPrecision::kFp32, plain.data(), plain_back);
    CHECK(plain_back == x);
  }
}

TEST_CASE("fault injection: --corrupt-push kinds, zero among them", "[unit][ps]") {
  const auto faults = parse_corrupt_push("rank=1@push=2:zero,rank=1@push=3:nan,rank=2@push=1:huge", 1);
  REQUIRE(faults.size() == 2);
  CHECK(faults.at(2) == PushFault::kZero);
  CHECK(faults.at(3) == PushFault::kNan);
  CHECK_THROWS_AS(parse_corrupt_push("rank=1@push=2:ones", 1), UsageError);
}

TEST_CASE("a replacement worker's command line: train becomes join, --revoke left out", "[unit][ps]") {
  using V = std::vector<std::string>;
  CHECK(mt::replacement_arguments(V{"train", "--model", "resnet8", "--revoke", "rank=2@step=5", "--ckpt-dir", "ck"}) ==
        V{"join", "--model", "resnet8", "--ckpt-dir", "ck"});
  CHECK(mt::replacement_arguments(V{"train", "--revoke=rank=0@30s", "--replace-workers"}) ==
        V{"join", "--replace-workers"});
  // Only the subcommand is renamed: a value that reads "train" stays.
  CHECK(mt::replacement_arguments(V{"train", "--metrics", "train"}) == V{"join", "--metrics", "train"});
}
