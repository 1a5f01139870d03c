// An LD_PRELOAD shim that makes fsync fail with EIO for checkpoint files, as a disk that reports a
// write error does (bench/faults/chaos.sh, scenario fsync-fail; issue 17). Nothing else changes: every
// other call, and fsync of any other file, goes to the C library.
//
//   MT_FSYNC_FAULT=FIRST:COUNT LD_PRELOAD=build/release/bench/libmt_fsync_fault.so COMMAND
//
// Counting the fsync calls on files whose name ends in ".h5.tmp" (a checkpoint being written,
// ckpt/checkpoint.cpp) from 1, calls FIRST to FIRST+COUNT-1 fail with EIO without syncing. A
// missing or malformed MT_FSYNC_FAULT fails none. Each failure is reported on stderr once, so a
// log shows where the fault came from.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using FsyncFn = int (*)(int);

struct Plan {
  long first = 0;
  long count = 0;
};

Plan plan_from_env() {
  Plan p;
  const char* v = std::getenv("MT_FSYNC_FAULT");
  if (v == nullptr) return p;
  char* end = nullptr;
  const long first = std::strtol(v, &end, 10);
  if (end == v || *end != ':') return p;
  const char* rest = end + 1;
  const long count = std::strtol(rest, &end, 10);
  if (end == rest || *end != '\0' || first < 1 || count < 0) return p;
  p.first = first;
  p.count = count;
  return p;
}

bool is_checkpoint_temporary(int fd) {
  char link[64];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  char target[PATH_MAX];
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  static constexpr char kSuffix[] = ".h5.tmp";
  const std::size_t len = static_cast<std::size_t>(n), suffix = sizeof kSuffix - 1;
  return len >= suffix && std::memcmp(target + len - suffix, kSuffix, suffix) == 0;
}

std::atomic<long> g_calls{0};

}  // namespace

extern "C" int fsync(int fd) {
  static const FsyncFn real = reinterpret_cast<FsyncFn>(::dlsym(RTLD_NEXT, "fsync"));
  static const Plan plan = plan_from_env();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (plan.count > 0 && is_checkpoint_temporary(fd)) {
    const long call = ++g_calls;
    if (call >= plan.first && call < plan.first + plan.count) {
      std::fprintf(stderr, "fsync_fault: fsync of a checkpoint file (call %ld) fails with EIO\n", call);
      errno = EIO;
      return -1;
    }
  }
  return real(fd);
}
