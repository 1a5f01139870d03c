// Reading a checkpoint that may be hostile (ckpt/checkpoint.hpp, read_contained): libhdf5 is
// Debian's, and a damaged file can crash it or make it loop for good (bench/fuzz.sh found one:
// bench/fuzz-findings/checkpoint/). The file is first read by a forked child with a deadline; the
// parent reads it only when the child read it cleanly. A file the child fails to read with an
// ordinary error is never parsed here: the child sends its message through a pipe (a damaged file
// can overflow libhdf5's heap without crashing it and still end in an ordinary error; read again
// here, it corrupted the parent's heap: found by the unit suite with the fuzzer's seeds).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "ckpt/checkpoint.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"

namespace mt::ckpt {

namespace fs = std::filesystem;

namespace {
double deadline_for(const fs::path& file) {
  if (const char* v = std::getenv("MT_CKPT_READ_SECONDS"); v && *v) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end && *end == '\0' && s > 0) return s;
  }
  std::error_code ec;
  const auto bytes = fs::file_size(file, ec);
  return 10.0 + (ec ? 0.0 : double(bytes) / 10e6);
}

// What the child wrote before it exited (at most a pipe's buffer: it writes at most 4 KB).
std::string drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return out;
    }
  }
}

// Closes both ends of a pipe when the parent is done with it.
struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (const int f : fd)
      if (f >= 0) ::close(f);
  }
  void close_write() {
    ::close(fd[1]);
    fd[1] = -1;
  }
};
}  // namespace

Checkpoint read_contained(const fs::path& file) {
  const double seconds = deadline_for(file);
  Pipe message;  // the child's error, when it fails cleanly
  if (::pipe2(message.fd, O_CLOEXEC) != 0)
    throw CheckpointError(file.string() + ": pipe to check it first: " + std::strerror(errno));
  const pid_t child = ::fork();
  if (child < 0) throw CheckpointError(file.string() + ": fork to check it first: " + std::strerror(errno));
  // The child's exit codes: 0 it reads, kFailsCleanly it throws CheckpointError; anything else
  // (another exception, or a sanitizer's report, whose exit code is 1) means the library broke.
  constexpr int kFailsCleanly = 41;
  if (child == 0) {  // only the read, then _exit: no destructor, no buffer of the parent flushed
    int code = 0;
    try {
      (void)read(file);
    } catch (const CheckpointError& e) {
      code = kFailsCleanly;
      const std::size_t n = std::min<std::size_t>(std::strlen(e.what()), 4096);
      if (::write(message.fd[1], e.what(), n) != static_cast<ssize_t>(n)) code = kFailsCleanly + 1;
    } catch (...) {
      code = kFailsCleanly + 1;
    }
    ::_exit(code);
  }
  message.close_write();
  const auto t0 = Clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) throw CheckpointError(file.string() + ": waitpid: " + std::strerror(errno));
    if (since(t0) > seconds) {
      ::kill(child, SIGKILL);
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      char text[32];
      std::snprintf(text, sizeof text, "%g", seconds);
      throw CheckpointError(file.string() + ": reading it did not finish within " + text +
                            " s (the HDF5 library loops on this damaged or hostile file); not opened");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status))
    throw CheckpointError(file.string() + ": reading it crashed the HDF5 library (signal " +
                          std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) +
                          "): a damaged or hostile file; not opened");
  if (WIFEXITED(status) && WEXITSTATUS(status) == kFailsCleanly) {
    const std::string why = drain(message.fd[0]);
    throw CheckpointError(why.empty() ? file.string() + ": not readable" : why);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw CheckpointError(file.string() + ": reading it failed in an unexpected way (exit " +
                          std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                          "): a damaged or hostile file; not opened");
  return read(file);  // the child read it cleanly
}

}  // namespace mt::ckpt
