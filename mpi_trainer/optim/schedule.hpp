// Learning-rate schedules of the two reference recipes (docs/architecture.md, "Models") plus a constant rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine };
  Kind kind = Kind::kStep;
  double base_lr = 0.1;
  // kStep: multiply by `factor` at each boundary (global steps).
  std::vector<std::int64_t> boundaries{32000, 48000};
  double factor = 0.1;
  // kCosine: cosine decay to zero at `decay_steps`.
  std::int64_t decay_steps = 120000;
  // Every kind: linear warm-up from base/warmup_steps to base over the first steps (0: none).
  std::int64_t warmup_steps = 0;

  double lr_at(std::int64_t step) const;
  std::string describe() const;
};

// "step" (resnetN: 0.1, /10 at 32k and 48k), "cosine" (t2t: 0.4, 100 warm-up, 120k decay),
// "constant"; "default" picks the model's own. `lr` > 0 replaces the base rate. Boundaries can
// be given as "step:32000,48000". `warmup` >= 0 replaces the warm-up (cosine: 100, others: 0).
// Throws UsageError on a bad value.
LrSchedule parse_schedule(const std::string& text, bool t2t_model, double lr, std::int64_t warmup = -1);

// One line for each setting given in `text` (--lr-schedule) or as the warm-up that cannot matter
// in a run of `train_steps` (a boundary at or after its end, a warm-up as long as the run), each
// starting "warning: ".
std::vector<std::string> schedule_warnings(const std::string& text, const LrSchedule& s, std::int64_t train_steps,
                                           bool warmup_given);

}  // namespace mt
