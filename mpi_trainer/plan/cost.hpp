// Instance prices ($/hour) and per-second billing. The default table is the paper's Table II
// (GCE, 2019); `--prices aws|gcp|azure` are today's (plan/prices_*.txt, each row with its source),
// `--prices FILE` a user's.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mt {

struct InstancePrice {
  double on_demand = 0;  // not finite: not offered that way ("-" in a table)
  double transient = 0;
};

class PriceTable {
 public:
  // k80 0.723/0.256, p100 1.43/0.551, v100 2.144/0.861, ps (4 vCPU, no GPU) 0.143/0.041.
  static PriceTable table2();
  // A text file, one instance type per line: `TYPE ON_DEMAND_PER_HOUR TRANSIENT_PER_HOUR`,
  // separated by spaces, tabs or commas; `-` for a price: not offered that way; `#` starts a
  // comment; a header line starting with `type` is skipped. Throws DataError naming the file and line.
  static PriceTable from_file(const std::string& path);
  static PriceTable parse(const std::string& text, const std::string& source);
  // Table II when `name_or_path` is empty or "table2", a built-in table of today's clouds
  // ("aws", "gcp", "azure"), else the file.
  static PriceTable load(const std::string& name_or_path);

  // Throws UsageError naming the known types.
  const InstancePrice& at(const std::string& type) const;
  // Its price per hour, transient (spot) or on demand; throws UsageError when it is not offered so.
  double per_hour(const std::string& type, bool transient) const;
  // Dollars for `seconds` of one instance, billed per second.
  double cost_usd(const std::string& type, bool transient, double seconds) const;
  std::vector<std::string> types() const;
  std::string source() const { return source_; }

 private:
  std::map<std::string, InstancePrice> prices_;
  std::string source_;
};

}  // namespace mt
