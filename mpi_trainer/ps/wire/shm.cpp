#include "ps/wire/shm.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>

#include "core/error.hpp"

namespace mt {
namespace {

std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& pending() {
  static std::set<std::string> names;
  return names;
}

// "mt-ps-<host>-": this host's segment names (the host shortened, '/' and '.' replaced).
std::string host_prefix() {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string h(host);
  for (auto& c : h)
    if (c == '/' || c == '.') c = '_';
  return "mt-ps-" + h.substr(0, 24) + "-";
}

}  // namespace

int unlink_stale_segments() {
  const std::string prefix = host_prefix();
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<pid>-<counter>-<random>"
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (pid <= 0 || end == rest.c_str() || *end != '-') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

std::shared_ptr<ShmSegment> ShmSegment::create(std::size_t bytes) {
  static std::atomic<unsigned> counter{0};
  // A process killed between creating its segment and its peer mapping it (SIGKILL, MPI_Abort of
  // the job) leaves the name behind: the first segment a process creates clears such leftovers.
  static const int stale = unlink_stale_segments();
  (void)stale;
  std::random_device rd;
  std::string name = "/";  // appended, not "/" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  name += host_prefix() + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(rd());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  MT_CHECK_POSIX(fd >= 0);
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    pending().insert(name);
  }
  const bool sized = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  const int saved = errno;
  void* base = sized ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int saved_map = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    errno = sized ? saved_map : saved;
    MT_CHECK_POSIX(false);
  }
  return std::make_shared<ShmSegment>(Private{}, name, base, bytes);
}

std::shared_ptr<ShmSegment> ShmSegment::open(const std::string& name, std::size_t bytes, std::string* why) {
  const auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return std::shared_ptr<ShmSegment>();
  };
  if (name.rfind("/mt-ps-", 0) != 0 || name.find('/', 1) != std::string::npos) return fail("not a segment name");
  // Made on another host (its name carries the maker's hostname): plain messages, even where the
  // name could be opened. Nodes that share one kernel and one /dev/shm but are separate hosts on
  // the network (network namespaces, launch/netns-cluster/; containers sharing /dev/shm) would
  // otherwise pass their pushes through memory instead of over the link between them.
  std::string mine = "/";  // appended, not "/" + ...: GCC 12 warns falsely (-Wrestrict)
  mine += host_prefix();
  if (name.rfind(mine, 0) != 0) return fail("made on another host");
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return fail(std::string("shm_open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    close(fd);
    return fail("size " + std::to_string(st.st_size) + ", expected " + std::to_string(bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  if (base == MAP_FAILED) return fail(std::string("mmap: ") + std::strerror(saved));
  auto seg = std::make_shared<ShmSegment>(Private{}, name, base, bytes);
  seg->unlink();  // both sides have it mapped now
  return seg;
}

void ShmSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());  // ENOENT when the other side was first: fine
  std::lock_guard<std::mutex> lock(pending_mutex());
  pending().erase(name_);
}

ShmSegment::~ShmSegment() {
  unlink();
  munmap(base_, bytes_);
}

void unlink_pending_segments() noexcept {
  // Called on the way out: no lock (the process is ending; a holder would be mid-insert).
  for (const auto& n : pending())
    shm_unlink(n.c_str());
}

bool shm_transport_enabled() {
  const char* v = std::getenv("MT_PS_SHM");
  return !(v && std::string(v) == "0");
}

}  // namespace mt
