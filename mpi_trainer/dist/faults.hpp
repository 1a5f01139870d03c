// Fault injection and preemption notices, independent of MPI:
//  - `--revoke "rank=2@30s,rank=3@step=400"`: real revocations at chosen times (the process
//    signals itself, SIGKILL unless the entry names another signal);
//  - `--revocation-model`: lifetimes sampled from a table of the cumulative fraction of servers
//    revoked by age (the GCE preemptible model is built in; tables are data files);
//  - the notice signals (SIGTERM, SIGUSR1) that cloud shutdown hooks and Slurm deliver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// One `--revoke` entry: at `seconds` of this process's run time, at global step `step`, or in
// the middle of writing its `ckpt_write`-th checkpoint (rank 0 only; a test of torn writes).
struct RevokeEntry {
  int rank = -1;
  double seconds = -1;
  std::int64_t step = -1;
  std::int64_t ckpt_write = -1;
  int signal = 9;  // SIGKILL
};

// Parses "rank=R@30s", "rank=R@2.5m", "rank=R@step=N", "rank=R@ckpt=N", each optionally
// followed by ":KILL", ":TERM" or ":USR1", comma-separated. Throws UsageError.
std::vector<RevokeEntry> parse_revoke(const std::string& spec);
std::string signal_name(int signo);

// Cumulative fraction of servers revoked by age, linear between rows.
class RevocationModel {
 public:
  // "gce" (built in) or the path of a table file (see dist/revocation_gce.csv). Throws
  // DataError naming the file and line.
  static RevocationModel load(const std::string& name_or_file);
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

// Preemption notices: SIGTERM and SIGUSR1 set a flag instead of ending the process.
void install_notice_handlers();
// The notice signal received (0: none yet).
int notice_signal();

}  // namespace mt
