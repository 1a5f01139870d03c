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
// DataError (exit 3): a GPU job must never silently run on the CPU.
ResolvedDevice resolve_device(const std::string& requested);
std::unique_ptr<Backend> make_backend(const ResolvedDevice& device, int threads);

}  // namespace mt
