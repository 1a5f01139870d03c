#include "app/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace mt {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_) throw DataError("--metrics " + path + ": cannot open for writing: " + std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::ordered_json& event) {
  if (!out_.is_open()) return;
  out_ << event.dump() << '\n';
  out_.flush();
  if (!out_) throw DataError("--metrics " + path_ + ": write failed (disk full?)");
}

}  // namespace mt
