// Device speed emulation (`--emulate-device`, `--emulate-scale`): real processes, real MPI, real
// gradients, only the compute speed is emulated. Each worker step (or single-process step) is
// padded to its device's step time from a table, times the scale, times a per-step jitter factor;
// a step whose real compute is slower than that is not shortened (the metrics show it).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "app/config.hpp"

namespace mt {

struct DeviceSpeed {
  double step_seconds = 0;  // one step of the reference workload (ResNet-32, batch 128)
  double jitter_cv = 0;     // coefficient of variation of a step's time
};

class DeviceTable {
 public:
  // The shipped table: K80, P100 and V100 step times of the paper's workload, with their sources
  // (the text that shipped_text() returns, also printed by `mpi_trainer devices`).
  static DeviceTable shipped();
  static const char* shipped_text();
  // A text file, one device per line: `NAME STEP_SECONDS [JITTER_CV]` (spaces, tabs or commas;
  // `#` comments; a header line starting with `name` skipped). Throws DataError naming the line.
  static DeviceTable from_file(const std::string& path);
  // Throws UsageError naming the known devices.
  const DeviceSpeed& at(const std::string& name) const;
  bool has(const std::string& name) const { return devices_.count(name) > 0; }
  std::vector<std::string> names() const;
  std::string listed() const;  // the names, comma-separated
  std::size_t size() const { return devices_.size(); }
  const std::string& source() const { return source_; }

 private:
  static DeviceTable parse(std::istream& in, const std::string& what);
  std::map<std::string, DeviceSpeed> devices_;
  std::string source_;
};

// What one process emulates: none when `device` is empty.
struct Emulation {
  std::string device;
  double step_seconds = 0;  // the table's time times --emulate-scale
  double jitter_cv = 0;
  std::string table;        // "shipped", or the table file's path
  bool on() const { return !device.empty(); }
};

// The emulation of each process that trains: `types` holds each worker's instance type (one entry
// for a single process or a joiner: --instance-type). --emulate-device NAME emulates NAME on every
// one; `worker-types` each worker's own type in the shipped table; a FILE each worker's type in
// that table (or its only device for all). Empty vector entries: off. Throws UsageError/DataError.
std::vector<Emulation> emulations(const TrainConfig& cfg, const std::vector<std::string>& types);
// "k80" when every entry emulates k80, else the list, comma-separated; "" when off.
std::string describe(const std::vector<Emulation>& e);
// ", emulating k80 (steps of 0.011 s)" for a progress header; "" when off.
std::string emulating_note(const TrainConfig& cfg, const std::vector<Emulation>& e);
// For the metrics: {"table", "scale", "devices": [...], "step_seconds": [...]} (one entry per
// process), or null when off.
nlohmann::ordered_json emulation_json(const TrainConfig& cfg, const std::vector<Emulation>& e);

// The seed of process `rank`'s jitter (a single process: 0): each its own, the same on every run.
std::uint64_t pacer_seed(std::uint64_t seed, int rank);

// Pads a step to its emulated time: begin() at the step's start, finish() at its end sleeps until
// target = step_seconds * jitter factor (log-normal, mean 1, CV jitter_cv; deterministic per seed)
// has passed since begin(), and returns the step's time, padding included. Off: no padding.
class StepPacer {
 public:
  StepPacer(const Emulation& e, std::uint64_t seed);
  void begin();
  double finish();
  // The next step's target: step_seconds times a jitter factor (finish() draws one per step).
  double draw_target();
  // Steps paced so far, and those whose real compute already took longer than the target.
  std::int64_t steps() const { return steps_; }
  std::int64_t slower_than_target() const { return slower_; }

 private:
  Emulation e_;
  std::mt19937_64 rng_;
  std::lognormal_distribution<double> jitter_;
  std::chrono::steady_clock::time_point t0_;
  std::int64_t steps_ = 0, slower_ = 0;
};

}  // namespace mt
