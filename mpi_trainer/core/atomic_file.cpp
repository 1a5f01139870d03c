#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace mt {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int saved) { return std::strerror(saved); }

}  // namespace

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(path.string() + ": open for fsync: " + errno_text(errno));
  const int r = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (r != 0) throw CheckpointError(path.string() + ": fsync: " + errno_text(saved));
}

void rename_durably(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError("rename " + from.string() + " -> " + to.string() + ": " + errno_text(errno));
  fsync_path(to.has_parent_path() ? to.parent_path() : fs::path("."), /*directory=*/true);
}

bool create_private_directories(const fs::path& dir, std::error_code& ec) {
  ec.clear();
  if (dir.empty() || fs::is_directory(dir, ec)) return !ec;
  ec.clear();
  const fs::path parent = dir.parent_path();
  if (!parent.empty() && parent != dir && !create_private_directories(parent, ec)) return false;
  if (::mkdir(dir.c_str(), kPrivateDirMode) == 0) return true;
  const int saved = errno;
  if (saved == EEXIST && fs::is_directory(dir, ec)) return true;  // created meanwhile by another rank
  ec = std::error_code(saved, std::generic_category());
  return false;
}

void write_file_atomically(const fs::path& path, std::string_view content, mode_t mode) {
  const fs::path tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());  // a leftover would keep its own mode through O_TRUNC
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw CheckpointError(tmp.string() + ": cannot create: " + errno_text(errno));
  std::string failure;
  for (std::size_t done = 0; done < content.size() && failure.empty();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      failure = "write: " + errno_text(errno);
    else
      done += static_cast<std::size_t>(n);
  }
  if (failure.empty() && ::fsync(fd) != 0) failure = "fsync: " + errno_text(errno);
  if (::close(fd) != 0 && failure.empty()) failure = "close: " + errno_text(errno);
  if (!failure.empty()) {
    ::unlink(tmp.c_str());
    throw CheckpointError(tmp.string() + ": " + failure);
  }
  try {
    rename_durably(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

std::string probe_writable_directory(const fs::path& dir) {
  std::error_code ec;
  if (!create_private_directories(dir, ec)) return dir.string() + ": cannot create the directory: " + ec.message();
  const fs::path probe = dir / (".mt-write-probe-" + std::to_string(static_cast<long>(::getpid())));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0) return dir.string() + ": cannot create a file in it: " + errno_text(errno);
  std::string failure;
  const char byte = 0;
  if (::write(fd, &byte, 1) != 1) failure = "write: " + errno_text(errno);
  if (failure.empty() && ::fsync(fd) != 0) failure = "fsync: " + errno_text(errno);
  if (::close(fd) != 0 && failure.empty()) failure = "close: " + errno_text(errno);
  if (::unlink(probe.c_str()) != 0 && failure.empty()) failure = "remove: " + errno_text(errno);
  return failure.empty() ? std::string() : dir.string() + ": " + failure;
}

}  // namespace mt
