// Preemption notices and the names messages give to signals and processes (ps/resilience/notices.hpp).
#include "ps/resilience/notices.hpp"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace mt {

namespace {

volatile std::sig_atomic_t g_notice = 0;

extern "C" void on_notice(int signo) {
  if (g_notice == 0) g_notice = signo;
}

// The steady clock in nanoseconds, as a ticker thread last saw it (every 100 ms while the process
// runs; a stopped process does not tick), and when that thread last found itself behind by more
// than a second (a resume it saw before the SIGCONT's handler ran).
std::atomic<std::int64_t> g_tick_ns{0};
std::atomic<std::int64_t> g_resumed_ns{0};

std::int64_t steady_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// SIGCONT to a process that was not stopped: Open MPI's mpirun ending the job (its SIGTERM follows
// --mca odls_base_sigkill_timeout seconds later, and SIGKILL as long again). After a real stop
// (Slurm's suspend, Ctrl-Z, a debugger) the ticker is behind by the stopped time, or it ran first
// after the resume and saw its own gap: a resume, not a notice (the ticker first was seen on a
// loaded machine: a woken worker that rejoined then left on the "notice").
extern "C" void on_continue(int) {
  const std::int64_t now = steady_ns();
  if (g_notice == 0 && now - g_tick_ns.load() < 1000000000 && now - g_resumed_ns.load() > 1000000000)
    g_notice = SIGCONT;
}

}  // namespace

std::string signal_name(int signo) {
  switch (signo) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    case SIGCONT: return "SIGCONT";
    default: return "signal " + std::to_string(signo);
  }
}

namespace {

void catch_signal(int signo, void (*handler)(int), int flags) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | flags;
  MT_CHECK_POSIX(sigaction(signo, &sa, nullptr) == 0);
}

}  // namespace

void install_notice_handlers() {
  for (const int s : {SIGTERM, SIGUSR1})
    catch_signal(s, on_notice, 0);
}

// The first SIGINT is a notice; the handler is then reset, so a second one ends the process.
void install_interrupt_handler() { catch_signal(SIGINT, on_notice, SA_RESETHAND); }

void install_job_end_handler() {
  g_tick_ns = steady_ns();
  std::thread([] {
    for (;;) {
      const std::int64_t now = steady_ns();
      if (now - g_tick_ns.load() > 1000000000) g_resumed_ns = now;
      g_tick_ns = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }).detach();
  catch_signal(SIGCONT, on_continue, 0);
}

int notice_signal() { return g_notice; }

std::string worker_label(int rank) {
  return rank >= 0 ? "worker rank " + std::to_string(rank)
                   : "joined worker (pid " + std::to_string(static_cast<long>(getpid())) + ")";
}

}  // namespace mt
