// Image classification data sets in memory: CIFAR-10 (binary batches) and Fashion-MNIST (IDX,
// optionally gzipped), both held as 3x32x32 uint8 images so the model and loader see one shape.
// Every malformed input is a DataError whose message names the file and the problem.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mt {

inline constexpr int kImageChannels = 3;
inline constexpr int kImageSize = 32;
inline constexpr std::int64_t kImagePlane = kImageSize * kImageSize;       // 1024
inline constexpr std::int64_t kImageBytes = kImageChannels * kImagePlane;  // 3072
inline constexpr int kNumClasses = 10;
inline constexpr std::int64_t kCifarRecordBytes = 1 + kImageBytes;  // 3073

struct Dataset {
  std::string name;  // e.g. "cifar10-train"
  std::int64_t count = 0;
  std::vector<std::uint8_t> images;  // count * 3 * 32 * 32, CHW per image
  std::vector<std::int32_t> labels;  // count, each in [0, 10)
};

struct DataSplit {
  Dataset train, test;
  std::string format;  // "cifar10" or "fashion-mnist"
};

// Reads data_batch_1.bin .. data_batch_5.bin and test_batch.bin from `dir`, or from
// `dir`/cifar-10-batches-bin (the archive's folder) when `dir` itself lacks them.
DataSplit load_cifar10(const std::filesystem::path& dir);

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with .gz (raw preferred).
// 28x28 gray images become 32x32x3: 2 zero pixels of padding per side, gray copied to R, G, B.
DataSplit load_fashion_mnist(const std::filesystem::path& dir);

// CIFAR-10 if its files are present (in `dir` or its cifar-10-batches-bin), else Fashion-MNIST.
DataSplit load_dataset(const std::filesystem::path& dir);

// $MT_CIFAR10_DIR when set and non-empty, else /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist); DataError when neither is available.
std::filesystem::path default_data_dir();

// What a checkpoint records of the data it was trained on (a resume on other data is refused):
// "<format> train=<count> test=<count> fingerprint=<16 hex digits>", the fingerprint an FNV-1a
// hash of every label and every 61st pixel byte of both sets (cheap: ~3 MB of CIFAR-10's 180).
std::string dataset_identity(const DataSplit& data);

// The class names of a format's labels 0..9 ("cifar10": airplane..truck; "fashion-mnist":
// T-shirt/top..Ankle boot).
std::vector<std::string> label_names(const std::string& format);

struct ChannelStats {
  std::array<float, 3> mean{0.0f, 0.0f, 0.0f};
  std::array<float, 3> std{1.0f, 1.0f, 1.0f};
};

// Per-channel mean and standard deviation of pixel/255 over every pixel of every image. For
// Fashion-MNIST that includes the zero padding, exactly as the loader feeds it to the model.
// A channel with zero spread gets std 1 so normalizing by it stays finite.
ChannelStats compute_channel_stats(const Dataset& data);

// Writes CIFAR-10 binary records: images is labels.size() * 3072 CHW bytes, labels in [0, 10).
void write_cifar10_batch(const std::filesystem::path& file, const std::vector<std::uint8_t>& images,
                         const std::vector<std::int32_t>& labels);

// Writes a small, generated, easily learnable data set in CIFAR-10 format (all 6 files; the
// training examples split over the 5 batches). Each class has its own mean colour and texture
// (stripes, checks, diagonals or a centre blob, with a random phase) plus brightness jitter and
// pixel noise. Deterministic in `seed`. Needs train_count >= 5 and test_count >= 1.
void write_synthetic_cifar10(const std::filesystem::path& dir, std::int64_t train_count,
                             std::int64_t test_count, std::uint64_t seed);

}  // namespace mt
