// What asynchrony costs in accuracy, as measured (plan/accuracy_measured.csv, compiled in; its
// rows come from bench/README.md, "Speed-up"): `mpi_trainer plan` shows the row of its shape beside
// the time and cost, or says that shape was not measured.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mt {

struct MeasuredAccuracy {
  std::string model, data;
  double epochs = 0;
  int workers = 0;
  double delta_points = 0;  // final test accuracy against one worker's, at the same global steps
  double sd_points = 0;     // the spread of the configuration's final accuracy over its seeds
  int seeds = 0;
  double one_worker_percent = 0;
};

// Every row of the built-in table (DataError naming the line, should it be malformed).
std::vector<MeasuredAccuracy> measured_accuracy();
// The row of `model` with `workers` workers over `epochs` (within 5%), or none.
std::optional<MeasuredAccuracy> accuracy_for(const std::string& model, double epochs, int workers);
// plan's line: "  accuracy: ..." with the row, or what was measured instead.
std::string accuracy_line(const std::string& model, double epochs, int workers);

// plan --target-accuracy: the shortest measured schedule after which `workers` workers of `model`
// are predicted to reach `target_percent` test accuracy (one worker's measured final accuracy
// plus the measured cost of asynchrony; one worker: its own), or none where no measured schedule
// does. The predicted time to the target is then the plan of that many epochs: the schedules
// measured anneal the rate at 50% and 75% of their steps, so their accuracy is the end's.
struct EpochsToTarget {
  double epochs = 0;
  double predicted_percent = 0;
  std::string data;
};
std::optional<EpochsToTarget> epochs_to_reach(const std::string& model, int workers, double target_percent);
// The search's line when no shape reaches the target: the best each measured model reached.
std::string target_unreached_line(const std::string& model, double target_percent);

}  // namespace mt
