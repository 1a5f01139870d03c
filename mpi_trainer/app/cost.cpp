#include "app/cost.hpp"

#include <fstream>

#include "app/table_file.hpp"
#include "core/error.hpp"

namespace mt {

PriceTable PriceTable::table2() {
  // ICAC'19 "Speeding up Deep Learning with Transient Servers", Table II (GCE, $/hour).
  PriceTable t;
  t.prices_ = {{"k80", {0.723, 0.256}}, {"p100", {1.43, 0.551}}, {"v100", {2.144, 0.861}}, {"ps", {0.143, 0.041}}};
  t.source_ = "table2";
  return t;
}

PriceTable PriceTable::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError("--prices " + path + ": cannot open the file");
  PriceTable t;
  t.source_ = path;
  for (const TableRow& row : read_table(in, "type")) {
    const std::string where = "--prices " + path + " line " + std::to_string(row.line) + ": ";
    if (row.fields.size() != 3)
      throw DataError(where + "expected 'TYPE ON_DEMAND TRANSIENT' ($/hour), got '" + row.text + "'");
    const std::string& type = row.fields[0];
    const char* what = "a price (a number >= 0, $/hour)";
    if (t.prices_.count(type)) throw DataError(where + "type '" + type + "' is listed twice");
    t.prices_[type] = InstancePrice{table_number(row.fields[1], where, what), table_number(row.fields[2], where, what)};
  }
  if (t.prices_.empty()) throw DataError("--prices " + path + ": no prices in the file");
  return t;
}

PriceTable PriceTable::load(const std::string& path) { return path.empty() ? table2() : from_file(path); }

const InstancePrice& PriceTable::at(const std::string& type) const {
  const auto it = prices_.find(type);
  if (it != prices_.end()) return it->second;
  std::string names;
  for (const auto& [name, price] : prices_) names += (names.empty() ? "" : ", ") + name;
  throw UsageError("unknown instance type '" + type + "'; the price table (" + source_ + ") has " + names);
}

double PriceTable::cost_usd(const std::string& type, bool transient, double seconds) const {
  const auto& p = at(type);
  return (transient ? p.transient : p.on_demand) * seconds / 3600.0;
}

std::vector<std::string> PriceTable::types() const {
  std::vector<std::string> out;
  for (const auto& [name, price] : prices_) out.push_back(name);
  return out;
}

}  // namespace mt
