// Fuzz target (issue 45): the dataset readers, on files a user copies from elsewhere. The input
// is cut into files: byte 0 picks the format (bit 0: Fashion-MNIST's 4 IDX files, else CIFAR-10's
// 6 binary batches; bit 1: the IDX files gzipped, i.e. named .gz), then each file is a 4-byte
// little-endian length and that many bytes (a short input leaves the later files empty). A bad
// file must end in mt::Error; anything else is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "data/dataset.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const fs::path dir = fs::temp_directory_path() / ("mt-fuzz-data-" + std::to_string(static_cast<long>(getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const bool fmnist = data[0] & 1, gz = data[0] & 2;
  const char* const idx[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                             "t10k-labels-idx1-ubyte"};
  const char* const cifar[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                               "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  std::size_t at = 1;
  for (int f = 0; f < (fmnist ? 4 : 6); ++f) {
    std::uint32_t len = 0;
    if (at + 4 <= size) std::memcpy(&len, data + at, 4);
    at = std::min(size, at + 4);
    len = static_cast<std::uint32_t>(std::min<std::size_t>(len, size - at));
    const std::string name = fmnist ? std::string(idx[f]) + (gz ? ".gz" : "") : cifar[f];
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(data + at), len);
    at += len;
  }
  try {
    (void)mt::load_dataset(dir);
  } catch (const mt::Error&) {
  }
  fs::remove_all(dir);
  return 0;
}
