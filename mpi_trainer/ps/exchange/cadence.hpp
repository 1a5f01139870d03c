// Shard 0's cadence (ps/exchange/shard_coordination.cpp): after each applied step, whether a progress
// report is due, and whether a checkpoint or an evaluation is. A pure function of the options and
// the moment, so that it is unit-tested without an MPI job (tests/test_ps.cpp).
#pragma once

#include <cstdint>

#include "ps/options.hpp"

namespace mt {

struct CadenceDecision {
  bool progress = false;    // a progress report (every --log-every-steps, and the last step)
  bool checkpoint = false;  // a checkpoint (every --ckpt-every-steps or --ckpt-every-seconds)
  bool eval = false;        // an evaluation (every --eval-every-steps); skipped if one still runs
};

// `step`: the global step just applied; `stopping`: a stop is under way (a notice, no worker left);
// `checkpoints` / `evaluates`: the sink takes them; `since_checkpoint`: seconds since the last one.
// Neither a checkpoint nor an evaluation at the last step or while stopping: the final ones follow.
inline CadenceDecision cadence_after_step(const PsOptions& o, std::int64_t step, bool stopping, bool checkpoints,
                                          bool evaluates, double since_checkpoint) {
  CadenceDecision d;
  const std::int64_t log_every = o.log_every_steps > 0 ? o.log_every_steps : 1;
  d.progress = step % log_every == 0 || step == o.train_steps;
  if (step >= o.train_steps || stopping) return d;
  d.checkpoint = checkpoints && ((o.ckpt_every_steps > 0 && step % o.ckpt_every_steps == 0) ||
                                 (o.ckpt_every_seconds > 0 && since_checkpoint >= o.ckpt_every_seconds));
  d.eval = evaluates && o.eval_every_steps > 0 && step % o.eval_every_steps == 0;
  return d;
}

}  // namespace mt
