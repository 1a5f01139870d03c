// The one clock of the project: steady time for deadlines, intervals and rates, wall time (Unix
// seconds) for reports and metrics.
#pragma once

#include <chrono>

namespace mt {

using Clock = std::chrono::steady_clock;

// Seconds from a to b.
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// Seconds from t0 to now.
inline double since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }
// Wall-clock time, Unix seconds.
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace mt
