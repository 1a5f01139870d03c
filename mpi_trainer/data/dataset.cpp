#include "data/dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace mt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCifarSubdir = "cifar-10-batches-bin";
constexpr std::array<const char*, 5> kCifarTrainFiles = {"data_batch_1.bin", "data_batch_2.bin",
                                                         "data_batch_3.bin", "data_batch_4.bin",
                                                         "data_batch_5.bin"};
constexpr const char* kCifarTestFile = "test_batch.bin";

constexpr const char* kFmnistTrainImages = "train-images-idx3-ubyte";
constexpr const char* kFmnistTrainLabels = "train-labels-idx1-ubyte";
constexpr const char* kFmnistTestImages = "t10k-images-idx3-ubyte";
constexpr const char* kFmnistTestLabels = "t10k-labels-idx1-ubyte";
constexpr std::uint32_t kIdxImagesMagic = 0x00000803;
constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;
constexpr int kFmnistSize = 28;
constexpr int kFmnistPad = (kImageSize - kFmnistSize) / 2;

constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string path_text(const fs::path& p) { return p.string(); }

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::vector<std::uint8_t> read_file(const fs::path& file) {
  errno = 0;
  FilePtr f(std::fopen(file.c_str(), "rb"));
  if (!f) throw DataError("cannot open " + path_text(file) + ": " + std::strerror(errno));
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(file, ec);
  if (ec) throw DataError("cannot determine the size of " + path_text(file) + ": " + ec.message());
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size > 0) {
    const std::size_t got = std::fread(bytes.data(), 1, bytes.size(), f.get());
    if (got != bytes.size()) {
      const std::string why =
          std::ferror(f.get()) ? std::strerror(errno) : "unexpected end of file";
      throw DataError("reading " + path_text(file) + " failed after " + std::to_string(got) +
                      " of " + std::to_string(size) + " bytes: " + why);
    }
  }
  return bytes;
}

void write_file(const fs::path& file, const std::uint8_t* data, std::size_t size) {
  errno = 0;
  FilePtr f(std::fopen(file.c_str(), "wb"));
  if (!f) throw DataError("cannot create " + path_text(file) + ": " + std::strerror(errno));
  if (size > 0 && std::fwrite(data, 1, size, f.get()) != size)
    throw DataError("writing " + path_text(file) + " failed: " + std::strerror(errno));
  // fclose flushes: a full disk shows up here, so it is checked rather than left to the deleter.
  if (std::fclose(f.release()) != 0)
    throw DataError("writing " + path_text(file) + " failed on close: " + std::strerror(errno));
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// ---- CIFAR-10 ----

bool has_all_cifar_files(const fs::path& dir) {
  for (const char* name : kCifarTrainFiles)
    if (!is_regular(dir / name)) return false;
  return is_regular(dir / kCifarTestFile);
}

bool has_any_cifar_file(const fs::path& dir) {
  for (const char* name : kCifarTrainFiles)
    if (is_regular(dir / name)) return true;
  return is_regular(dir / kCifarTestFile);
}

// The folder actually holding the batches: `dir`, or the archive's subfolder inside it.
fs::path cifar_folder(const fs::path& dir) {
  if (has_all_cifar_files(dir)) return dir;
  const fs::path sub = dir / kCifarSubdir;
  if (has_all_cifar_files(sub)) return sub;
  // Neither is complete: report missing files against whichever looks like the intended one.
  if (!has_any_cifar_file(dir) && is_dir(sub)) return sub;
  return dir;
}

void append_cifar_file(const fs::path& file, Dataset& out) {
  if (!is_regular(file))
    throw DataError("missing CIFAR-10 file " + path_text(file) +
                    " (expected data_batch_1.bin .. data_batch_5.bin and test_batch.bin)");
  const std::vector<std::uint8_t> bytes = read_file(file);
  if (bytes.empty()) throw DataError(path_text(file) + ": empty file (no CIFAR-10 records)");
  if (bytes.size() % kCifarRecordBytes != 0)
    throw DataError(path_text(file) + ": size " + std::to_string(bytes.size()) +
                    " is not a multiple of the " + std::to_string(kCifarRecordBytes) +
                    "-byte record (truncated record?)");
  const std::int64_t records = static_cast<std::int64_t>(bytes.size()) / kCifarRecordBytes;
  const std::size_t image_base = out.images.size();
  out.images.resize(image_base + static_cast<std::size_t>(records * kImageBytes));
  out.labels.reserve(out.labels.size() + static_cast<std::size_t>(records));
  for (std::int64_t r = 0; r < records; ++r) {
    const std::uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    if (rec[0] >= kNumClasses)
      throw DataError("label " + std::to_string(rec[0]) + " >= " + std::to_string(kNumClasses) +
                      " in record " + std::to_string(r) + " (byte offset " +
                      std::to_string(r * kCifarRecordBytes) + ") of " + path_text(file));
    out.labels.push_back(rec[0]);
    // The record's R, G, B planes are already the CHW order the model wants.
    std::memcpy(out.images.data() + image_base + static_cast<std::size_t>(r * kImageBytes), rec + 1,
                static_cast<std::size_t>(kImageBytes));
  }
  out.count += records;
}

// ---- Fashion-MNIST (IDX) ----

// Ends the inflate stream however the decompression loop is left.
struct InflateGuard {
  z_stream* zs;
  ~InflateGuard() { inflateEnd(zs); }
};

std::vector<std::uint8_t> gunzip(const std::vector<std::uint8_t>& in, const fs::path& file) {
  // A gzip member is at least a 10-byte header and an 8-byte trailer.
  if (in.size() < 18 || in[0] != 0x1f || in[1] != 0x8b)
    throw DataError(path_text(file) + ": not a gzip file (bad magic bytes; corrupt gzip)");
  if (in.size() > UINT_MAX)
    throw DataError(path_text(file) + ": compressed file too large for one zlib call");

  z_stream zs{};
  int rc = inflateInit2(&zs, 16 + MAX_WBITS);  // 16: expect a gzip wrapper, check its CRC/size
  if (rc != Z_OK)
    throw DataError(path_text(file) + ": zlib inflateInit2 failed (code " + std::to_string(rc) +
                    (zs.msg ? std::string(", ") + zs.msg : std::string()) + ")");
  InflateGuard guard{&zs};

  // The trailer's ISIZE (size mod 2^32) is a good first guess; deflate cannot expand more than
  // ~1032x, so a corrupt trailer cannot trigger a huge allocation.
  const std::size_t tail = in.size() - 4;
  const std::uint64_t isize = std::uint64_t{in[tail]} | (std::uint64_t{in[tail + 1]} << 8) |
                              (std::uint64_t{in[tail + 2]} << 16) |
                              (std::uint64_t{in[tail + 3]} << 24);
  const std::uint64_t bound = std::uint64_t{in.size()} * 1032 + 64;
  std::vector<std::uint8_t> out(
      static_cast<std::size_t>(std::clamp<std::uint64_t>(isize, 64, bound)));
  std::size_t produced = 0;

  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    const std::size_t room = std::min<std::size_t>(out.size() - produced, UINT_MAX);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Concatenated gzip members are valid gzip (`cat a.gz b.gz`); anything else is damage.
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b)
        throw DataError(path_text(file) + ": " + std::to_string(zs.avail_in) +
                        " bytes of trailing garbage after the gzip data (corrupt gzip)");
      rc = inflateReset(&zs);
      if (rc != Z_OK)
        throw DataError(path_text(file) + ": zlib inflateReset failed (code " + std::to_string(rc) +
                        ")");
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0)
      throw DataError(path_text(file) +
                      ": unexpected end of compressed data (truncated or corrupt gzip)");
    if (rc == Z_BUF_ERROR) continue;  // output was full; the loop grows it
    if (rc == Z_MEM_ERROR)
      throw DataError(path_text(file) + ": zlib ran out of memory inflating it");
    throw DataError(path_text(file) + ": corrupt gzip data (zlib: " +
                    (zs.msg ? zs.msg : ("code " + std::to_string(rc))) + ")");
  }
  out.resize(produced);
  return out;
}

// The raw file when present (faster, and what a user who unpacked the data meant), else .gz.
fs::path find_idx_file(const fs::path& dir, const char* base) {
  const fs::path raw = dir / base;
  if (is_regular(raw)) return raw;
  fs::path gz = raw;
  gz += ".gz";
  if (is_regular(gz)) return gz;
  throw DataError("missing Fashion-MNIST file " + path_text(raw) + " (or " +
                  gz.filename().string() + ")");
}

// The decompressed bytes of an IDX file; `what` says where sizes in messages refer to.
std::vector<std::uint8_t> read_idx_bytes(const fs::path& file, std::string& size_what) {
  std::vector<std::uint8_t> bytes = read_file(file);
  if (bytes.empty()) throw DataError(path_text(file) + ": empty file");
  if (file.extension() == ".gz") {
    size_what = "decompressed size";
    return gunzip(bytes, file);
  }
  size_what = "size";
  return bytes;
}

void check_idx_size(const fs::path& file, const std::string& size_what, std::size_t actual,
                    std::uint64_t expected, const std::string& declared) {
  if (actual < expected)
    throw DataError(path_text(file) + ": " + size_what + " " + std::to_string(actual) +
                    " is smaller than the " + std::to_string(expected) +
                    " bytes its header declares (" + declared + "): truncated file");
  if (actual > expected)
    throw DataError(path_text(file) + ": " + size_what + " " + std::to_string(actual) +
                    " is larger than the " + std::to_string(expected) +
                    " bytes its header declares (" + declared + "): trailing data");
}

void check_magic(const fs::path& file, const std::vector<std::uint8_t>& bytes, std::size_t header,
                 std::uint32_t want, const char* kind) {
  if (bytes.size() < 4 || read_be32(bytes.data()) != want) {
    const std::string got = bytes.size() < 4 ? "none" : hex32(read_be32(bytes.data()));
    throw DataError(path_text(file) + ": bad magic " + got + " (expected " + hex32(want) +
                    " for an " + kind + " file)");
  }
  if (bytes.size() < header)
    throw DataError(path_text(file) + ": " + std::to_string(bytes.size()) +
                    " bytes is shorter than the " + std::to_string(header) +
                    "-byte IDX header (truncated file)");
}

Dataset load_idx_pair(const fs::path& dir, const char* images_base, const char* labels_base,
                      const std::string& name) {
  const fs::path images_file = find_idx_file(dir, images_base);
  const fs::path labels_file = find_idx_file(dir, labels_base);

  std::string images_what, labels_what;
  const std::vector<std::uint8_t> img = read_idx_bytes(images_file, images_what);
  check_magic(images_file, img, 16, kIdxImagesMagic, "IDX image");
  const std::uint64_t n_images = read_be32(img.data() + 4);
  const std::uint32_t rows = read_be32(img.data() + 8), cols = read_be32(img.data() + 12);
  if (rows != kFmnistSize || cols != kFmnistSize)
    throw DataError(path_text(images_file) + ": images are " + std::to_string(rows) + "x" +
                    std::to_string(cols) + ", expected 28x28");
  constexpr std::uint64_t kPixels = kFmnistSize * kFmnistSize;
  check_idx_size(images_file, images_what, img.size(), 16 + n_images * kPixels,
                 std::to_string(n_images) + " images of 28x28");

  const std::vector<std::uint8_t> lab = read_idx_bytes(labels_file, labels_what);
  check_magic(labels_file, lab, 8, kIdxLabelsMagic, "IDX label");
  const std::uint64_t n_labels = read_be32(lab.data() + 4);
  check_idx_size(labels_file, labels_what, lab.size(), 8 + n_labels,
                 std::to_string(n_labels) + " labels");

  if (n_images != n_labels)
    throw DataError("count mismatch: " + path_text(images_file) + " has " +
                    std::to_string(n_images) + " images but " + path_text(labels_file) + " has " +
                    std::to_string(n_labels) + " labels");
  if (n_images == 0) throw DataError(path_text(images_file) + ": holds no images");

  Dataset out;
  out.name = name;
  out.count = static_cast<std::int64_t>(n_images);
  out.labels.resize(n_images);
  for (std::uint64_t i = 0; i < n_labels; ++i) {
    const std::uint8_t label = lab[8 + i];
    if (label >= kNumClasses)
      throw DataError("label " + std::to_string(label) + " >= " + std::to_string(kNumClasses) +
                      " in record " + std::to_string(i) + " of " + path_text(labels_file));
    out.labels[i] = label;
  }
  // Zero padding keeps the 28x28 content centred, like the usual MNIST-to-32x32 LeNet input;
  // replicating gray into R, G, B lets the unchanged 3-channel stem consume it.
  out.images.assign(n_images * kImageBytes, 0);
  for (std::uint64_t i = 0; i < n_images; ++i) {
    const std::uint8_t* src = img.data() + 16 + i * kPixels;
    std::uint8_t* dst = out.images.data() + i * kImageBytes;
    for (int c = 0; c < kImageChannels; ++c)
      for (int r = 0; r < kFmnistSize; ++r)
        std::memcpy(dst + c * kImagePlane + (r + kFmnistPad) * kImageSize + kFmnistPad,
                    src + r * kFmnistSize, kFmnistSize);
  }
  return out;
}

bool has_any_fmnist_file(const fs::path& dir) {
  for (const char* base :
       {kFmnistTrainImages, kFmnistTrainLabels, kFmnistTestImages, kFmnistTestLabels}) {
    fs::path gz = dir / base;
    gz += ".gz";
    if (is_regular(dir / base) || is_regular(gz)) return true;
  }
  return false;
}

void require_dir(const fs::path& dir) {
  if (is_dir(dir)) return;
  std::error_code ec;
  if (fs::exists(dir, ec))
    throw DataError("data directory " + path_text(dir) +
                    " is a file, not a directory: --data takes the directory that holds the data set's files");
  throw DataError("data directory " + path_text(dir) + " does not exist");
}

// ---- synthetic data ----

// Distinct mean colours per class (R, G, B): far apart so colour alone separates most classes.
constexpr std::array<std::array<int, 3>, kNumClasses> kClassColour = {{
    {{200, 50, 50}},
    {{50, 200, 50}},
    {{50, 50, 200}},
    {{200, 200, 50}},
    {{200, 50, 200}},
    {{50, 200, 200}},
    {{230, 140, 40}},
    {{140, 40, 230}},
    {{128, 128, 128}},
    {{40, 140, 110}},
}};
constexpr double kPatternAmplitude = 35.0;
constexpr double kNoiseStd = 20.0;
constexpr double kBrightnessJitter = 30.0;

// +1/-1 texture of class c at (h, w); classes c and c+5 share a texture but not a colour.
double class_pattern(int c, int h, int w, int phase) {
  switch (c % 5) {
    case 0: return ((h + phase) / 2) % 2 ? 1.0 : -1.0;                    // horizontal stripes
    case 1: return ((w + phase) / 2) % 2 ? 1.0 : -1.0;                    // vertical stripes
    case 2: return ((h + phase) / 4 + (w + phase) / 4) % 2 ? 1.0 : -1.0;  // checks
    case 3: return ((h + w + phase) / 3) % 2 ? 1.0 : -1.0;                // diagonal stripes
    default: {
      const int dy = h - 16, dx = w - 16;
      return dy * dy + dx * dx < 64 ? 1.0 : -1.0;  // centre blob
    }
  }
}

void make_synthetic(std::int64_t count, Rng& rng, std::vector<std::uint8_t>& images,
                    std::vector<std::int32_t>& labels) {
  // Balanced classes in random order.
  labels.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) labels[i] = static_cast<std::int32_t>(i % kNumClasses);
  for (std::int64_t i = count - 1; i > 0; --i)
    std::swap(labels[i], labels[rng.below(static_cast<std::uint64_t>(i + 1))]);
  images.resize(static_cast<std::size_t>(count * kImageBytes));
  for (std::int64_t i = 0; i < count; ++i) {
    const int c = labels[i];
    const double brightness = (rng.uniform() - 0.5) * kBrightnessJitter;
    const int phase = static_cast<int>(rng.below(8));
    std::uint8_t* img = images.data() + i * kImageBytes;
    for (int ch = 0; ch < kImageChannels; ++ch)
      for (int h = 0; h < kImageSize; ++h)
        for (int w = 0; w < kImageSize; ++w) {
          const double v = kClassColour[c][ch] + brightness +
                           kPatternAmplitude * class_pattern(c, h, w, phase) +
                           kNoiseStd * rng.normal();
          img[ch * kImagePlane + h * kImageSize + w] =
              static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
        }
  }
}

}  // namespace

DataSplit load_cifar10(const fs::path& dir) {
  require_dir(dir);
  const fs::path folder = cifar_folder(dir);
  DataSplit split;
  split.format = "cifar10";
  split.train.name = "cifar10-train";
  split.test.name = "cifar10-test";
  for (const char* name : kCifarTrainFiles) append_cifar_file(folder / name, split.train);
  append_cifar_file(folder / kCifarTestFile, split.test);
  return split;
}

DataSplit load_fashion_mnist(const fs::path& dir) {
  require_dir(dir);
  DataSplit split;
  split.format = "fashion-mnist";
  split.train = load_idx_pair(dir, kFmnistTrainImages, kFmnistTrainLabels, "fashion-mnist-train");
  split.test = load_idx_pair(dir, kFmnistTestImages, kFmnistTestLabels, "fashion-mnist-test");
  return split;
}

DataSplit load_dataset(const fs::path& dir) {
  require_dir(dir);
  if (has_any_cifar_file(dir) || has_any_cifar_file(dir / kCifarSubdir)) return load_cifar10(dir);
  if (has_any_fmnist_file(dir)) return load_fashion_mnist(dir);
  throw DataError(
      "no data set found in " + path_text(dir) +
      ": expected CIFAR-10 binary files (data_batch_1.bin .. data_batch_5.bin and test_batch.bin, "
      "directly or in cifar-10-batches-bin/) or Fashion-MNIST IDX files "
      "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
      "t10k-labels-idx1-ubyte, each optionally .gz)");
}

fs::path default_data_dir() {
  const char* env = std::getenv("MT_CIFAR10_DIR");
  if (env != nullptr && env[0] != '\0') return fs::path(env);
  const fs::path fallback(kDefaultDataDir);
  if (!is_dir(fallback))
    throw DataError(std::string("no data set configured: ") + kDefaultDataDir +
                    " does not exist; install the dataset-fashion-mnist package, set "
                    "MT_CIFAR10_DIR to a CIFAR-10 directory (launch/get_cifar10.sh), or pass "
                    "--data DIR");
  return fallback;
}

std::string dataset_identity(const DataSplit& data) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a 64
  const auto mix = [&h](std::uint64_t byte) {
    h ^= byte;
    h *= 1099511628211ull;
  };
  for (const Dataset* d : {&data.train, &data.test}) {
    for (const std::int32_t label : d->labels) mix(static_cast<std::uint64_t>(label & 0xff));
    for (std::size_t i = 0; i < d->images.size(); i += 61) mix(d->images[i]);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return data.format + " train=" + std::to_string(data.train.count) + " test=" + std::to_string(data.test.count) +
         " fingerprint=" + hex;
}

std::vector<std::string> label_names(const std::string& format) {
  if (format == "fashion-mnist")
    return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

ChannelStats compute_channel_stats(const Dataset& data) {
  MT_ASSERT(data.images.size() == static_cast<std::size_t>(data.count * kImageBytes),
            "dataset image buffer does not match its count");
  ChannelStats stats;
  if (data.count == 0) return stats;
  // Integer sums are exact (255^2 * 1024 * 2^31 images still fits in 64 bits), so the
  // variance does not suffer the cancellation a float E[x^2] - E[x]^2 would.
  std::array<std::uint64_t, 3> sum{}, sum_sq{};
  for (std::int64_t i = 0; i < data.count; ++i) {
    const std::uint8_t* img = data.images.data() + i * kImageBytes;
    for (int c = 0; c < kImageChannels; ++c) {
      std::uint64_t s = 0, sq = 0;
      for (std::int64_t p = 0; p < kImagePlane; ++p) {
        const std::uint64_t v = img[c * kImagePlane + p];
        s += v;
        sq += v * v;
      }
      sum[c] += s;
      sum_sq[c] += sq;
    }
  }
  const double n = static_cast<double>(data.count) * kImagePlane;
  for (int c = 0; c < kImageChannels; ++c) {
    const double mean = static_cast<double>(sum[c]) / n;
    const double var = std::max(0.0, static_cast<double>(sum_sq[c]) / n - mean * mean);
    const double sd = std::sqrt(var) / 255.0;
    stats.mean[c] = static_cast<float>(mean / 255.0);
    stats.std[c] = sd > 1e-6 ? static_cast<float>(sd) : 1.0f;
  }
  return stats;
}

void write_cifar10_batch(const fs::path& file, const std::vector<std::uint8_t>& images,
                         const std::vector<std::int32_t>& labels) {
  MT_ASSERT(images.size() == labels.size() * static_cast<std::size_t>(kImageBytes),
            "write_cifar10_batch: images must hold 3072 bytes per label");
  std::vector<std::uint8_t> bytes(labels.size() * static_cast<std::size_t>(kCifarRecordBytes));
  for (std::size_t r = 0; r < labels.size(); ++r) {
    MT_ASSERT(labels[r] >= 0 && labels[r] < kNumClasses, "write_cifar10_batch: label out of range");
    std::uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    rec[0] = static_cast<std::uint8_t>(labels[r]);
    std::memcpy(rec + 1, images.data() + r * kImageBytes, static_cast<std::size_t>(kImageBytes));
  }
  write_file(file, bytes.data(), bytes.size());
}

void write_synthetic_cifar10(const fs::path& dir, std::int64_t train_count, std::int64_t test_count,
                             std::uint64_t seed) {
  if (train_count < static_cast<std::int64_t>(kCifarTrainFiles.size()) || test_count < 1)
    throw DataError(
        "synthetic data set needs at least 5 training examples (one per batch file) "
        "and 1 test example; got " +
        std::to_string(train_count) + " and " + std::to_string(test_count));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataError("cannot create directory " + path_text(dir) + ": " + ec.message());

  // Separate streams so the test set does not change when train_count does.
  Rng train_rng(seed), test_rng(seed ^ 0x5DEECE66DA3B1F27ull);
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> labels;
  make_synthetic(train_count, train_rng, images, labels);

  const std::int64_t files = static_cast<std::int64_t>(kCifarTrainFiles.size());
  std::int64_t begin = 0;
  for (std::int64_t b = 0; b < files; ++b) {
    const std::int64_t n = train_count / files + (b < train_count % files ? 1 : 0);
    const std::vector<std::uint8_t> part(images.begin() + begin * kImageBytes,
                                         images.begin() + (begin + n) * kImageBytes);
    const std::vector<std::int32_t> part_labels(labels.begin() + begin, labels.begin() + begin + n);
    write_cifar10_batch(dir / kCifarTrainFiles[b], part, part_labels);
    begin += n;
  }
  make_synthetic(test_count, test_rng, images, labels);
  write_cifar10_batch(dir / kCifarTestFile, images, labels);
}

}  // namespace mt
