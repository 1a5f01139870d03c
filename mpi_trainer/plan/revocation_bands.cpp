#include "plan/revocation_bands.hpp"

#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"
#include "plan/revocation_gce.hpp"

namespace mt {
namespace {

// The bands AWS publishes and the monthly fraction each stands for (its upper edge).
struct Band {
  const char* label;
  double upper;  // negative: no upper edge
};
constexpr Band kBands[] = {{"<5%", 0.05}, {"5-10%", 0.10}, {"10-15%", 0.15}, {"15-20%", 0.20}, {">20%", -1}};

const Band* find_band(std::string s) {
  if (!s.empty() && s.back() != '%') s += '%';
  for (const auto& b : kBands)
    if (s == b.label) return &b;
  return nullptr;
}

std::string percent(double f) {
  std::ostringstream o;
  o << f * 100 << '%';
  return o.str();
}

}  // namespace

RevocationModel monthly_hazard_model(double monthly, const std::string& source) {
  if (!(monthly > 0 && monthly < 1)) throw UsageError(source + ": the monthly fraction must lie in (0, 1)");
  // Every 6 hours for a year: linear between rows, within 1e-5 of the curve even at 99% a month.
  const double rate = -std::log1p(-monthly) / kHoursPerMonth;
  std::ostringstream t;
  t << "# " << source << "\n# A constant hazard; beyond a year (8760 h) a server is never revoked.\n"
    << std::setprecision(9);
  for (int h = 0; h <= 8760; h += 6)
    t << h << ',' << -std::expm1(-rate * h) << '\n';
  return RevocationModel::parse(t.str(), source);
}

RevocationModel aws_band_model(const std::string& band) {
  const std::string name = "aws-band:" + band;
  if (const Band* b = find_band(trim(band))) {
    if (b->upper < 0)
      throw UsageError(name +
                       ": AWS's >20% band has no upper edge, so no lifetime follows from it: give a "
                       "percentage (aws-band:50) or the measured lifetimes of such a type (aws-v100)");
    return monthly_hazard_model(b->upper, name + " (AWS interruption band " + b->label + ", taken as " +
                                              percent(b->upper) + " revoked a month, a constant hazard)");
  }
  std::string p = trim(band);
  if (!p.empty() && p.back() == '%') p.pop_back();
  double v = 0;
  if (!to_double(p, v) || !(v > 0 && v < 100))
    throw UsageError(name +
                     ": expected an AWS interruption band (<5%, 5-10%, 10-15%, 15-20%) or a percentage "
                     "revoked a month in (0, 100)");
  return monthly_hazard_model(v / 100, name + " (" + percent(v / 100) + " revoked a month, a constant hazard)");
}

std::vector<AwsBandRow> parse_aws_bands(const std::string& text, const std::string& source) {
  std::vector<AwsBandRow> rows;
  for_each_data_line(text, source, [&](const std::string& line, const std::string& where) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string cell; std::getline(ls, cell, ',');)
      f.push_back(trim(cell));
    if (f.size() != 4 || f[0].empty() || f[1].empty() || f[2].empty())
      throw DataError(where + "expected TYPE,INSTANCE,REGION,BAND, got '" + line + "'");
    if (!find_band(f[3]) || f[3].back() != '%')
      throw DataError(where + "'" + f[3] + "' is not one of AWS's bands (<5%, 5-10%, 10-15%, 15-20%, >20%)");
    rows.push_back({f[0], f[1], f[2], f[3]});
  });
  if (rows.empty()) throw DataError(source + ": no rows");
  return rows;
}

RevocationModel aws_advisor_model(const std::string& spec, const std::string& type) {
  const auto colon = spec.find(':');
  const std::string region = colon == std::string::npos ? "us-east-1" : spec.substr(colon + 1);
  const auto rows = parse_aws_bands(kAwsBandsCsv, "plan/revocation_aws_bands.csv");
  std::set<std::string> types, regions;
  for (const auto& r : rows) {
    if (r.region == region) types.insert(r.type);
    regions.insert(r.region);
    if (r.region != region || r.type != type) continue;
    const std::string what = spec + " " + type + " (" + r.instance + " in " + region + ", AWS interruption band " +
                             r.band + "; built in: plan/revocation_aws_bands.csv";
    const Band* b = find_band(r.band);
    if (b->upper > 0)
      return monthly_hazard_model(b->upper, what + ": " + percent(b->upper) + " revoked a month, a constant hazard)");
    return RevocationModel::parse(kAwsV100RevocationCsv,
                                  what + ": no upper edge, so the measured lifetimes of aws-v100, also >20%)");
  }
  const auto list = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s)
      out += (out.empty() ? "" : " ") + x;
    return out;
  };
  if (types.empty())
    throw UsageError(spec + ": no region '" + region + "' in the table (it has " + list(regions) + ")");
  throw UsageError(spec + ": no band for the device type '" + type + "' in " + region + " (it has " + list(types) +
                   "; the trainer's --instance-type, plan's --worker-types and --ps-type)");
}

}  // namespace mt
