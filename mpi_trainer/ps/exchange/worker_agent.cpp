#include "ps/exchange/worker_agent.hpp"

#include <chrono>
#include <iostream>

#include "ps/wire/mpi_env.hpp"

namespace mt {

WorkerAgent::WorkerAgent(std::mutex& mpi, MPI_Comm ps, const WorkerOptions& opts, int rank, FaultPlan& plan,
                         std::function<void()> on_beat, std::function<void(int)> on_failed)
    : mpi_(mpi),
      ps_(ps),
      opts_(opts),
      rank_(rank),
      plan_(plan),
      on_beat_(std::move(on_beat)),
      on_failed_(std::move(on_failed)),
      hb_(static_cast<std::size_t>(opts.num_ps), Buffer(0)),
      hbreq_(static_cast<std::size_t>(opts.num_ps), MPI_REQUEST_NULL) {
  for (auto& b : hb_) {
    b.header() = MsgHeader{};
    b.header().kind = MsgKind::kHeartbeat;
  }
  thread_ = std::thread([this] { run(); });
}

double WorkerAgent::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return longest_gap_;
}

WorkerAgent::~WorkerAgent() {
  stop();
  std::lock_guard<std::mutex> lock(mpi_);
  for (std::size_t s = 0; s < hbreq_.size(); ++s)
    if (hbreq_[s] != MPI_REQUEST_NULL && (ps_lost_ || !wait_for(&hbreq_[s], 0.5))) abandon(std::move(hb_[s]));
}

void WorkerAgent::send_leave(MPI_Comm ps, int shards, int signo, double timeout) {
  for (int s = 0; s < shards; ++s) {
    Buffer b(0);
    b.header() = MsgHeader{};
    b.header().kind = MsgKind::kLeave;
    b.header().signal = signo;
    MPI_Request req = MPI_REQUEST_NULL;
    isend(b, 0, s, kTagToPs, &req, ps);
    if (!wait_for(&req, timeout)) abandon(std::move(b));
  }
}

void WorkerAgent::run() {
  const auto interval = std::chrono::duration<double>(opts_.failure_timeout / 5);
  auto last = Clock::now();
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(stop_mutex_);
      stopping =
          cv_.wait_for(lock, std::chrono::duration_cast<std::chrono::microseconds>(interval), [this] { return stop_; });
    }
    const auto now = Clock::now();
    if (reset_.exchange(false))
      longest_gap_ = 0;
    else
      longest_gap_ = std::max(longest_gap_.load(), seconds_between(last, now));
    last = now;
    last_tick_ = now.time_since_epoch().count();
    if (stopping) return;
    beat();
    plan_.at_time(rank_);
    if (const int sig = notice_signal()) {
      if (notice_at_ == Clock::time_point{}) notice_at_ = Clock::now();
      if (since(notice_at_) >= opts_.drain_deadline && claim_leave()) {
        std::lock_guard<std::mutex> lock(mpi_);
        send_leave(ps_, opts_.num_ps, sig, 1.0);
        std::cout << std::flush;
        // The step cannot be interrupted: the main thread drops its gradient when it ends and
        // returns (run_worker); no heartbeat follows the LEAVE.
        std::cerr << "mpi_trainer: " << worker_label(rank_) << ": " << signal_name(sig)
                  << ": the step did not finish within --drain-deadline " << opts_.drain_deadline
                  << " s: abandoned it and left\n"
                  << std::flush;
        return;
      }
    }
  }
}

void WorkerAgent::beat() {
  std::lock_guard<std::mutex> lock(mpi_);
  if (failed_) return;
  for (std::size_t s = 0; s < hb_.size(); ++s) {
    try {
      int done = 1;
      if (hbreq_[s] != MPI_REQUEST_NULL) MT_MPI(MPI_Test(&hbreq_[s], &done, MPI_STATUS_IGNORE));
      if (!done) continue;  // the shard has not taken the last one: do not reuse its buffer
      isend(hb_[s], 0, static_cast<int>(s), kTagHeartbeat, &hbreq_[s], ps_);
    } catch (const ProcessFailed&) {  // ULFM: this shard died (the main thread may be computing)
      failed_ = true;
      on_failed_(static_cast<int>(s));
      return;
    }
  }
  if (on_beat_) on_beat_();
}

}  // namespace mt
