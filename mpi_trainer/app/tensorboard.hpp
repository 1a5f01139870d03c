// --tensorboard DIR: the run's metrics as TensorBoard scalars, written as the run goes by the
// process that writes the metrics (docs/user-guide.md, "Watch a run").
//
// An event file is a sequence of TFRecords (a little-endian length, its masked CRC32C, the data,
// the data's masked CRC32C), each the bytes of a tensorflow.Event protocol buffer: the first names
// the format ("brain.Event:2"), the others carry a Summary of scalar values (a tag and a float)
// at a global step and a wall time. The three messages have six fields between them: they are
// encoded here by hand (no C++ TFRecord writer or CRC32C library is packaged in Debian 12, and
// protobuf's code generator would be a build dependency for those six fields); TensorBoard's own
// reader checks what this writes (tests/test_tensorboard.sh).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mt {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), and TFRecord's masked form of it.
std::uint32_t crc32c(std::string_view bytes);
std::uint32_t masked_crc32c(std::string_view bytes);

// One event file. A resumed run opens a new one in the same directory: TensorBoard reads every
// file of a directory as one run, in the order of their names (their time of creation).
class EventFileWriter {
 public:
  EventFileWriter() = default;
  // Creates the directory if needed. Throws DataError when the file cannot be opened.
  explicit EventFileWriter(const std::string& dir);
  bool enabled() const { return out_.is_open(); }
  const std::string& path() const { return path_; }
  // Scalars of one step, one record, at `wall_time` (Unix seconds; negative: now); flushed, so that a running TensorBoard sees them at once.
  // Throws DataError when the write fails.
  void scalars(std::int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);

 private:
  void record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

// The scalars a metrics event stands for (none for most events): progress (train/loss,
// train/accuracy, train/lr, train/momentum, throughput/images_per_second, workers/active,
// staleness/mean, staleness/dropped_pushes, time/predicted_seconds_left, cost/predicted_usd and,
// per worker, worker/RANK/images_per_second and worker/RANK/staleness), eval (test/accuracy,
// test/loss), revocation and join (workers/active), summary (cost/usd, time/run_seconds).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::ordered_json& event);

}  // namespace mt
