#include "ps/exchange/update_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace mt {

LrScaling parse_lr_scaling(const std::string& text) {
  if (text == "none") return LrScaling::kNone;
  if (text == "active-workers") return LrScaling::kActiveWorkers;
  if (text == "staleness") return LrScaling::kStaleness;
  if (text == "sqrt-staleness") return LrScaling::kSqrtStaleness;
  if (text == "gap") return LrScaling::kGap;
  throw UsageError("--lr-scaling: '" + text + "': use auto, none, active-workers, staleness, sqrt-staleness or gap");
}

MomentumCorrection parse_momentum_correction(const std::string& text) {
  if (text == "implicit") return MomentumCorrection::kImplicit;
  if (text == "none") return MomentumCorrection::kNone;
  if (text == "dana") return MomentumCorrection::kDana;
  throw UsageError("--momentum-correction: '" + text + "': use implicit, dana or none");
}

const char* to_string(LrScaling s) {
  switch (s) {
    case LrScaling::kNone: return "none";
    case LrScaling::kActiveWorkers: return "active-workers";
    case LrScaling::kStaleness: return "staleness";
    case LrScaling::kSqrtStaleness: return "sqrt-staleness";
    case LrScaling::kGap: return "gap";
  }
  return "?";
}

const char* to_string(MomentumCorrection m) {
  switch (m) {
    case MomentumCorrection::kNone: return "none";
    case MomentumCorrection::kImplicit: return "implicit";
    case MomentumCorrection::kDana: return "dana";
  }
  return "?";
}

std::string describe_cut(std::int64_t step, const SpikeGuard::Cut& cut) {
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "mpi_trainer: step %lld: the training loss jumped to %.3g (usual %.3g): learning rate capped at "
                "%.3g, half the rate it jumped at; the cap doubles over ~700 steps (--spike-guard)",
                static_cast<long long>(step), cut.recent_loss, cut.usual_loss, cut.cap);
  return buf;
}

std::string describe_stability(const RateStability& s, const LrSchedule& schedule) {
  std::string out;
  if (s.start_warmup > schedule.warmup_steps)
    out += (schedule.warmup_steps > 0 ? ", warm-up lengthened to " : ", warm-up ") + std::to_string(s.start_warmup) +
           " steps (50 per worker)";
  if (s.spike_guard) out += ", spike guard";
  return out;
}

std::string describe_momentum(MomentumCorrection correction, double momentum, int workers, double applied) {
  char buf[160];
  if (correction == MomentumCorrection::kDana && applied != momentum)  // --momentum auto raised it
    std::snprintf(buf, sizeof buf,
                  ", Nesterov momentum %.3g per worker (dana; --momentum auto: %g, raised with %d workers)", applied,
                  momentum, workers);
  else if (correction == MomentumCorrection::kDana)
    std::snprintf(buf, sizeof buf, ", Nesterov momentum %g per worker (dana)", momentum);
  else if (correction == MomentumCorrection::kImplicit && workers > 1)
    std::snprintf(buf, sizeof buf, ", momentum %g (applied with %d workers: %.3f)", momentum, workers, applied);
  else
    std::snprintf(buf, sizeof buf, ", momentum %g", momentum);
  return buf;
}

GapPenalty::GapPenalty(std::span<float> mean_step, double beta)
    : mean_step_(mean_step), beta_(static_cast<float>(beta)), rest_(static_cast<float>(1.0 - beta)) {}

// Both loops are written to vectorize (the parameter server runs them on every push, over the
// whole model): no branch, and no division that only some elements take (a possibly trapping
// operation under a condition keeps GCC from if-converting the loop), over pointers that do not
// alias. They compute exactly what the plain conditional form would, to the bit.
double GapPenalty::penalize(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                            double staleness) const {
  MT_ASSERT(grad.size() == mean_step_.size() && now.size() == grad.size() && pulled.size() == grad.size(),
            "gap penalty: one value per parameter");
  const float fresh = 1.f + static_cast<float>(staleness);  // no history yet: the staleness rule
  float* __restrict g = grad.data();
  const float* __restrict a = now.data();
  const float* __restrict b = pulled.data();
  const float* __restrict mean = mean_step_.data();
  const std::size_t n = grad.size();
  double sum_squares = 0;
#pragma omp simd reduction(+ : sum_squares)
  for (std::size_t i = 0; i < n; ++i) {
    const float gap = std::fabs(a[i] - b[i]), c = mean[i];
    const float ratio = gap / (c > 0.f ? c : 1.f);
    const float early = gap > 0.f ? fresh : 1.f;
    const float penalty = c > 0.f ? (ratio > 1.f ? ratio : 1.f) : early;
    sum_squares += double(g[i]) * double(g[i]);
    g[i] /= penalty;
  }
  return sum_squares;
}

void GapPenalty::track(std::span<const float> before, std::span<const float> after) {
  MT_ASSERT(before.size() == mean_step_.size() && after.size() == before.size(),
            "gap penalty: one value per parameter");
  const float* __restrict x = before.data();
  const float* __restrict y = after.data();
  float* __restrict mean = mean_step_.data();
  const std::size_t n = after.size();
  for (std::size_t i = 0; i < n; ++i) {
    const float step = std::fabs(y[i] - x[i]), c = mean[i];
    const float ema = beta_ * c + rest_ * step;
    mean[i] = c > 0.f ? ema : step;
  }
}

}  // namespace mt
