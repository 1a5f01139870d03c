// Background threads (checkpoint writer, background evaluation) yield the CPU to the threads
// that train or serve pushes. On a busy node the kernel otherwise lets a freshly woken writer
// preempt the parameter server right after it handed over a snapshot, which is measured as
// several milliseconds of stall (bench/README.md).
#pragma once

#include <string>

namespace mt {

// The nice value of background threads (checkpoint writer, background evaluation).
inline constexpr int kBackgroundNice = 10;

// Lowers the calling thread's scheduling priority: SCHED_BATCH (it never preempts a running
// thread on waking) and `nice` (Linux: per thread; threads it creates later inherit both).
// Returns an empty string on success, else why it failed; failure is harmless (the thread keeps
// its priority), so callers report it once and go on.
std::string lower_this_thread_priority(int nice, bool batch);

}  // namespace mt
