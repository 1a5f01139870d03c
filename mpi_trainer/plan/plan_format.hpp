// What `mpi_trainer plan` and its search (plan/plan.cpp, plan/plan_search.cpp) both print: the
// statistics of the draws and their formats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace mt::plan_format {

// The epochs a plan's global steps make.
inline double plan_epochs(std::int64_t steps, std::int64_t batch_size, std::int64_t train_images) {
  return double(steps) * double(batch_size) / double(std::max<std::int64_t>(train_images, 1));
}

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
  for (double x : v)
    s += x;
  return v.empty() ? 0 : s / double(v.size());
}

inline double fraction_positive(const std::vector<double>& v) {
  double n = 0;
  for (double x : v)
    n += x > 0 ? 1 : 0;
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
