#include "ckpt/async_writer.hpp"

#include <iostream>
#include <utility>

#include "core/thread_priority.hpp"

namespace mt::ckpt {

AsyncWriter::AsyncWriter(std::filesystem::path dir, int keep)
    : dir_(std::move(dir)), keep_(keep), thread_([this] { run(); }) {}

AsyncWriter::~AsyncWriter() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !busy_ && !waiting_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncWriter::submit(Checkpoint&& snapshot) {
  {
    std::lock_guard lock(mutex_);
    if (waiting_) spares_.push_back(std::move(*waiting_));
    waiting_ = std::move(snapshot);
  }
  cv_.notify_all();
}

void AsyncWriter::flush() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !busy_ && !waiting_; });
}

bool AsyncWriter::flush_for(double seconds) {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !busy_ && !waiting_; });
}

Checkpoint AsyncWriter::take_spare() {
  std::lock_guard lock(mutex_);
  if (spares_.empty()) return {};
  Checkpoint c = std::move(spares_.back());
  spares_.pop_back();
  return c;
}

void AsyncWriter::give_spare(Checkpoint&& c) {
  std::lock_guard lock(mutex_);
  spares_.push_back(std::move(c));
}

void AsyncWriter::set_fence(std::function<void()> fence) {
  std::lock_guard lock(mutex_);
  fence_ = std::move(fence);
}

std::vector<Written> AsyncWriter::take_written() {
  std::lock_guard lock(mutex_);
  return std::exchange(written_, {});
}

void AsyncWriter::run() noexcept {
  if (const auto why = lower_this_thread_priority(kBackgroundNice, true); !why.empty())
    std::cerr << "mpi_trainer: warning: checkpoint writer keeps its priority: " << why << '\n';
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || waiting_.has_value(); });
    if (!waiting_) return;  // stop_ and nothing left
    Checkpoint c = std::move(*waiting_);
    waiting_.reset();
    busy_ = true;
    const std::function<void()> fence = fence_;
    lock.unlock();
    Written w;
    w.global_step = c.global_step;
    try {
      w.file = publish(dir_, c, keep_, &w.stats, fence);
    } catch (const std::exception& e) {
      w.error = e.what();
    } catch (...) {
      w.error = "checkpoint of global step " + std::to_string(c.global_step) + ": unknown error";
    }
    lock.lock();
    busy_ = false;
    written_.push_back(std::move(w));
    if (spares_.size() < 2) spares_.push_back(std::move(c));
    cv_.notify_all();
  }
}

}  // namespace mt::ckpt
