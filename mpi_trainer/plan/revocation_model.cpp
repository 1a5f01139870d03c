// Revocation models (plan/revocation_model.hpp).
#include "plan/revocation_model.hpp"

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "plan/revocation_bands.hpp"
#include "plan/revocation_gce.hpp"  // generated from revocation_gce.csv: kGceRevocationCsv

namespace mt {

RevocationModel RevocationModel::parse(const std::string& text, const std::string& source) {
  RevocationModel m;
  m.source_ = source;
  for_each_data_line(text, source, [&](const std::string& line, const std::string& where) {
    const auto comma = line.find(',');
    double h = 0, f = 0;
    if (comma == std::string::npos || !to_double(trim(line.substr(0, comma)), h) ||
        !to_double(trim(line.substr(comma + 1)), f))
      throw DataError(where + "expected HOURS,FRACTION_REVOKED, got '" + line + "'");
    if (h < 0 || f < 0 || f > 1) throw DataError(where + "hours must be >= 0 and the fraction within [0, 1]");
    if (m.hours_.empty() && (h != 0 || f != 0)) throw DataError(where + "the first row must be 0,0");
    // The same hour twice is a jump: every server left revoked at that age (GCE's 24 h cap).
    if (!m.hours_.empty() && (h < m.hours_.back() || f < m.fraction_.back()))
      throw DataError(where + "hours and the fraction must not decrease");
    m.hours_.push_back(h);
    m.fraction_.push_back(f);
  });
  if (m.hours_.size() < 2) throw DataError(source + ": a revocation model needs at least two rows");
  return m;
}

RevocationModel RevocationModel::load(const std::string& name_or_file, const std::string& instance_type) {
  // gce: the table of the instance type when there is one, else all GPU types together.
  std::string name = name_or_file;
  if (name == "gce" && (instance_type == "k80" || instance_type == "p100" || instance_type == "v100"))
    name += "-" + instance_type;
  if (name == "gce") return parse(kGceRevocationCsv, "gce (built in: plan/revocation_gce.csv)");
  if (name == "gce-k80") return parse(kGceK80RevocationCsv, "gce-k80 (built in: plan/revocation_gce_k80.csv)");
  if (name == "gce-p100") return parse(kGceP100RevocationCsv, "gce-p100 (built in: plan/revocation_gce_p100.csv)");
  if (name == "gce-v100") return parse(kGceV100RevocationCsv, "gce-v100 (built in: plan/revocation_gce_v100.csv)");
  if (name == "aws-v100") return parse(kAwsV100RevocationCsv, "aws-v100 (built in: plan/revocation_aws_v100.csv)");
  if (name.rfind("aws-band:", 0) == 0) return aws_band_model(name.substr(9));
  if (name == "aws-advisor" || name.rfind("aws-advisor:", 0) == 0) return aws_advisor_model(name, instance_type);
  std::ifstream in(name_or_file);
  if (!in)
    throw DataError(name_or_file +
                    ": cannot open the revocation model (give gce, gce-k80, gce-p100, gce-v100, "
                    "aws-v100, aws-advisor[:REGION], aws-band:BAND or a table file)");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), name_or_file);
}

double RevocationModel::fraction_by(double hours) const {
  if (hours <= 0) return 0;
  for (std::size_t i = 1; i < hours_.size(); ++i)
    if (hours <= hours_[i])
      return fraction_[i - 1] +
             (fraction_[i] - fraction_[i - 1]) * (hours - hours_[i - 1]) / (hours_[i] - hours_[i - 1]);
  return fraction_.back();
}

double RevocationModel::lifetime_hours(double u) const {
  if (u >= fraction_.back()) return -1;  // this server outlives the table: never revoked
  for (std::size_t i = 1; i < hours_.size(); ++i)
    if (u < fraction_[i])
      return hours_[i - 1] + (hours_[i] - hours_[i - 1]) * (u - fraction_[i - 1]) / (fraction_[i] - fraction_[i - 1]);
  return -1;
}

double sampled_lifetime_seconds(const RevocationModel& model, std::uint64_t seed, int rank, double time_scale) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank) + 0x5245564Bull);  // "REVK"
  const double h = model.lifetime_hours(rng.uniform());
  return h < 0 ? -1 : h * 3600.0 / time_scale;
}

}  // namespace mt
