// Built when CUDA is on; runs on machines without a GPU (reports zero devices and why).
#include <cuda_runtime.h>

#include "backend/cuda/cuda_device.hpp"

namespace mt {

bool cuda_compiled() { return true; }

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string("CUDA runtime: ") + cudaGetErrorString(err);
    return 0;
  }
  if (count == 0 && why) *why = "CUDA runtime sees no GPU";
  return count;
}

}  // namespace mt
