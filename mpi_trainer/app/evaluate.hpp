// `mpi_trainer eval`: the test accuracy and loss of a checkpoint, in one process on any backend,
// with the input normalization the checkpoint records (docs/checkpoint-format.md).
#pragma once

#include <ostream>
#include <string>

namespace mt {

struct EvalConfig {
  std::string ckpt;           // a checkpoint file, or a directory (its newest valid checkpoint)
  std::string data;           // data directory; empty: the default data (as for train)
  std::string device = "auto";
  int threads = 0;            // 0: the cores this process may use
  int batch_size = 256;
  bool json = false;
};

// Prints one line (or, with json, one JSON object) and returns the exit code. Throws
// CheckpointError, DataError, UsageError.
int evaluate_checkpoint(const EvalConfig& cfg, std::ostream& out);

}  // namespace mt
