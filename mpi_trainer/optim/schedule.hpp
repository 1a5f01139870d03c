// Learning-rate schedules of the two reference recipes (docs/architecture.md, "Models") plus a constant rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// The run length the recipes' schedules were written for (the paper's 64,000 steps): a schedule
// given no boundaries or decay length is scaled from it to the run's --train-steps.
inline constexpr std::int64_t kRecipeSteps = 64000;

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
  // The boundaries or the decay length were scaled to the run's length (none given).
  bool scaled = false;

  double lr_at(std::int64_t step) const;
  std::string describe() const;
  // What a checkpoint records of the schedule (a resume checks it): describe(), but for a scaled
  // schedule its proportions of the run, so that a run resumed with another --train-steps is the
  // same job (its boundaries move with the run's new length).
  std::string identity() const;
  // The --lr-schedule value that fixes this schedule's boundaries or decay length: "step:100,150",
  // "cosine:375", "constant".
  std::string flag() const;
};

// "step" (resnetN: 0.1, /10 at half and three quarters of the run: 32k and 48k of the paper's
// 64k steps), "cosine" (t2t: 0.4, 100 warm-up, decay over 120k steps for 64k, in proportion to
// `train_steps`), "constant"; "default" picks the model's own. `lr` > 0 replaces the base rate.
// Boundaries can be given as "step:32000,48000", the decay as "cosine:120000" (then not scaled).
// `warmup` >= 0 replaces the warm-up (cosine: 100, others: 0). Throws UsageError on a bad value.
LrSchedule parse_schedule(const std::string& text, bool t2t_model, double lr, std::int64_t warmup = -1,
                          std::int64_t train_steps = kRecipeSteps);


// One line for each setting given in `text` (--lr-schedule) or as the warm-up that cannot matter
// in a run of `train_steps` (a boundary at or after its end, a warm-up as long as the run), each
// starting "warning: ".
std::vector<std::string> schedule_warnings(const std::string& text, const LrSchedule& s, std::int64_t train_steps,
                                           bool warmup_given);

}  // namespace mt
