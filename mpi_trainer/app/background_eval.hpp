// Test-set evaluation on a thread of its own, so the parameter server keeps applying updates
// while a snapshot of the model is evaluated. One evaluation at a time; the caller skips a
// request while one runs (busy()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "app/run_setup.hpp"
#include "nn/params.hpp"
#include "nn/resnet.hpp"

namespace mt {

class BackgroundEval {
 public:
  // Evaluates with its own backend of `threads` threads and a network of batch `batch`.
  BackgroundEval(const Model& model, const RunSetup& setup, int batch, int threads);
  ~BackgroundEval();  // waits for a running evaluation; never throws
  BackgroundEval(const BackgroundEval&) = delete;
  BackgroundEval& operator=(const BackgroundEval&) = delete;

  bool busy();
  // Copies `params` and `stats` and evaluates them as the model at `step`. Requires !busy().
  void start(std::int64_t step, const FlatTensors& params, const FlatTensors& stats);

  struct Done {
    std::int64_t step = 0;
    EvalResult result;
    double seconds = 0;
  };
  // Evaluations finished since the last call; rethrows an evaluation's error.
  std::vector<Done> take_done();
  // Blocks until nothing runs, then as take_done().
  std::vector<Done> wait();

 private:
  void run() noexcept;

  const Model& model_;
  const RunSetup& setup_;
  int batch_, threads_;
  FlatTensors params_, stats_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<std::int64_t> job_;  // step to evaluate
  bool stop_ = false;
  std::vector<Done> done_;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace mt
