// JSON Lines metrics (docs/architecture.md, "Outputs and exit codes"): one object per line, flushed as written so a job killed
// mid-run leaves every complete line readable. The last line of a finished run is the summary.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Empty path: writes nothing. Throws DataError when the file cannot be opened.
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::ordered_json& event);
  bool enabled() const { return out_.is_open(); }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace mt
