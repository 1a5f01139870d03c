#include "ps/exchange/push_check.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mt {

double sum_of_squares(std::span<const float> values) {
  const float* v = values.data();
  const std::size_t n = values.size();
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < n; ++i)
    sum += double(v[i]) * double(v[i]);
  return sum;
}

double PushCheck::median() const {
  std::vector<double> sorted = norms_;
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  return *mid;
}

std::string PushCheck::judge(double sum_squares, std::span<const float> stats) {
  if (!std::isfinite(sum_squares)) return "its gradient has values that are not finite (NaN or infinity)";
  if (!std::isfinite(sum_of_squares(stats))) return "its BatchNorm statistics have values that are not finite";
  const double norm = std::sqrt(sum_squares);
  if (norm_limit_ > 0 && norms_.size() >= kMinHistory) {
    if (const double usual = median(); norm > norm_limit_ * usual) {
      std::ostringstream why;
      why << "its gradient norm " << norm << " is " << norm / usual << " times the median " << usual << " of the last "
          << norms_.size() << " accepted (--push-norm-limit " << norm_limit_ << ")";
      return why.str();
    }
  }
  if (norms_.size() < kHistory) {
    norms_.push_back(norm);
  } else {
    norms_[next_] = norm;
    next_ = (next_ + 1) % kHistory;
  }
  return {};
}

}  // namespace mt
