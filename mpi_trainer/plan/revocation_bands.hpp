// Revocation models built from a monthly interruption frequency rather than measured lifetimes
// (issue 44): AWS's Spot Instance Advisor gives each instance type and region a band of "the rate
// at which Spot has reclaimed capacity during the trailing month" (<5%, 5-10%, 10-15%, 15-20%,
// >20%). A frequency is not a lifetime; the model built on it assumes a constant hazard: a server
// is revoked at the same rate whatever its age, so a fraction f of servers is revoked within a
// month (730 h) and 1 - (1 - f)^(t / 730) within t hours. A band stands for its upper edge (more
// revocations, not fewer); >20% has none.
#pragma once

#include <string>
#include <vector>

#include "plan/revocation_model.hpp"

namespace mt {

inline constexpr double kHoursPerMonth = 730;  // 365 days * 24 h / 12

// A constant-hazard table: `monthly` (0 < monthly < 1) revoked within 730 h; rows to a year,
// beyond which a server is never revoked (said in the table).
RevocationModel monthly_hazard_model(double monthly, const std::string& source);

// "aws-band:" + a band ("<5%", "5-10%", "10-15%", "15-20%", with or without the %; its upper edge)
// or a percentage ("35", "35%"). Throws UsageError for ">20%" (no upper edge) and what is not a band.
RevocationModel aws_band_model(const std::string& band);

// One row of plan/revocation_aws_bands.csv (bench/tables/spot_advisor.py): our device type, the AWS
// instance whose band stands for it, the region, the band's label.
struct AwsBandRow {
  std::string type, instance, region, band;
};
// Throws DataError naming `source` and the line of a malformed row.
std::vector<AwsBandRow> parse_aws_bands(const std::string& text, const std::string& source);

// "aws-advisor" or "aws-advisor:REGION" (default us-east-1, the price table's region): the model of
// `type`'s band there. A >20% band has no upper edge: the measured lifetimes of aws-v100 (a >20%
// type in every region) stand in, and the source says so. Throws UsageError for a type or region
// the table lacks, naming the ones it has.
RevocationModel aws_advisor_model(const std::string& spec, const std::string& type);

}  // namespace mt
