// Instance prices ($/hour) and per-second billing. The default table is the paper's Table II
// (GCE, 2019); `--prices FILE` replaces it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mt {

struct InstancePrice {
  double on_demand = 0;
  double transient = 0;
};

class PriceTable {
 public:
  // k80 0.723/0.256, p100 1.43/0.551, v100 2.144/0.861, ps (4 vCPU, no GPU) 0.143/0.041.
  static PriceTable table2();
  // A text file, one instance type per line: `TYPE ON_DEMAND_PER_HOUR TRANSIENT_PER_HOUR`,
  // separated by spaces, tabs or commas; `#` starts a comment; a header line starting with
  // `type` is skipped. Throws DataError naming the file and line.
  static PriceTable from_file(const std::string& path);
  // Table II when `path` is empty, else the file.
  static PriceTable load(const std::string& path);

  // Throws UsageError naming the known types.
  const InstancePrice& at(const std::string& type) const;
  // Dollars for `seconds` of one instance, billed per second.
  double cost_usd(const std::string& type, bool transient, double seconds) const;
  std::vector<std::string> types() const;
  std::string source() const { return source_; }

 private:
  std::map<std::string, InstancePrice> prices_;
  std::string source_;
};

}  // namespace mt
