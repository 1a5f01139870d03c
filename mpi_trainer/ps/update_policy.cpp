#include "ps/update_policy.hpp"

#include "core/error.hpp"

namespace mt {

LrScaling parse_lr_scaling(const std::string& text) {
  if (text == "none") return LrScaling::kNone;
  if (text == "active-workers") return LrScaling::kActiveWorkers;
  if (text == "staleness") return LrScaling::kStaleness;
  throw UsageError("--lr-scaling: '" + text + "': use none, active-workers or staleness");
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

}  // namespace mt
