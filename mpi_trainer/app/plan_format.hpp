// What `mpi_trainer plan` and its search (app/plan.cpp, app/plan_search.cpp) both print: the
// statistics of the draws and their formats.
#pragma once

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace mt::plan_format {

inline constexpr const char* kAccuracyNote =
    "  (time to the global steps: what asynchrony costs in accuracy with more workers is not in the plan; "
    "measured in bench/README.md, \"Speed-up\", and by train --virtual-workers)\n";

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double x = p * double(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(x));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (x - double(lo));
}

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

inline double fraction_positive(const std::vector<double>& v) {
  double n = 0;
  for (double x : v) n += x > 0 ? 1 : 0;
  return v.empty() ? 0 : n / double(v.size());
}

inline std::string hours(double seconds) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << seconds / 3600.0 << " h";
  return s.str();
}

inline std::string dollars(double usd) {
  std::ostringstream s;
  s << '$' << std::fixed << std::setprecision(2) << usd;
  return s.str();
}

}  // namespace mt::plan_format
