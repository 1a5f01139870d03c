#include "ps/update_policy.hpp"

#include <cstdio>

#include "core/error.hpp"

namespace mt {

LrScaling parse_lr_scaling(const std::string& text) {
  if (text == "none") return LrScaling::kNone;
  if (text == "active-workers") return LrScaling::kActiveWorkers;
  if (text == "staleness") return LrScaling::kStaleness;
  if (text == "sqrt-staleness") return LrScaling::kSqrtStaleness;
  throw UsageError("--lr-scaling: '" + text + "': use auto, none, active-workers, staleness or sqrt-staleness");
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

}  // namespace mt
