// What the CUDA side of the build can tell without a CUDA backend: whether it was compiled in
// and how many GPUs the runtime sees. The backend itself lands with the CUDA issue.
#pragma once

#include <string>

namespace mt {

bool cuda_compiled();
// Number of usable CUDA devices; 0 when CUDA is not compiled in or no driver/GPU is present.
// `why` (optional) receives the runtime's reason when there are none.
int cuda_device_count(std::string* why = nullptr);

}  // namespace mt
