#include "app/cost.hpp"

#include <map>

#include "core/error.hpp"

namespace mt {

InstancePrice table2_price(const std::string& type) {
  // ICAC'19 "Speeding up Deep Learning with Transient Servers", Table II (GCE, $/hour).
  static const std::map<std::string, InstancePrice> kTable{
      {"k80", {0.723, 0.256}}, {"p100", {1.43, 0.551}}, {"v100", {2.144, 0.861}}, {"ps", {0.143, 0.041}}};
  const auto it = kTable.find(type);
  if (it == kTable.end())
    throw UsageError("unknown instance type '" + type + "'; choose k80, p100, v100 or ps");
  return it->second;
}

double cost_usd(const std::string& type, bool transient, double seconds) {
  const auto p = table2_price(type);
  return (transient ? p.transient : p.on_demand) * seconds / 3600.0;
}

}  // namespace mt
