#include "app/device.hpp"

#include "backend/cuda/cuda_device.hpp"
#include "core/error.hpp"

namespace mt {

ResolvedDevice resolve_device(const std::string& requested) {
  if (requested == "cpu") return {"cpu", "requested"};
  std::string why;
  const int gpus = cuda_device_count(&why);
  if (requested == "cuda") {
    if (gpus == 0) throw DataError("--device cuda: no usable GPU: " + why);
    throw DataError("--device cuda: " + std::to_string(gpus) +
                    " GPU(s) present, but this build's CUDA training backend is not available "
                    "yet; use --device cpu");
  }
  if (requested == "auto") {
    if (gpus > 0) return {"cpu", "GPU present but no CUDA training backend in this build: using the CPU"};
    return {"cpu", "no GPU (" + why + ")"};
  }
  throw UsageError("--device must be cpu, cuda or auto, not '" + requested + "'");
}

std::unique_ptr<Backend> make_backend(const ResolvedDevice& device, int threads) {
  MT_ASSERT(device.name == "cpu", "only the CPU backend is built");
  return make_cpu_backend(threads);
}

}  // namespace mt
