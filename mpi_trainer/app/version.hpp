// The tool's version (`mpi_trainer --version`) and the version of the --metrics format, written
// into every run's "config" event so that `mpi_trainer report` can tell an older file from a
// damaged one (docs/user-guide.md, "Metrics"). Bump kMetricsSchema when an event loses or renames
// a field; adding fields does not change it.
#pragma once

namespace mt {

inline constexpr const char* kVersion = "0.1.0";
inline constexpr int kMetricsSchema = 1;

}  // namespace mt
