// Fault injection (ps/inject/fault_injection.hpp).
#include "ps/inject/fault_injection.hpp"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/text.hpp"
#include "plan/revocation_model.hpp"
#include "ps/resilience/notices.hpp"

namespace mt {

namespace {

bool to_int64(const std::string& s, std::int64_t& v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15) return false;
  v = std::stoll(s);
  return true;
}

}  // namespace

std::string parse_duration(const std::string& text, double& seconds) {
  const char unit = text.empty() ? '\0' : text.back();
  const double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 0;
  if (scale == 0) return "a time needs a unit: s, m or h";
  double v = 0;
  if (!to_double(text.substr(0, text.size() - 1), v) || !(v >= 0)) return "bad time";
  seconds = v * scale;
  return {};
}

std::vector<RevokeEntry> parse_revoke(const std::string& spec) {
  std::vector<RevokeEntry> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    item = trim(item);
    if (item.empty()) continue;
    const auto bad = [&](const std::string& why) {
      return UsageError("--revoke: '" + item + "': " + why +
                        " (expected rank=R@30s, rank=R@2m, rank=R@step=N, rank=R@ckpt=N, rank=0@replica=N or "
                        "rank=R@takeover=N or rank=R@replay=N, optionally "
                        "followed by :KILL, :TERM or :USR1)");
    };
    RevokeEntry e;
    std::string body = item;
    if (const auto colon = body.rfind(':'); colon != std::string::npos) {
      const std::string sig = body.substr(colon + 1);
      if (sig == "KILL")
        e.signal = SIGKILL;
      else if (sig == "TERM")
        e.signal = SIGTERM;
      else if (sig == "USR1")
        e.signal = SIGUSR1;
      else
        throw bad("unknown signal '" + sig + "'");
      body = body.substr(0, colon);
    }
    const auto at = body.find('@');
    if (body.rfind("rank=", 0) != 0 || at == std::string::npos) throw bad("no rank=R@WHEN");
    std::int64_t rank = 0;
    if (!to_int64(body.substr(5, at - 5), rank) || rank > 1000000) throw bad("bad rank");
    e.rank = static_cast<int>(rank);
    const std::string when = body.substr(at + 1);
    if (when.rfind("step=", 0) == 0) {
      if (!to_int64(when.substr(5), e.step) || e.step < 1) throw bad("bad step (a global step >= 1)");
    } else if (when.rfind("ckpt=", 0) == 0) {
      if (!to_int64(when.substr(5), e.ckpt_write) || e.ckpt_write < 1) throw bad("bad checkpoint number (>= 1)");
      if (e.rank != 0) throw bad("@ckpt= applies to rank 0, the parameter server that writes checkpoints");
    } else if (when.rfind("replica=", 0) == 0) {
      if (!to_int64(when.substr(8), e.replica_send) || e.replica_send < 1) throw bad("bad replica number (>= 1)");
      if (e.rank != 0) throw bad("@replica= applies to rank 0, the parameter server that sends replicas");
    } else if (when.rfind("takeover=", 0) == 0) {
      if (!to_int64(when.substr(9), e.takeover) || e.takeover < 1) throw bad("bad takeover number (>= 1)");
    } else if (when.rfind("replay=", 0) == 0) {
      if (!to_int64(when.substr(7), e.replay) || e.replay < 1) throw bad("bad replay number (>= 1)");
    } else if (const std::string why = parse_duration(when, e.seconds); !why.empty()) {
      throw bad(why);
    }
    out.push_back(e);
  }
  return out;
}

std::map<std::int64_t, PushFault> parse_corrupt_push(const std::string& spec, int rank) {
  std::map<std::int64_t, PushFault> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    item = trim(item);
    if (item.empty()) continue;
    const auto bad = [&](const std::string& why) {
      return UsageError("--corrupt-push: '" + item + "': " + why +
                        " (expected rank=R@push=N:nan, :huge, :zero or :discard)");
    };
    const auto at = item.find('@'), colon = item.rfind(':');
    if (item.rfind("rank=", 0) != 0 || at == std::string::npos || colon == std::string::npos || colon < at)
      throw bad("no rank=R@push=N:KIND");
    std::int64_t r = 0, n = 0;
    if (!to_int64(item.substr(5, at - 5), r)) throw bad("bad rank");
    const std::string when = item.substr(at + 1, colon - at - 1), kind = item.substr(colon + 1);
    if (when.rfind("push=", 0) != 0 || !to_int64(when.substr(5), n) || n < 1) throw bad("bad push number (>= 1)");
    const PushFault f = kind == "nan"       ? PushFault::kNan
                        : kind == "huge"    ? PushFault::kHuge
                        : kind == "zero"    ? PushFault::kZero
                        : kind == "discard" ? PushFault::kDiscard
                                            : PushFault::kNone;
    if (f == PushFault::kNone) throw bad("unknown kind '" + kind + "'");
    if (r == rank) out[n] = f;
  }
  return out;
}

FaultPlan FaultPlan::make(const std::string& revoke, const std::string& model, std::uint64_t seed, double time_scale,
                          int num_ps, int rank, int size, const std::string& instance_type) {
  FaultPlan plan;
  for (const auto& e : parse_revoke(revoke)) {
    if (e.rank >= size)
      throw UsageError("--revoke: rank " + std::to_string(e.rank) + " is not in this job of " + std::to_string(size) +
                       " processes");
    if (e.rank == rank) plan.entries.push_back(e);
  }
  if (!model.empty()) {
    const auto m = RevocationModel::load(model, instance_type);
    // Each attempt of launch/restart_loop.sh runs on new servers: a new draw.
    if (const char* a = std::getenv("MT_RESTART_ATTEMPT")) seed += 7919 * std::strtoull(a, nullptr, 10);
    if (rank >= num_ps) plan.lifetime_seconds = sampled_lifetime_seconds(m, seed, rank, time_scale);
  }
  return plan;
}

void FaultPlan::fire(int rank, int signo, const std::string& why) {
  const double now = unix_now();
  std::cout << std::flush;
  std::cerr << "mpi_trainer: " << (rank >= 0 ? "rank " + std::to_string(rank) : worker_label(rank)) << ": revoked ("
            << why << "): " << signal_name(signo) << " to itself at unix " << std::fixed << std::setprecision(3) << now
            << '\n'
            << std::flush;
  // The injected fault ends the process as a revoked server's end does; should the signal not be
  // raised (an invalid number), SIGKILL does it.
  if (std::raise(signo) != 0) ::kill(::getpid(), SIGKILL);
}

void FaultPlan::started_at(std::int64_t step) {
  for (auto& e : entries)
    if (e.step > 0 && e.step <= step) e.step = -1;
}

void FaultPlan::at_step(int rank, std::int64_t step) {
  for (auto& e : entries)
    if (e.step > 0 && step >= e.step) {
      e.step = -1;
      if (before_kill) before_kill();
      fire(rank, e.signal, "--revoke at global step " + std::to_string(step));
    }
}

void FaultPlan::at_time(int rank) {
  const double t = since(start);
  for (auto& e : entries)
    if (e.seconds >= 0 && t >= e.seconds) {
      e.seconds = -1;
      if (before_kill) before_kill();
      fire(rank, e.signal, "--revoke after " + std::to_string(t).substr(0, 6) + " s");
    }
  if (lifetime_seconds >= 0 && t >= lifetime_seconds) {
    lifetime_seconds = -1;
    fire(rank, SIGKILL, "--revocation-model lifetime ended after " + std::to_string(t).substr(0, 6) + " s");
  }
}

void FaultPlan::at_replica(int rank, std::int64_t nth, std::int64_t global_step) {
  for (auto& e : entries)
    if (e.replica_send > 0 && nth >= e.replica_send) {
      e.replica_send = -1;
      fire(rank, e.signal,
           "--revoke as replica " + std::to_string(nth) + " (global step " + std::to_string(global_step) +
               ") left for the standby");
    }
}

void FaultPlan::at_takeover(int rank, int nth) {
  for (auto& e : entries)
    if (e.takeover > 0 && nth >= e.takeover) {
      e.takeover = -1;
      fire(rank, e.signal, "--revoke inside takeover " + std::to_string(nth));
    }
}

void FaultPlan::at_replay(int rank) {
  ++replays;
  for (auto& e : entries)
    if (e.replay > 0 && replays >= e.replay) {
      e.replay = -1;
      fire(rank, e.signal, "--revoke halfway through journal replay " + std::to_string(replays));
    }
}

std::function<void(std::int64_t)> FaultPlan::checkpoint_write_hook() const {
  std::int64_t target = -1;
  int signo = SIGKILL;
  for (const auto& e : entries)
    if (e.ckpt_write > 0) {
      target = e.ckpt_write;
      signo = e.signal;  // SIGKILL: a torn write; SIGTERM/SIGUSR1: a notice in the middle of one
    }
  if (target < 0) return {};
  auto writes = std::make_shared<std::atomic<std::int64_t>>(0);
  return [target, signo, writes](std::int64_t global_step) {
    const std::int64_t n = ++*writes;
    if (n == target)
      fire(0, signo,
           "--revoke in the middle of writing checkpoint " + std::to_string(n) + " (global step " +
               std::to_string(global_step) + ")");
  };
}

}  // namespace mt
