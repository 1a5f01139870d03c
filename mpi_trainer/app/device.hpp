// Picks the compute backend for --device.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace mt {

struct ResolvedDevice {
  std::string name;  // "cpu" or "cuda"
  std::string note;  // why auto chose what it chose, for the log
};

// cpu | cuda | auto. `cuda` with no usable GPU (or no CUDA backend in this build) throws
// DataError (exit 3): a GPU job must never silently run on the CPU. `auto` takes the GPU when
// this build has the CUDA backend and the runtime sees one.
ResolvedDevice resolve_device(const std::string& requested);

// This process's rank among those on its node (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
// SLURM_LOCALID; 0 when none is set).
int local_rank();
// The GPU a process uses: local rank modulo the GPUs it sees, so several workers may share one
// (CUDA_VISIBLE_DEVICES narrows the choice).
int gpu_for_local_rank();

// The compute backend of `device` (CUDA: on gpu_for_local_rank()).
std::unique_ptr<Backend> make_backend(const ResolvedDevice& device, int threads);
// A backend computing on host memory, for the optimizer update on host buffers (the parameter
// server's and the single-process trainer's): the CPU backend (one thread beside a GPU).
std::unique_ptr<Backend> make_host_backend(const ResolvedDevice& device, int threads);

}  // namespace mt
