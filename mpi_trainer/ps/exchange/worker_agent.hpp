// A worker's companion thread (the worker's side of the failure detector): heartbeats to every
// shard, time-based revocations, and the end of a notice's drain at --drain-deadline.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "ps/events.hpp"
#include "ps/inject/fault_injection.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

// Tells every shard the worker is alive every --failure-timeout / 5 seconds (also while a long
// step computes), fires the time-based revocations, and ends a notice's drain at
// --drain-deadline. It calls MPI only with `mpi` held, as the main thread does
// (MPI_THREAD_SERIALIZED).
class WorkerAgent {
 public:
  // `on_beat`, with `mpi` held, at every heartbeat (a standby takes its replicas while it computes).
  // `on_failed(shard)`, with `mpi` held, when the MPI library (ULFM) reports a shard failed: it
  // flags the loss for the main thread (which ends the worker, or takes the parameter server
  // over); no beat follows.
  WorkerAgent(std::mutex& mpi, MPI_Comm ps, const WorkerOptions& opts, int rank, FaultPlan& plan,
              std::function<void()> on_beat, std::function<void(int)> on_failed);
  // Heartbeats to a lost shard never complete: their buffers stay until the process ends (at
  // once when the parameter server is known lost: nothing on that way out waits on MPI).
  ~WorkerAgent();
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // The first caller sends LEAVE; a second (the agent at the deadline, the main thread after
  // its push) does nothing.
  bool claim_leave() { return !leaving_.exchange(true); }
  // Whether this worker has left (LEAVE sent, by either thread): the main thread pushes no more.
  bool left() const { return leaving_; }
  // The parameter server is lost: the destructor abandons heartbeats in flight without waiting.
  void ps_lost() { ps_lost_ = true; }
  // The longest time between two of this thread's heartbeats (seconds): longer than
  // --failure-timeout, the whole process was suspended and the parameter server heard nothing. A
  // suspension during a step is seen here: the main thread's verdict on the parameter server comes
  // a --failure-timeout after the step, this thread ticks 5 times in it. One during a wait for a
  // reply, the main thread sees itself (WorkerClient::longest_gap).
  double longest_gap() const { return longest_gap_; }
  // longest_gap() with the gap since this thread's last tick counted: a process continued a moment
  // ago is seen before the thread ticks again.
  double gap_to_now() const {
    const auto last = Clock::time_point(Clock::duration(last_tick_.load()));
    return std::max(longest_gap_.load(), seconds_between(last, Clock::now()));
  }
  // A rejoin (Worker::rejoin): the suspension it was dropped for is over; gaps count from now.
  void reset_gap() {
    reset_ = true;
    longest_gap_ = 0;
    last_tick_ = Clock::now().time_since_epoch().count();
  }
  // Stops the heartbeat thread (its last gap, to now, counted) and returns longest_gap().
  double stop();

  // LEAVE to every shard (with `mpi` held), each send waited for briefly: a shard that does not
  // take it will notice the silence instead.
  static void send_leave(MPI_Comm ps, int shards, int signo, double timeout);

 private:
  void run();
  void beat();

  std::mutex& mpi_;
  const MPI_Comm ps_;
  const WorkerOptions& opts_;
  const int rank_;
  FaultPlan& plan_;
  const std::function<void()> on_beat_;
  const std::function<void(int)> on_failed_;
  bool failed_ = false;  // with `mpi_` held
  std::vector<Buffer> hb_;
  std::vector<MPI_Request> hbreq_;
  std::atomic<bool> leaving_{false};
  std::atomic<bool> ps_lost_{false};
  std::atomic<double> longest_gap_{0};
  std::atomic<bool> reset_{false};  // reset_gap(): the next tick measures from itself
  std::atomic<Clock::rep> last_tick_{Clock::now().time_since_epoch().count()};
  Clock::time_point notice_at_{};
  std::mutex stop_mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace mt
