#include "app/background_eval.hpp"

#include <algorithm>
#include <iostream>
#include <utility>

#include "app/device.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/thread_priority.hpp"

namespace mt {

BackgroundEval::BackgroundEval(const Model& model, const RunSetup& setup, int batch, int threads)
    : model_(model), setup_(setup), batch_(batch), threads_(threads), params_(model.params()),
      stats_(model.stats()), thread_([this] { run(); }) {}

BackgroundEval::~BackgroundEval() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool BackgroundEval::busy() {
  std::lock_guard lock(mutex_);
  return job_.has_value();
}

void BackgroundEval::start(std::int64_t step, const FlatTensors& params, const FlatTensors& stats) {
  std::lock_guard lock(mutex_);
  MT_ASSERT(!job_, "BackgroundEval::start while an evaluation runs");
  std::copy_n(params.flat().data(), params.flat().numel(), params_.flat().data());
  std::copy_n(stats.flat().data(), stats.flat().numel(), stats_.flat().data());
  job_ = step;
  cv_.notify_all();
}

std::vector<BackgroundEval::Done> BackgroundEval::take_done() {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(done_, {});
}

std::vector<BackgroundEval::Done> BackgroundEval::wait() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !job_; });
  }
  return take_done();
}

void BackgroundEval::run() noexcept {
  if (const auto why = lower_this_thread_priority(kBackgroundNice, true); !why.empty())
    std::cerr << "mpi_trainer: warning: background evaluation keeps its priority: " << why << '\n';
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Network> net;
  for (;;) {
    std::int64_t step = 0;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || job_; });
      if (!job_) return;  // stopping and idle
      step = *job_;
    }
    Done d;
    d.step = step;
    std::exception_ptr error;
    try {
      const auto t0 = Clock::now();
      if (!net) {
        backend = make_backend(setup_.device, threads_);
        net = std::make_unique<Network>(model_, *backend, batch_);
      }
      // params_/stats_ are not touched by start() while job_ is set.
      d.result = evaluate_test_set(*net, setup_.data.test, setup_.loader, params_, stats_);
      d.seconds = since(t0);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (error)
        error_ = error;
      else
        done_.push_back(d);
      job_.reset();
    }
    cv_.notify_all();
  }
}

}  // namespace mt
