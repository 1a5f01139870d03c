// The run's status file (docs/user-guide.md, "Run status"): what a launcher reads to decide on a
// rerun, written atomically.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "app/ps_report.hpp"
#include "core/atomic_file.hpp"
#include "core/clock.hpp"

namespace mt {

std::string run_status_path(const TrainConfig& cfg) {
  if (!cfg.status_file.empty()) return cfg.status_file;
  if (cfg.ckpt_dir.empty()) return {};
  return (std::filesystem::path(cfg.ckpt_dir) / "run-status.json").string();
}

void write_run_status(const std::string& path, nlohmann::ordered_json fields) {
  if (path.empty()) return;
  std::error_code ec;
  create_private_directories(std::filesystem::path(path).parent_path(), ec);  // else the write says why
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  fields["pid"] = static_cast<long>(getpid());
  fields["host"] = host;
  fields["unix_time"] = unix_now();
  write_file_atomically(path, fields.dump() + '\n');
}

std::string read_run_state(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("state") || !j["state"].is_string()) return {};
  return j["state"].get<std::string>();
}

void write_failed_status(const TrainConfig& cfg, int exit_code, const std::string& what) {
  try {
    write_run_status(run_status_path(cfg), nlohmann::ordered_json{{"state", "failed"},
                                                                  {"exit_code", exit_code},
                                                                  {"global_step", nullptr},
                                                                  {"train_steps", cfg.train_steps > 0
                                                                                      ? nlohmann::ordered_json(cfg.train_steps)
                                                                                      : nlohmann::ordered_json()},
                                                                  {"error", what}});
  } catch (...) {
  }
}

}  // namespace mt
