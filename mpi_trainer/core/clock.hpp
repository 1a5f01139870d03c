#pragma once
// Wall-clock intervals on the monotonic clock.
#include <chrono>

namespace mt {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace mt
