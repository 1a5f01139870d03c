#include "ps/update_policy.hpp"

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

std::string describe_momentum(MomentumCorrection correction, double momentum, int workers, double applied) {
  char buf[160];
  if (correction == MomentumCorrection::kDana)
    std::snprintf(buf, sizeof buf, ", Nesterov momentum %g per worker (dana)", momentum);
  else if (correction == MomentumCorrection::kImplicit && workers > 1)
    std::snprintf(buf, sizeof buf, ", momentum %g (applied with %d workers: %.3f)", momentum, workers, applied);
  else
    std::snprintf(buf, sizeof buf, ", momentum %g", momentum);
  return buf;
}

GapPenalty::GapPenalty(std::span<float> mean_step, double beta)
    : mean_step_(mean_step), beta_(static_cast<float>(beta)), rest_(static_cast<float>(1.0 - beta)) {}

void GapPenalty::penalize(std::span<float> grad, std::span<const float> now, std::span<const float> pulled,
                          double staleness) const {
  MT_ASSERT(grad.size() == mean_step_.size() && now.size() == grad.size() && pulled.size() == grad.size(),
            "gap penalty: one value per parameter");
  const float fresh = 1.f + static_cast<float>(staleness);  // no history yet: the staleness rule
  for (std::size_t i = 0; i < grad.size(); ++i) {
    const float gap = std::fabs(now[i] - pulled[i]), c = mean_step_[i];
    const float penalty = c > 0.f ? std::max(1.f, gap / c) : (gap > 0.f ? fresh : 1.f);
    grad[i] /= penalty;
  }
}

void GapPenalty::track(std::span<const float> before, std::span<const float> after) {
  MT_ASSERT(before.size() == mean_step_.size() && after.size() == before.size(), "gap penalty: one value per parameter");
  for (std::size_t i = 0; i < after.size(); ++i) {
    const float step = std::fabs(after[i] - before[i]);
    float& c = mean_step_[i];
    c = c > 0.f ? beta_ * c + rest_ * step : step;
  }
}

}  // namespace mt
