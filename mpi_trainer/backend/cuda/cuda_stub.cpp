// Built when CUDA is off: reports that no CUDA support was compiled in.
#include "backend/cuda/cuda_device.hpp"

namespace mt {

bool cuda_compiled() { return false; }

int cuda_device_count(std::string* why) {
  if (why) *why = "this build has no CUDA support (configure with nvcc available or -DMT_WITH_CUDA=ON)";
  return 0;
}

}  // namespace mt

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mt {

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw DataError("--device cuda: this build has no CUDA backend (configure with nvcc and cuDNN available, "
                  "or the `cuda` preset)");
}

}  // namespace mt
