// Instance prices ($/hour) of the paper's Table II and per-second billing.
#pragma once

#include <string>

namespace mt {

struct InstancePrice {
  double on_demand = 0;
  double transient = 0;
};

// "k80", "p100", "v100", "ps" (4 vCPU, no GPU); throws UsageError naming the choices otherwise.
InstancePrice table2_price(const std::string& type);
// Dollars for `seconds` of one instance, billed per second.
double cost_usd(const std::string& type, bool transient, double seconds);

}  // namespace mt
