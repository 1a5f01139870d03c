// `mpi_trainer export`: a checkpoint's model for other frameworks. safetensors: the tensors of
// the PyTorch module in ckpt/pytorch_model.py (its state_dict names and layouts, BatchNorm
// running statistics and num_batches_tracked included), the input normalization and label names
// in the file's metadata (docs/checkpoint-format.md, "Export").
#pragma once

#include <ostream>
#include <string>

namespace mt {

struct ExportConfig {
  std::string ckpt;    // a checkpoint file, or a directory (its newest valid checkpoint)
  std::string format = "safetensors";
  std::string out;     // the file to write (replaced atomically)
};

// Writes the export and one line about it on `log`; returns the exit code. Throws
// CheckpointError, UsageError (an unknown format).
int export_checkpoint(const ExportConfig& cfg, std::ostream& log);

// The PyTorch state_dict name of a parameter: BatchNorm gamma/beta are weight/bias; the rest
// keep their names ("stage2.block1.conv1.weight").
std::string torch_name(const std::string& param_name);

}  // namespace mt
