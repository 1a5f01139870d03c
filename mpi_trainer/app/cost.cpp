#include "app/cost.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

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
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == '\r') ch = ' ';
    std::istringstream fields(line);
    std::string type, od, tr, extra;
    if (!(fields >> type)) continue;  // blank or comment
    if (type == "type") continue;     // header
    const std::string where = "--prices " + path + " line " + std::to_string(number) + ": ";
    if (!(fields >> od >> tr) || (fields >> extra))
      throw DataError(where + "expected 'TYPE ON_DEMAND TRANSIENT' ($/hour), got '" + line + "'");
    auto number_of = [&](const std::string& text) {
      try {
        std::size_t used = 0;
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v) && v >= 0) return v;
      } catch (const std::exception&) {
      }
      throw DataError(where + "'" + text + "' is not a price (a number >= 0, $/hour)");
    };
    if (t.prices_.count(type)) throw DataError(where + "type '" + type + "' is listed twice");
    t.prices_[type] = InstancePrice{number_of(od), number_of(tr)};
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
