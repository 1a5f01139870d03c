// What a parameter server checks of a push before it applies it (issue 45): a broken GPU, a bit
// flip or a hostile joiner must not put a non-finite or enormous gradient into the parameters every
// worker shares. The check costs no pass of its own under the default policy: the gap-aware
// penalty (ps/exchange/update_policy.hpp) already reads every value of the push and returns their sum of
// squares, which is finite exactly when every value is (in double, no finite float overflows it).
// Other policies pay one pass (sum_of_squares). A rejected push is not applied; the shard counts
// it as a step all the same, as it does a push too stale to apply, so that every shard counts the
// same pushes (ps/exchange/shard.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt {

// The sum of squares of `values`, in double: not finite when one of them is not.
double sum_of_squares(std::span<const float> values);

class PushCheck {
 public:
  // norm_limit > 0: a push whose gradient norm is above norm_limit times the median of the last
  // accepted ones (once there are kMinHistory) is an outlier. 0: values must be finite, nothing more.
  explicit PushCheck(double norm_limit) : norm_limit_(norm_limit) {}

  // Empty when the push may be applied (and its norm joins the history), else why not, in words
  // for the log line. `sum_squares`: of the gradient part this shard holds; `stats`: the BatchNorm
  // statistics it carries (shard 0), checked for finiteness.
  std::string judge(double sum_squares, std::span<const float> stats);

  static constexpr std::size_t kHistory = 64, kMinHistory = 16;

 private:
  double median() const;
  double norm_limit_;
  std::vector<double> norms_;  // the last kHistory accepted norms, a ring
  std::size_t next_ = 0;
};

}  // namespace mt
