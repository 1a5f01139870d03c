// What keeps an asynchronous run stable: the start-up warm-up that follows the worker count and
// the spike guard (ps/exchange/spike_guard.hpp, RateStability, chosen by app/run_setup.hpp's rate_stability).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "app/run_setup.hpp"
#include "core/rng.hpp"
#include "ps/exchange/spike_guard.hpp"
#include "ps/exchange/update_policy.hpp"

using namespace mt;

namespace {

LrSchedule constant_schedule() {
  LrSchedule s;
  s.kind = LrSchedule::Kind::kConstant;
  s.base_lr = 0.1;
  return s;
}

constexpr double kNoCap = std::numeric_limits<double>::infinity();

// `n` pushes of a loss around `level` (uniform noise of +-`noise`) at rate 0.1; the number of cuts.
int feed(SpikeGuard& g, Rng& rng, int n, double level, double noise) {
  int cuts = 0;
  for (int i = 0; i < n; ++i)
    cuts += g.observe(level + noise * (2 * rng.uniform() - 1), 4, 0.1) ? 1 : 0;
  return cuts;
}

}  // namespace

TEST_CASE("spike guard: steady or falling losses never cut the rate", "[unit][ps]") {
  Rng rng(7);
  SpikeGuard g(true);
  CHECK(feed(g, rng, 5000, 1.0, 0.15) == 0);  // noisy at 1.0
  // Falling from there towards zero as a healthy run does, with batch noise.
  for (int i = 0; i < 2000; ++i)
    CHECK_FALSE(g.observe(std::exp(-i / 300.0) + 0.05 * rng.uniform(), 4, 0.1));
  CHECK(feed(g, rng, 5000, 0.02, 0.02) == 0);  // near zero, relative noise of 100%
  CHECK(g.cap() == kNoCap);
  CHECK(g.cuts() == 0);
}

TEST_CASE("spike guard: a jump caps the rate at half of it, once per jump, and the cap lifts", "[unit][ps]") {
  Rng rng(3);
  SpikeGuard g(true);
  CHECK(feed(g, rng, 300, 0.02, 0.01) == 0);
  // The blow-up seen at lr 0.06 with 4 workers: 0.02 to 2.8 within ten steps.
  int at = -1;
  for (int i = 0; i < 10 && at < 0; ++i)
    if (g.observe(0.02 * std::pow(1.6, i + 1), 4, 0.06)) at = i;
  REQUIRE(at >= 0);
  CHECK(0.02 * std::pow(1.6, at + 1) < 1.0);  // caught while the loss is still below 1
  CHECK(g.cap() == Approx(0.03));
  CHECK(g.last_cut().cap == Approx(0.03));
  CHECK(g.last_cut().recent_loss > 1.5 * g.last_cut().usual_loss);
  // The pushes computed before the cut still arrive high: no second cut for them (2 x 4 pushes).
  for (int i = 0; i < 8; ++i) CHECK_FALSE(g.observe(1.5, 4, 0.1));
  // Still climbing after that: halved again, from the cap (the schedule's 0.1 is above it).
  CHECK(feed(g, rng, 3, 4.0, 0.0) == 1);
  CHECK(g.cap() == Approx(0.015).epsilon(0.01));
  CHECK(g.cuts() == 2);
  // Calm again: the cap doubles in about 700 pushes.
  feed(g, rng, 200, 0.3, 0.02);
  feed(g, rng, 500, 0.1, 0.02);
  CHECK(g.cap() > 0.028);
  CHECK(g.cap() < 0.032);
  CHECK(g.cuts() == 2);
}

TEST_CASE("spike guard: off, or a non-finite loss, changes nothing", "[unit][ps]") {
  SpikeGuard off;
  for (int i = 0; i < 50; ++i) CHECK_FALSE(off.observe(i < 40 ? 0.01 : 100.0, 4, 0.1));
  CHECK(off.cap() == kNoCap);
  SpikeGuard on(true);
  for (int i = 0; i < 50; ++i) on.observe(0.5, 4, 0.1);
  CHECK_FALSE(on.observe(std::nan(""), 4, 0.1));  // --max-loss stops the run on it
  CHECK(on.cap() == kNoCap);
}

TEST_CASE("update policy: the start-up warm-up follows the worker count, over the schedule's own", "[unit][ps]") {
  TrainConfig c;
  CHECK(rate_stability(c, 4).start_warmup == 200);
  CHECK(rate_stability(c, 8).start_warmup == 400);
  CHECK(rate_stability(c, 1).start_warmup == 0);  // one worker: no asynchrony
  CHECK(rate_stability(c, 4).spike_guard);
  c.lr_warmup_steps = 0;  // the user's choice wins, none included
  c.spike_guard = "off";
  CHECK(rate_stability(c, 4).start_warmup == 0);
  CHECK_FALSE(rate_stability(c, 4).spike_guard);

  const LrSchedule constant = constant_schedule();
  UpdatePolicy p(constant, LrScaling::kNone, MomentumCorrection::kNone, 0.9);
  CHECK(p.lr(0, 4, 0) == Approx(0.1));  // not stabilized: the schedule's rate
  p.stabilize({200, false});
  CHECK(p.lr(0, 4, 0) == Approx(0.1 / 200));
  CHECK(p.lr(99, 4, 3) == Approx(0.05));
  CHECK(p.lr(199, 4, 3) == Approx(0.1));
  CHECK(p.lr(5000, 4, 3) == Approx(0.1));  // a resume past it: the full rate
  // A schedule with a warm-up of its own: the longer one applies, not both.
  LrSchedule warm = constant;
  warm.warmup_steps = 100;
  UpdatePolicy q(warm, LrScaling::kNone, MomentumCorrection::kNone, 0.9);
  q.stabilize({200, false});
  CHECK(q.lr(49, 4, 0) == Approx(0.1 * 50 / 200));
  CHECK(q.lr(149, 4, 0) == Approx(0.1 * 150 / 200));
  q.stabilize({50, false});  // shorter than the schedule's: the schedule's
  CHECK(q.lr(49, 4, 0) == Approx(0.1 * 50 / 100));
  CHECK(describe_stability({200, true}, constant) == ", warm-up 200 steps (50 per worker), spike guard");
  CHECK(describe_stability({50, false}, warm).empty());
  CHECK(describe_stability({150, false}, warm) == ", warm-up lengthened to 150 steps (50 per worker)");
}

TEST_CASE("update policy: the spike guard's cap holds while a warm-up rises under it", "[unit][ps]") {
  const LrSchedule constant = constant_schedule();
  UpdatePolicy p(constant, LrScaling::kStaleness, MomentumCorrection::kNone, 0.9);
  p.stabilize({200, true});
  for (int i = 0; i < 100; ++i) CHECK_FALSE(p.observe_loss(i, 0.05, 2));
  bool cut = false;
  std::int64_t step = 100;
  for (; step < 105 && !cut; ++step) cut = p.observe_loss(step, 3.0, 2);
  REQUIRE(cut);
  const double cap = 0.5 * 0.1 * double(step) / 200;  // half the warm-up's rate at the jump
  CHECK(p.guard().cap() == Approx(cap));
  CHECK(p.lr(step, 2, 1) == Approx(cap / 2));    // capped, then staleness-scaled as before
  CHECK(p.lr(199, 2, 0) == Approx(cap));         // the warm-up reaches 0.1: the cap holds
  CHECK(describe_cut(101, p.guard().last_cut()).find("step 101: the training loss jumped to") != std::string::npos);
}
