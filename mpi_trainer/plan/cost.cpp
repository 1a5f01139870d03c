#include "plan/cost.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "plan/table_file.hpp"
#include "plan/tables_builtin.hpp"

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
  if (!in) throw DataError("--prices " + path + ": cannot open the file (give aws, gcp, azure, or a table file)");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

PriceTable PriceTable::parse(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  PriceTable t;
  t.source_ = source;
  const auto price = [](const std::string& field, const std::string& where) {
    if (field == "-") return std::numeric_limits<double>::quiet_NaN();  // not offered
    return table_number(field, where, "a price (a number >= 0, $/hour, or - when not offered)");
  };
  for (const TableRow& row : read_table(in, "type")) {
    const std::string where = "--prices " + source + " line " + std::to_string(row.line) + ": ";
    if (row.fields.size() != 3)
      throw DataError(where + "expected 'TYPE ON_DEMAND TRANSIENT' ($/hour), got '" + row.text + "'");
    const std::string& type = row.fields[0];
    if (t.prices_.count(type)) throw DataError(where + "type '" + type + "' is listed twice");
    t.prices_[type] = InstancePrice{price(row.fields[1], where), price(row.fields[2], where)};
  }
  if (t.prices_.empty()) throw DataError("--prices " + source + ": no prices in the file");
  return t;
}

PriceTable PriceTable::load(const std::string& name_or_path) {
  if (name_or_path.empty() || name_or_path == "table2") return table2();
  if (name_or_path == "aws") return parse(kAwsPrices, "aws (built in: plan/prices_aws.txt)");
  if (name_or_path == "gcp") return parse(kGcpPrices, "gcp (built in: plan/prices_gcp.txt)");
  if (name_or_path == "azure") return parse(kAzurePrices, "azure (built in: plan/prices_azure.txt)");
  return from_file(name_or_path);
}

const InstancePrice& PriceTable::at(const std::string& type) const {
  const auto it = prices_.find(type);
  if (it != prices_.end()) return it->second;
  std::string names;
  for (const auto& [name, price] : prices_)
    names += (names.empty() ? "" : ", ") + name;
  throw UsageError("unknown instance type '" + type + "'; the price table (" + source_ + ") has " + names);
}

double PriceTable::per_hour(const std::string& type, bool transient) const {
  const auto& p = at(type);
  const double v = transient ? p.transient : p.on_demand;
  if (!std::isfinite(v))
    throw UsageError("'" + type + "' is not offered " + (transient ? "as a transient (spot) server" : "on demand") +
                     " in the price table (" + source_ + "): give --pricing (or --ps-pricing) " +
                     (transient ? "on-demand" : "transient") + ", or another type");
  return v;
}

double PriceTable::cost_usd(const std::string& type, bool transient, double seconds) const {
  return per_hour(type, transient) * seconds / 3600.0;
}

std::vector<std::string> PriceTable::types() const {
  std::vector<std::string> out;
  for (const auto& [name, price] : prices_)
    out.push_back(name);
  return out;
}

}  // namespace mt
