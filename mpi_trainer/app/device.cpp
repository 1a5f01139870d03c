#include "app/device.hpp"

#include <cstdlib>

#include "backend/cuda/cuda_device.hpp"
#include "core/error.hpp"

namespace mt {

ResolvedDevice resolve_device(const std::string& requested) {
  if (requested == "cpu") return {"cpu", "requested"};
  if (requested != "cuda" && requested != "auto")
    throw UsageError("--device must be cpu, cuda or auto, not '" + requested + "'");
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (requested == "cuda") {
    if (gpus == 0) throw DataError("--device cuda: no usable GPU: " + why);
    return {"cuda", "requested; " + std::to_string(gpus) + " GPU(s) visible"};
  }
  if (gpus > 0) return {"cuda", std::to_string(gpus) + " GPU(s) visible"};
  // The CUDA runtime's reason ("driver version is insufficient" on a machine without one) is
  // noise on a CPU run; --device cuda reports it as an error.
  return {"cpu", "no GPU found"};
}

int local_rank() {
  // Open MPI's mpirun and direct launch, MPICH/Intel MPI, Slurm's srun, in that order.
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var); v && *v) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  return 0;
}

int gpu_for_local_rank() {
  const int gpus = cuda_device_count();
  return gpus > 0 ? local_rank() % gpus : 0;
}

std::unique_ptr<Backend> make_backend(const ResolvedDevice& device, int threads) {
  if (device.name == "cuda") return make_cuda_backend(gpu_for_local_rank());
  MT_ASSERT(device.name == "cpu", "unknown device " + device.name);
  return make_cpu_backend(threads);
}

std::unique_ptr<Backend> make_host_backend(const ResolvedDevice& device, int threads) {
  return make_cpu_backend(device.name == "cpu" ? threads : 1);
}

}  // namespace mt
