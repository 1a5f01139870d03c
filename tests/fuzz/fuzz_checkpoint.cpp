// Fuzz target (issue 45): the checkpoint reader on a file copied from elsewhere. The input is the
// file; `ckpt::verify` (what resume and `mpi_trainer ckpt verify` run first) and, when it passes,
// `ckpt::read` must end in a report or mt::Error. Our code is checkpoint.cpp and hdf5_util.cpp;
// below them is Debian's libhdf5, whose crashes we cannot fix (bench/README.md, "Fuzzing").
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/mt-fuzz-ckpt-" + std::to_string(static_cast<long>(getpid())) + ".h5";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    if (mt::ckpt::verify(path).ok) (void)mt::ckpt::read(path);
  } catch (const mt::Error&) {
  }
  std::remove(path.c_str());
  return 0;
}
