// What asynchrony costs in accuracy, as measured (app/accuracy_measured.csv, compiled in; its
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

}  // namespace mt
