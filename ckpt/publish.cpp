// Publishing a checkpoint (temporary file, fsync, rename, fsync of the directory, LATEST) and
// retention of the newest valid ones.
#include <charconv>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "ckpt/checkpoint.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/image.hpp"
#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"

namespace mt::ckpt {

using namespace detail;

namespace {

// Checkpoint files known to be valid, by path, with the size and modification time they had:
// retention runs after every publish and would otherwise read every kept file again. A file that
// changed since (another size or time) is verified anew.
struct KnownValid {
  std::mutex mutex;
  std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> files;

  static std::optional<std::pair<std::uintmax_t, fs::file_time_type>> identity(const fs::path& file) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    const auto mtime = fs::last_write_time(file, ec);
    if (ec) return std::nullopt;
    return std::make_pair(size, mtime);
  }
  void remember(const fs::path& file) {
    if (const auto id = identity(file)) {
      std::lock_guard<std::mutex> lock(mutex);
      files[file.string()] = *id;
    }
  }
  bool known(const fs::path& file) {
    const auto id = identity(file);
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = files.find(file.string());
    return id && it != files.end() && it->second == *id;
  }
};
KnownValid& known_valid() {
  static KnownValid k;
  return k;
}

bool verifies(const fs::path& file) {
  if (known_valid().known(file)) return true;
  if (!verify(file).ok) return false;
  known_valid().remember(file);
  return true;
}

}  // namespace

void retain(const fs::path& dir, int keep, const fs::path& written) {
  if (keep <= 0) return;
  int kept = 0;
  std::error_code ec;
  for (const auto& file : list(dir)) {
    if (file == written) {  // just published: never removed, and it counts
      ++kept;
      continue;
    }
    if (kept < keep) {
      // Newer than the kept set is complete: a valid one is kept; a damaged one does not count
      // and stays for inspection (resume passes over it and says so).
      if (verifies(file)) ++kept;
      continue;
    }
    fs::remove(file, ec);  // older than the newest `keep` valid ones: valid or not
  }
}

fs::path publish(const fs::path& dir, const Checkpoint& c, int keep, PublishStats* stats,
                 const std::function<void()>& before_rename) {
  quiet_hdf5();
  const auto t0 = Clock::now();
  std::error_code ec;
  if (!create_private_directories(dir, ec)) throw CheckpointError(dir.string() + ": cannot create checkpoint directory: " + ec.message());
  // Not a copy of the checkpoint with the time set (a few MB copied on every write).
  const double created_unix = c.created_unix != 0 ? c.created_unix : unix_now();
  const fs::path final_path = dir / file_name(c.global_step);
  const fs::path tmp = fs::path(final_path.string() + ".tmp");
  bool rewritten = false;
  const std::vector<char>& image = file_image(c, created_unix, tmp, &rewritten);
  const auto t_image = Clock::now();
  write_durably(tmp, image, c.global_step);
  const auto t1 = Clock::now();
  try {
    if (before_rename) before_rename();
    rename_durably(tmp, final_path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  const auto t_durable = Clock::now();
  // LATEST names the newest checkpoint, for scripts; readers do not depend on it.
  write_file_atomically(dir / "LATEST", final_path.filename().string() + '\n');
  const auto t2 = Clock::now();  // durable and published
  retain(dir, keep, final_path);
  // Leftovers of an interrupted earlier write are never valid; remove those older than us.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".h5.tmp")) {
      const auto s = step_of(name.substr(0, name.size() - 4));
      if (s && *s < c.global_step) fs::remove(e.path(), ec);
    }
  }
  if (stats) {
    stats->write_seconds = seconds_between(t0, t1);
    stats->sync_seconds = seconds_between(t1, t2);
    stats->image_seconds = seconds_between(t0, t_image);
    stats->durable_seconds = seconds_between(t0, t_durable);
    stats->bytes = static_cast<std::int64_t>(fs::file_size(final_path, ec));
    stats->rewritten = rewritten;
  }
  return final_path;
}

std::int64_t read_ps_epoch(const fs::path& dir) {
  std::ifstream in(dir / "ps-epoch");
  if (!in) {
    std::error_code ec;
    if (!fs::exists(dir / "ps-epoch", ec)) return 0;
    throw CheckpointError((dir / "ps-epoch").string() + ": cannot be read");
  }
  std::string text;
  std::getline(in, text);
  std::int64_t e = -1;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), e);
  if (err != std::errc() || end != text.data() + text.size() || e < 0)
    throw CheckpointError((dir / "ps-epoch").string() + ": not an epoch number: '" + text + "'");
  return e;
}

std::int64_t claim_ps_epoch(const fs::path& dir) {
  std::error_code ec;
  if (!create_private_directories(dir, ec))
    throw CheckpointError(dir.string() + ": cannot create checkpoint directory: " + ec.message());
  const std::int64_t e = read_ps_epoch(dir) + 1;
  write_file_atomically(dir / "ps-epoch", std::to_string(e) + '\n');
  return e;
}

}  // namespace mt::ckpt
