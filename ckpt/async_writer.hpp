// Writes checkpoints on a background thread so the trainer (or parameter server) stalls only
// for the in-memory snapshot. At most one write runs; a snapshot submitted while one runs waits,
// and a newer one replaces a waiting one (the newest state is what matters). The writer thread
// runs at a lower priority (core/thread_priority.hpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace mt::ckpt {

// A finished write: published (`error` empty), or failed (`error` says why: the file, the step
// and the cause; nothing was published and its temporary file is gone). A failed write is a
// result, not an exception: the trainer decides whether to go on.
struct Written {
  std::int64_t global_step = 0;
  std::filesystem::path file;
  PublishStats stats;
  std::string error;
  bool ok() const { return error.empty(); }
};

class AsyncWriter {
 public:

  AsyncWriter(std::filesystem::path dir, int keep);
  ~AsyncWriter();  // finishes the running and waiting writes; never throws
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  void submit(Checkpoint&& snapshot);
  // Called on the writer thread right before each checkpoint gets its final name (publish's
  // before_rename): an exception from it publishes nothing (a fenced parameter server).
  void set_fence(std::function<void()> fence);
  // Blocks until nothing runs or waits.
  void flush();
  // The same for at most `seconds`; true when nothing runs or waits.
  bool flush_for(double seconds);
  // Writes finished (published or failed) since the last call.
  std::vector<Written> take_written();

  // Snapshot objects to fill in place (their arrays keep their memory), so a snapshot allocates
  // nothing once the writer has one: checkpoints it has written and snapshots a newer one
  // replaced come back here, and `give_spare` adds one (made ahead of time, off the hot path).
  // Returns an empty Checkpoint when none is free.
  Checkpoint take_spare();
  void give_spare(Checkpoint&& c);

 private:
  void run() noexcept;

  std::filesystem::path dir_;
  int keep_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<Checkpoint> waiting_;
  bool busy_ = false;
  bool stop_ = false;
  std::vector<Written> written_;
  std::vector<Checkpoint> spares_;
  std::function<void()> fence_;  // under mutex_
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace mt::ckpt
