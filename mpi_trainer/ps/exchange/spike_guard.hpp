// --spike-guard: when the training loss jumps, the parameter server caps the learning rate at half
// the rate it jumped at, and lifts the cap slowly. Asynchronous SGD at the synchronous rate is
// close to its stability limit: stale gradients lower the learning rate above which an
// oscillation grows instead of dying out, and as training sharpens the loss surface a run at loss
// 0.01 can blow up to 2.8 within ten steps and end at a fraction of its accuracy
// (docs/user-guide.md, "Defaults that learn"). A jump in the loss is the first sign; halving the
// rate stops the growth. The cap holds whatever the schedule does next (a warm-up still rising
// would climb straight back into the limit) and doubles back over about 700 pushes, so a false
// alarm costs little and a real limit is found again if the rate reaches it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace mt {

class SpikeGuard {
 public:
  struct Cut {
    double recent_loss, usual_loss, cap;
  };

  explicit SpikeGuard(bool on = false) : on_(on) {}

  // One push's training loss, with `active` workers; `lr`: the rate pushes are applied at now
  // (the cap included). True when this push set a cap (`last_cut()` says why).
  bool observe(double loss, int active, double lr) {
    if (!on_ || !(loss >= 0)) return false;  // a NaN is --max-loss's to handle
    if (seen_++ == 0) recent_ = usual_ = loss;
    recent_ = kRecent * recent_ + (1 - kRecent) * loss;
    usual_ = kUsual * usual_ + (1 - kUsual) * loss;
    if (hold_ > 0) {  // pushes computed before the cut are still arriving
      --hold_;
      return false;
    }
    if (seen_ > kFirst && recent_ > kRatio * usual_ && recent_ > usual_ + kMargin) {
      cap_ = 0.5 * std::min(cap_, lr);
      hold_ = 2 * std::max(1, active);
      last_ = Cut{recent_, usual_, cap_};
      recent_ = usual_;  // the next cut needs new evidence
      ++cuts_;
      return true;
    }
    cap_ *= kRecover;  // no cap: stays infinite
    return false;
  }
  // The highest rate allowed now (infinite: no cap).
  double cap() const { return cap_; }
  std::int64_t cuts() const { return cuts_; }
  const Cut& last_cut() const { return last_; }

 private:
  // The recent loss is an average over about 4 pushes, the usual one over about 50; a jump is the
  // recent one above 1.5 times the usual one and 0.2 above it (the margin keeps a noisy batch at
  // a loss near zero from counting). The cap doubles in about 700 pushes.
  static constexpr double kRecent = 0.75, kUsual = 0.98, kRatio = 1.5, kMargin = 0.2;
  static constexpr double kRecover = 1.001;
  static constexpr std::int64_t kFirst = 4;
  bool on_;
  double recent_ = 0, usual_ = 0, cap_ = std::numeric_limits<double>::infinity();
  std::int64_t seen_ = 0, hold_ = 0, cuts_ = 0;
  Cut last_{0, 0, 0};
};

}  // namespace mt
