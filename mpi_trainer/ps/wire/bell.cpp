#include "ps/wire/bell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <vector>

#include "core/error.hpp"
#include "ps/wire/transport.hpp"

namespace mt {
namespace {

std::atomic_ref<std::uint32_t> word(std::uint32_t* p) { return std::atomic_ref<std::uint32_t>(*p); }

long futex(std::uint32_t* addr, int op, std::uint32_t val, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return syscall(SYS_futex, addr, op, val, timeout, nullptr, 0);
}

// A sleep ends with a wake-up, a timeout, a signal, or at once when a counter had moved: anything
// else is a bad address or argument (ours).
void check_sleep(long rc, const char* call) {
  if (rc >= 0 || errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR) return;
  check_posix(false, call, __FILE__, __LINE__);
}

#ifdef SYS_futex_waitv
bool have_waitv() {
  static const bool ok = [] {
    // No futexes at all: EINVAL where the call exists; ENOSYS where it does not, EPERM where a
    // seccomp filter (a container's) refuses it: then several doorbells fall back to naps.
    errno = 0;
    return syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, CLOCK_MONOTONIC) == -1 && errno == EINVAL;
  }();
  return ok;
}
#else
bool have_waitv() { return false; }
#endif

void sleep_on(std::span<const Doorbell> bells, std::span<const std::uint32_t> seen, long timeout_us) {
  // Raised before the kernel compares the counters: a ring after this sees it and wakes us; a
  // ring before it moved a counter, and the kernel returns at once (EAGAIN).
  for (const Doorbell& b : bells)
    word(b.sleeping).store(1, std::memory_order_seq_cst);
  if (bells.size() == 1) {
    const timespec t{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
    check_sleep(futex(bells[0].count, FUTEX_WAIT, seen[0], &t), "futex(FUTEX_WAIT)");
  } else {
#ifdef SYS_futex_waitv
    thread_local std::vector<futex_waitv> w;
    w.resize(bells.size());
    for (std::size_t i = 0; i < bells.size(); ++i)
      w[i] = futex_waitv{seen[i], reinterpret_cast<std::uintptr_t>(bells[i].count), FUTEX_32, 0};
    timespec t{};
    MT_CHECK_POSIX(clock_gettime(CLOCK_MONOTONIC, &t) == 0);
    t.tv_nsec += (timeout_us % 1000000) * 1000;
    t.tv_sec += timeout_us / 1000000 + t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    check_sleep(syscall(SYS_futex_waitv, w.data(), static_cast<unsigned>(w.size()), 0u, &t, CLOCK_MONOTONIC),
                "futex_waitv");
#endif
  }
  for (const Doorbell& b : bells)
    word(b.sleeping).store(0, std::memory_order_relaxed);
}

}  // namespace

std::uint32_t Doorbell::seen() const { return word(count).load(std::memory_order_acquire); }

void Doorbell::ring() const {
  word(count).fetch_add(1, std::memory_order_seq_cst);
  // A failed wake-up only means the sleeper wakes at its timeout.
  if (word(sleeping).load(std::memory_order_seq_cst) != 0) futex(count, FUTEX_WAKE, INT_MAX, nullptr);
}

bool can_wait_on(std::size_t n) { return n <= 1 || (n <= FUTEX_WAITV_MAX && have_waitv()); }

bool wait_bells(std::span<const Doorbell> bells, std::span<const std::uint32_t> seen, long timeout_us) {
  if (bells.empty() || !can_wait_on(bells.size()))
    nap_microseconds(timeout_us);
  else
    sleep_on(bells, seen, timeout_us);
  for (std::size_t i = 0; i < bells.size(); ++i)
    if (bells[i].seen() != seen[i]) return true;
  return false;
}

void BellWait::clear() {
  bells_.clear();
  seen_.clear();
  all_ring_ = true;
}

void BellWait::add(const Doorbell& bell) {
  if (!bell) {
    all_ring_ = false;
    return;
  }
  bells_.push_back(bell);
  seen_.push_back(bell.seen());  // before the test: a message posted after it moves the counter
}

void BellWait::sleep(Backoff& backoff) const {
  const bool long_naps = all_ring_ && can_wait_on(bells_.size());
  // Rung: the message is posted and arrives within microseconds; look again at once.
  if (wait_bells(bells_, seen_, backoff.next(long_naps ? kDoorbellNapUs : backoff.cap()))) backoff.rearm();
}

}  // namespace mt
