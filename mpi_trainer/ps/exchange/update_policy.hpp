// How an asynchronous push is applied: the learning rate and momentum for the number of active
// workers and the push's staleness (the paper's Fig. 5: adapt to the active workers). The one
// place these formulas live.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "optim/schedule.hpp"
#include "ps/exchange/spike_guard.hpp"
#include "ps/options.hpp"

namespace mt {

// The job log's line when the spike guard capped the rate at global step `step`.
std::string describe_cut(std::int64_t step, const SpikeGuard::Cut& cut);

// The start-up line's words for the momentum: ", momentum 0.9 (applied with 4 workers: 0.150)",
// ", Nesterov momentum 0.9 per worker (dana)", ", Nesterov momentum 0.95 per worker (dana;
// --momentum auto: 0.9, raised with 8 workers)" or ", momentum 0.9". `applied`: UpdatePolicy::momentum
// with `workers` active.
std::string describe_momentum(MomentumCorrection correction, double momentum, int workers, double applied);

// --momentum auto applies, and the momentum follows the worker count, only under the default
// policy: dana with the gap penalty (UpdatePolicy::momentum_by_workers). The one test of it, for
// the policy and for the reports that print what it applied.
inline bool momentum_follows_workers(bool momentum_auto, MomentumCorrection correction, LrScaling scaling) {
  return momentum_auto && correction == MomentumCorrection::kDana && scaling == LrScaling::kGap;
}

class UpdatePolicy {
 public:
  // `momentum_by_workers`: --momentum auto (momentum_by_workers below).
  UpdatePolicy(const LrSchedule& schedule, LrScaling scaling, MomentumCorrection correction, double momentum,
               std::int64_t join_warmup = 0, bool momentum_by_workers = false)
      : schedule_(schedule),
        scaling_(scaling),
        correction_(correction),
        momentum_(momentum),
        join_warmup_(join_warmup),
        by_workers_(momentum_by_workers) {}

  // The rate for a push applied at `step` by one of `active` workers, computed on parameters
  // `staleness` updates old: the schedule's rate divided by the active workers (active-workers)
  // or by 1 + staleness (staleness) or its square root (sqrt-staleness), times the start-up
  // warm-up and the warm-up after a join, at most the spike guard's cap (RateStability).
  double lr(std::int64_t step, int active, double staleness) const {
    double lr = capped_lr(step);
    if (scaling_ == LrScaling::kActiveWorkers)
      lr /= std::max(1, active);
    else if (scaling_ == LrScaling::kStaleness)
      lr /= 1.0 + staleness;
    else if (scaling_ == LrScaling::kSqrtStaleness)
      lr /= std::sqrt(1.0 + staleness);
    return lr;  // kGap: each element's own penalty (GapPenalty), not the rate
  }
  bool gap_aware() const { return scaling_ == LrScaling::kGap; }
  // What the rate is divided by for the worker count alone (reports).
  double lr_divisor(int active) const { return scaling_ == LrScaling::kActiveWorkers ? std::max(1, active) : 1; }
  // The momentum applied with `active` workers: --momentum less the implicit momentum of their
  // asynchrony, 1 - 1/N (Mitliagkas et al. 2016), under --momentum-correction implicit; under
  // dana with the gap penalty and --momentum auto, raised with more than 4 workers
  // (momentum_by_workers); else as given (under dana each data slot has its own momentum buffer:
  // per_slot_momentum).
  double momentum(int active) const {
    if (momentum_by_workers()) return 1.0 - (1.0 - momentum_) * 4.0 / std::clamp(active, 4, 8);
    if (correction_ != MomentumCorrection::kImplicit || active <= 1) return momentum_;
    return std::max(0.0, momentum_ - (1.0 - 1.0 / active));
  }
  // --momentum auto under the default policy (dana + gap): with N > 4 active workers the distance
  // of the momentum to 1 shrinks by 4/N, at most to half (N >= 8): 0.9 up to 4 workers, 0.92 with
  // 5, 0.95 with 8 or more. Measured (bench/README.md, "Speed-up"; 20 epochs, 3 seeds): 8 workers
  // reach one worker's target accuracy 6.77x sooner with 0.95 where 0.9 gave 5.33x; 4 and fewer
  // keep 0.9, their best; 5 to 7 are interpolated, and more than 8 stay at 0.95 (not measured).
  bool momentum_by_workers() const { return momentum_follows_workers(by_workers_, correction_, scaling_); }
  // --momentum-correction dana (DANA, Hakimi et al. 2019, "Taming Momentum in a Distributed
  // Asynchronous Environment"): every worker's pushes (its data slot's) go through their own
  // Nesterov momentum buffer, so the parameters a worker is sent already carry every worker's
  // momentum step ahead, and a stale gradient is computed near where it is applied.
  bool per_slot_momentum() const { return correction_ == MomentumCorrection::kDana; }
  bool nesterov(bool configured) const { return configured || per_slot_momentum(); }
  const LrSchedule& schedule() const { return schedule_; }

  void stabilize(const RateStability& s) {
    start_warmup_ = s.start_warmup;
    guard_ = SpikeGuard(s.spike_guard);
  }
  // Each applied push's training loss, before the push at `step` is applied: true when the spike
  // guard capped the rate.
  bool observe_loss(std::int64_t step, double loss, int active) {
    return guard_.observe(loss, active, capped_lr(step));
  }
  const SpikeGuard& guard() const { return guard_; }
  // The schedule's rate at `step` times the start-up and join warm-ups, at most the guard's cap:
  // before any scaling for the workers or the staleness.
  double capped_lr(std::int64_t step) const {
    return std::min(schedule_.lr_at(step) * start_factor(step) * join_factor(step), guard_.cap());
  }
  // The start-up warm-up's factor at `step`, over what the schedule's own warm-up applies.
  double start_factor(std::int64_t step) const {
    if (start_warmup_ <= schedule_.warmup_steps) return 1.0;
    const auto ramp = [step](std::int64_t n) { return n > 0 ? std::min(1.0, double(step + 1) / double(n)) : 1.0; };
    return ramp(start_warmup_) / ramp(schedule_.warmup_steps);
  }

  // --join-warmup: the active workers grew from `before` to `after` at global step `step`. For the
  // next join_warmup steps the rate is multiplied by a factor that rises linearly from
  // before/after to 1 (the grown cluster starts at the rate per worker it had; a join during a
  // ramp starts from the factor reached).
  void joined(std::int64_t step, int before, int after) {
    if (join_warmup_ <= 0 || after <= before || before <= 0) return;
    ramp_from_ = join_factor(step) * double(before) / double(after);
    ramp_start_ = step;
  }
  double join_factor(std::int64_t step) const {
    if (ramp_start_ < 0 || step >= ramp_start_ + join_warmup_) return 1.0;
    const double done = double(std::max<std::int64_t>(0, step - ramp_start_)) / double(join_warmup_);
    return ramp_from_ + (1.0 - ramp_from_) * done;
  }

 private:
  const LrSchedule& schedule_;
  LrScaling scaling_;
  MomentumCorrection correction_;
  double momentum_;
  std::int64_t join_warmup_;
  bool by_workers_;
  std::int64_t ramp_start_ = -1;
  double ramp_from_ = 1.0;
  std::int64_t start_warmup_ = 0;
  SpikeGuard guard_;
};

// The start-up line's words for what keeps an asynchronous run stable: ", warm-up 200 steps (50
// per worker), spike guard" (the warm-up only where it lengthens the schedule's own).
std::string describe_stability(const RateStability& s, const LrSchedule& schedule);

// --lr-scaling gap (Barkai, Hakimi and Schuster, "Gap-Aware Mitigation of Gradient Staleness",
// ICLR 2020): instead of dividing the rate by the staleness, each element of a gradient is divided
// by its gap, max(1, |θ now − θ the worker pulled| / C), C a running mean of that parameter's change
// per update. A parameter that moved steadily through the τ updates since the pull is penalized
// about τ (as staleness scaling would), one that went back and forth much less. Before C has any
// history a parameter that moved is penalized 1 + staleness.
//
// C lives in storage the caller owns (`mean_step`, one float per parameter, zero = no history):
// the parameter server keeps it beside its momenta, so snapshots and checkpoints carry it
// (/optimizer/gap_mean_step) and a resume continues exactly.
class GapPenalty {
 public:
  explicit GapPenalty(std::span<float> mean_step, double beta = 0.99);
  // Divides grad[i] by the gap of parameter i between `pulled` (what the gradient was computed
  // on) and `now` (what it is applied to). Returns the sum of squares of the gradient as it came,
  // in double, in the same pass: the push check's (ps/exchange/push_check.hpp).
  double penalize(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                  double staleness) const;
  // After each update of the parameters from `before` to `after`: C follows each one's change.
  void track(std::span<const float> before, std::span<const float> after);
  std::span<const float> mean_step() const { return mean_step_; }

 private:
  std::span<float> mean_step_;
  float beta_, rest_;  // rest_: 1 - beta, rounded once
};

}  // namespace mt
