#include "app/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>

#include "core/error.hpp"

namespace mt {

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string format_progress(const ProgressLine& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.4f  train_acc %.3f  lr %.4f  img/s %.1f  workers %d  staleness %.1f",
                static_cast<long long>(p.step), static_cast<long long>(p.train_steps), p.loss, p.train_accuracy, p.lr,
                p.images_per_second, p.workers, p.staleness);
  return buf;
}

MetricsWriter::MetricsWriter(const std::string& path, const std::string& tensorboard_dir)
    : path_(path), tensorboard_(tensorboard_dir) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_) throw DataError("--metrics " + path + ": cannot open for writing: " + std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::ordered_json& event) {
  if (!enabled() || (gate_ && !gate_())) return;
  if (tensorboard_.enabled()) {
    const auto wall = event.find("unix_time");
    const auto step = event.find("global_step");
    tensorboard_.scalars(step != event.end() && step->is_number_integer() ? step->get<std::int64_t>() : 0,
                         wall != event.end() && wall->is_number() ? wall->get<double>() : -1,
                         tensorboard_scalars(event));
  }
  if (!out_.is_open()) return;
  out_ << event.dump() << '\n';
  out_.flush();
  if (!out_) throw DataError("--metrics " + path_ + ": write failed (disk full?)");
}

}  // namespace mt
