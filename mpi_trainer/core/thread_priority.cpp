#include "core/thread_priority.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mt {

std::string lower_this_thread_priority(int nice, bool batch) {
#ifdef __linux__
  // SCHED_BATCH: the kernel never lets this thread preempt a running one when it wakes up, so
  // handing it work does not deschedule the thread that handed it over; it still gets its
  // fair share of the CPU, weighted by the nice value.
  sched_param param{};
  param.sched_priority = 0;
  if (batch)
    if (const int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &param); rc != 0)
      return std::string("pthread_setschedparam(SCHED_BATCH): ") + std::strerror(rc);
  // PRIO_PROCESS with a thread id sets that thread's nice value only.
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, nice) != 0)
    return std::string("setpriority(") + std::to_string(nice) + "): " + std::strerror(errno);
  return {};
#else
  (void)nice;
  (void)batch;
  return "thread priorities are only set on Linux";
#endif
}

}  // namespace mt
