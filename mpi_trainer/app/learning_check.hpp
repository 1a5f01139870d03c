// Whether a finished run learned anything (docs/user-guide.md, "A run that learned nothing"):
// a final test accuracy at chance level ends the run with a warning on the log and in the
// summary's "warnings", naming the likely causes, instead of a silent exit 0.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "app/config.hpp"

namespace mt {

// The warning for a final evaluation at chance level (accuracy below 1.5 / classes), naming the
// likely causes for this run's flags and worker count; empty when the run learned. A NaN accuracy
// (no evaluation) gives none.
std::string learned_nothing_warning(double test_accuracy, double test_loss, int classes, const TrainConfig& c,
                                    int workers);

// summary["warnings"]: the warnings of this run (an empty array when none), each also printed
// once on stderr as "mpi_trainer: warning: ...", --quiet or not.
void add_warnings(nlohmann::ordered_json& summary, const std::string& warning);

}  // namespace mt
