// The runtime's clocks: steady time for deadlines and rates, wall time for reports.
#pragma once

#include <chrono>

namespace mt {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace mt
