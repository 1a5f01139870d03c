// JSON Lines metrics (docs/architecture.md, "Outputs and exit codes"): one object per line, flushed as written so a job killed
// mid-run leaves every complete line readable. The last line of a finished run is the summary.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "app/tensorboard.hpp"

namespace mt {

// "1:02:03" (hours:minutes:seconds), "?" when unknown (negative or not finite).
std::string format_eta(double seconds);

// The start of a progress line, the same for every kind of run:
// "step 200/1000  loss 1.2345  train_acc 0.512  lr 0.1000  img/s 812.3  workers 3  staleness 1.9".
// The caller appends one time estimate: the live prediction (format_prediction, "finish ~0:01:40
// $0.123"), which follows the workers running now and their revocation odds; the plain
// rate-based estimate goes to the metrics only, as "eta_seconds" (docs/user-guide.md, "Progress").
struct ProgressLine {
  std::int64_t step = 0, train_steps = 0;
  double loss = 0, train_accuracy = 0, lr = 0, images_per_second = 0;
  int workers = 1;
  double staleness = 0;
};
std::string format_progress(const ProgressLine& p);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Empty path: writes nothing. Throws DataError when the file cannot be opened. A TensorBoard
  // directory (--tensorboard) also gets the events' scalars (app/tensorboard.hpp).
  explicit MetricsWriter(const std::string& path, const std::string& tensorboard_dir = {});
  void write(const nlohmann::ordered_json& event);
  bool enabled() const { return out_.is_open() || tensorboard_.enabled(); }
  // Events are written only while `open` says so (a superseded parameter server writes none).
  void set_gate(std::function<bool()> open) { gate_ = std::move(open); }

 private:
  std::string path_;
  std::ofstream out_;
  EventFileWriter tensorboard_;
  std::function<bool()> gate_;
};

}  // namespace mt
