// Revocation models: the cumulative fraction of servers revoked by age, from the paper's GCE
// measurements, public AWS traces, AWS's interruption bands (plan/revocation_bands.hpp) or a table
// file. `plan` and the virtual simulator predict with them; fault injection (ps/inject/) draws real
// revocations from them (--revocation-model). Depends on mt_core only (library mt_revocation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// Cumulative fraction of servers revoked by age, linear between rows.
class RevocationModel {
 public:
  // "gce" (built in: the table of `instance_type` for k80, p100 and v100, else all GPU types
  // together), "gce-k80", "gce-p100", "gce-v100", "aws-v100" (measured lifetimes), "aws-advisor[:REGION]"
  // (AWS's interruption band of `instance_type`) or "aws-band:BAND" (plan/revocation_bands.hpp), or the
  // path of a table file (see plan/revocation_gce.csv), which applies to every type. Throws DataError
  // naming the file and line, UsageError for a band or type that is not there.
  static RevocationModel load(const std::string& name_or_file, const std::string& instance_type = "");
  static RevocationModel parse(const std::string& text, const std::string& source);
  // Fraction revoked by `hours`.
  double fraction_by(double hours) const;
  // Lifetime in hours for a uniform draw u in [0, 1); negative: never revoked.
  double lifetime_hours(double u) const;
  const std::string& source() const { return source_; }

 private:
  std::vector<double> hours_, fraction_;
  std::string source_;
};

// A lifetime in seconds of this process's run time for worker `rank`: the model's lifetime in
// hours, divided by `time_scale` (3600: an hour becomes a second). Deterministic in (seed,
// rank); negative when this draw is never revoked.
double sampled_lifetime_seconds(const RevocationModel& model, std::uint64_t seed, int rank, double time_scale);

}  // namespace mt
