// The single-process trainer: the paper's single-server baseline.
#pragma once

#include <cstdint>
#include <iosfwd>

#include "app/config.hpp"

namespace mt {

// MPI_Finalize waits for every rank of the job (Open MPI 4.1's PMIx fence), and forever when one
// died: short after a loss; long for ranks that ended cleanly while shard 0 still writes its final
// checkpoint and evaluates the test set (minutes on a CPU).
inline constexpr double kShortFinalizeSeconds = 10.0;
inline constexpr double kCleanEndFinalizeSeconds = 600.0;
// kShortFinalizeSeconds, or MT_SHORT_FINALIZE_SECONDS when it is a number in (0, 600] (a test's:
// tests/test_ps_long_final_eval.sh shows with a 4 s evaluation what 10 s would take).
double short_finalize_seconds();

struct TrainResult {
  std::int64_t global_step = 0;
  double train_seconds = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double final_train_loss = 0;  // mean over the last logging window
  double images_per_second = 0;
  double cost_usd = 0;
  double data_wait_seconds = 0;
  int exit_code = 0;  // kExitRequeue: stopped on a notice (checkpointed), rerun with --resume auto
  // How long MPI_Finalize may take before the process exits without it (MpiSession::finalize).
  double finalize_timeout_s = short_finalize_seconds();
  // Leave without MPI_Finalize: a parameter server that handed over to its standby (ULFM), whose
  // MPI_Finalize would wait for the job it left.
  bool skip_finalize = false;
  // The parameter server went silent but is not known to be dead (hung: stopped, a stuck disk), and
  // the launcher would wait for it as long as it hangs: this process ends the whole job
  // (MpiSession::abort_job), which kills the hung one; a restart resumes from the newest checkpoint.
  bool abort_job = false;
};

// Trains as the config says; progress lines go to `log`. Throws mt::Error subclasses.
TrainResult train(const TrainConfig& config, std::ostream& log);

}  // namespace mt
