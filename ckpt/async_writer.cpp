#include "ckpt/async_writer.hpp"

#include <utility>

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

void AsyncWriter::rethrow_locked() {
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncWriter::submit(Checkpoint&& snapshot) {
  {
    std::lock_guard lock(mutex_);
    rethrow_locked();
    waiting_ = std::move(snapshot);
  }
  cv_.notify_all();
}

void AsyncWriter::flush() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !busy_ && !waiting_; });
  rethrow_locked();
}

std::vector<Written> AsyncWriter::take_written() {
  std::lock_guard lock(mutex_);
  return std::exchange(written_, {});
}

void AsyncWriter::run() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || waiting_.has_value(); });
    if (!waiting_) return;  // stop_ and nothing left
    Checkpoint c = std::move(*waiting_);
    waiting_.reset();
    busy_ = true;
    lock.unlock();
    Written w;
    std::exception_ptr err;
    try {
      w.global_step = c.global_step;
      w.file = publish(dir_, c, keep_, &w.stats);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (err) {
      if (!error_) error_ = err;
    } else {
      written_.push_back(std::move(w));
    }
    cv_.notify_all();
  }
}

}  // namespace mt::ckpt
