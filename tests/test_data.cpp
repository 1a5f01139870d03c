// The data module's readers: CIFAR-10 and IDX (good files and every malformed case), the
// Fashion-MNIST conversion, channel statistics and the synthetic data set. The batch loader is
// in test_loader.cpp.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "test_util.hpp"

using namespace mt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

void write_bytes(const fs::path& file, const Bytes& bytes) {
  std::ofstream out(file, std::ios::binary);
  REQUIRE(out.good());
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  REQUIRE(out.good());
}

Bytes read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in.good());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_gz(const fs::path& file, const Bytes& bytes) {
  gzFile gz = gzopen(file.c_str(), "wb");
  REQUIRE(gz != nullptr);
  const int written = gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  const int closed = gzclose(gz);
  REQUIRE(written == static_cast<int>(bytes.size()));
  REQUIRE(closed == Z_OK);
}

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

// An IDX3 image file of `count` images; pixel (i, r, c) = (i * 7 + r * 3 + c) % 256.
Bytes idx_images(std::uint32_t count, std::uint32_t magic = 0x00000803, std::uint32_t rows = 28,
                 std::uint32_t cols = 28) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < count; ++i)
    for (std::uint32_t r = 0; r < rows; ++r)
      for (std::uint32_t c = 0; c < cols; ++c)
        b.push_back(static_cast<std::uint8_t>((i * 7 + r * 3 + c) % 256));
  return b;
}

Bytes idx_labels(std::uint32_t count, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  for (std::uint32_t i = 0; i < count; ++i) b.push_back(static_cast<std::uint8_t>(i % 10));
  return b;
}

// A complete Fashion-MNIST directory: 6 training and 4 test images, raw or gzipped.
void write_fmnist_dir(const fs::path& dir, bool gz) {
  const auto put = [&](const char* name, const Bytes& bytes) {
    if (gz)
      write_gz(dir / (std::string(name) + ".gz"), bytes);
    else
      write_bytes(dir / name, bytes);
  };
  put("train-images-idx3-ubyte", idx_images(6));
  put("train-labels-idx1-ubyte", idx_labels(6));
  put("t10k-images-idx3-ubyte", idx_images(4));
  put("t10k-labels-idx1-ubyte", idx_labels(4));
}

// Records whose R, G and B planes are distinguishable: channel c, pixel p of record i holds
// (i + 50 * c + p) % 256.
void make_records(int count, Bytes& images, std::vector<std::int32_t>& labels) {
  images.resize(static_cast<std::size_t>(count * kImageBytes));
  labels.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    labels[i] = (i * 3) % 10;
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < kImagePlane; ++p)
        images[i * kImageBytes + c * kImagePlane + p] =
            static_cast<std::uint8_t>((i + 50 * c + p) % 256);
  }
}

// Five training batches of 2 records and a test batch of 3.
void write_cifar_dir(const fs::path& dir) {
  Bytes images;
  std::vector<std::int32_t> labels;
  make_records(2, images, labels);
  for (int b = 1; b <= 5; ++b)
    write_cifar10_batch(dir / ("data_batch_" + std::to_string(b) + ".bin"), images, labels);
  make_records(3, images, labels);
  write_cifar10_batch(dir / "test_batch.bin", images, labels);
}

}  // namespace

TEST_CASE("CIFAR-10 reader loads counts, labels and R/G/B planes", "[unit][data]") {
  test::TempDir tmp("cifar_good");
  write_cifar_dir(tmp.path());
  const DataSplit split = load_cifar10(tmp.path());
  CHECK(split.format == "cifar10");
  REQUIRE(split.train.count == 10);
  REQUIRE(split.test.count == 3);
  CHECK(split.train.images.size() == 10u * kImageBytes);
  CHECK(split.train.labels == std::vector<std::int32_t>{0, 3, 0, 3, 0, 3, 0, 3, 0, 3});
  CHECK(split.test.labels == std::vector<std::int32_t>{0, 3, 6});
  // Test record 2: R plane starts at 2, G at 52, B at 102; pixel (h=1, w=3) is p = 35.
  const std::uint8_t* img = split.test.images.data() + 2 * kImageBytes;
  CHECK(img[0] == 2);
  CHECK(img[kImagePlane] == 52);
  CHECK(img[2 * kImagePlane] == 102);
  CHECK(img[2 * kImagePlane + 1 * 32 + 3] == 102 + 35);
  CHECK(read_bytes(tmp.path() / "test_batch.bin")[0] == 0);  // label byte first
  CHECK(read_bytes(tmp.path() / "test_batch.bin").size() == 3u * 3073);
}

TEST_CASE("CIFAR-10 reader finds the archive's cifar-10-batches-bin folder", "[unit][data]") {
  test::TempDir tmp("cifar_sub");
  fs::create_directories(tmp.path() / "cifar-10-batches-bin");
  write_cifar_dir(tmp.path() / "cifar-10-batches-bin");
  CHECK(load_cifar10(tmp.path()).train.count == 10);
  const DataSplit auto_split = load_dataset(tmp.path());
  CHECK(auto_split.format == "cifar10");
  CHECK(auto_split.test.count == 3);
}

TEST_CASE("CIFAR-10 reader rejects every malformed directory with a precise DataError",
          "[unit][data]") {
  test::TempDir tmp("cifar_bad");
  write_cifar_dir(tmp.path());
  const fs::path dir = tmp.path();

  SECTION("missing file") {
    fs::remove(dir / "data_batch_3.bin");
    CHECK_THROWS_AS(load_cifar10(dir), DataError);
    CHECK_THROWS_WITH(load_cifar10(dir), Contains("data_batch_3.bin") && Contains("missing"));
  }
  SECTION("truncated record") {
    Bytes b = read_bytes(dir / "data_batch_2.bin");
    b.resize(b.size() - 100);
    write_bytes(dir / "data_batch_2.bin", b);
    CHECK_THROWS_AS(load_cifar10(dir), DataError);
    CHECK_THROWS_WITH(load_cifar10(dir), Contains("data_batch_2.bin") && Contains("size 6046") &&
                                             Contains("3073") && Contains("truncated"));
  }
  SECTION("label >= 10") {
    Bytes b = read_bytes(dir / "test_batch.bin");
    b[2 * 3073] = 12;
    write_bytes(dir / "test_batch.bin", b);
    CHECK_THROWS_AS(load_cifar10(dir), DataError);
    CHECK_THROWS_WITH(load_cifar10(dir),
                      Contains("label 12 >= 10 in record 2") && Contains("test_batch.bin"));
  }
  SECTION("empty file") {
    write_bytes(dir / "data_batch_5.bin", {});
    CHECK_THROWS_AS(load_cifar10(dir), DataError);
    CHECK_THROWS_WITH(load_cifar10(dir), Contains("data_batch_5.bin") && Contains("empty"));
  }
  SECTION("directory does not exist") {
    CHECK_THROWS_WITH(load_cifar10(dir / "nope"), Contains("nope") && Contains("does not exist"));
  }
}

TEST_CASE("IDX reader loads raw and gzipped files and pads 28x28 gray to 32x32x3", "[unit][data]") {
  const bool gz = GENERATE(false, true);
  INFO("gzipped: " << gz);
  test::TempDir tmp("idx_good");
  write_fmnist_dir(tmp.path(), gz);
  const DataSplit split = load_fashion_mnist(tmp.path());
  CHECK(split.format == "fashion-mnist");
  REQUIRE(split.train.count == 6);
  REQUIRE(split.test.count == 4);
  CHECK(split.train.labels == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  CHECK(split.test.labels == std::vector<std::int32_t>{0, 1, 2, 3});
  REQUIRE(split.train.images.size() == 6u * kImageBytes);
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 32; ++h)
        for (int w = 0; w < 32; ++w) {
          const bool inside = h >= 2 && h < 30 && w >= 2 && w < 30;
          const int want = inside ? (i * 7 + (h - 2) * 3 + (w - 2)) % 256 : 0;
          const int got = split.train.images[i * kImageBytes + c * kImagePlane + h * 32 + w];
          if (got != want) {
            FAIL_CHECK("image " << i << " c " << c << " h " << h << " w " << w << ": " << got
                                << " != " << want);
            return;
          }
        }
  CHECK(load_dataset(tmp.path()).format == "fashion-mnist");
}

TEST_CASE("IDX reader rejects every malformed file with a precise DataError", "[unit][data]") {
  test::TempDir tmp("idx_bad");
  const fs::path dir = tmp.path();
  write_fmnist_dir(dir, false);

  SECTION("wrong image magic") {
    write_bytes(dir / "train-images-idx3-ubyte", idx_images(6, 0x00000802));
    CHECK_THROWS_AS(load_fashion_mnist(dir), DataError);
    CHECK_THROWS_WITH(load_fashion_mnist(dir), Contains("train-images-idx3-ubyte") &&
                                                   Contains("magic 0x00000802") &&
                                                   Contains("0x00000803"));
  }
  SECTION("wrong label magic") {
    write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(4, 0x00000803));
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("t10k-labels-idx1-ubyte") && Contains("magic"));
  }
  SECTION("wrong image size") {
    write_bytes(dir / "train-images-idx3-ubyte", idx_images(6, 0x803, 27, 28));
    CHECK_THROWS_WITH(load_fashion_mnist(dir), Contains("27x28") && Contains("28x28"));
  }
  SECTION("truncated images") {
    Bytes b = idx_images(6);
    b.resize(b.size() - 10);
    write_bytes(dir / "train-images-idx3-ubyte", b);
    CHECK_THROWS_AS(load_fashion_mnist(dir), DataError);
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("train-images-idx3-ubyte") && Contains("truncated"));
  }
  SECTION("truncated header") {
    write_bytes(dir / "t10k-labels-idx1-ubyte", {0, 0, 8, 1, 0});
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("t10k-labels-idx1-ubyte") && Contains("truncated"));
  }
  SECTION("count mismatch") {
    write_bytes(dir / "train-labels-idx1-ubyte", idx_labels(5));
    CHECK_THROWS_AS(load_fashion_mnist(dir), DataError);
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("count mismatch") && Contains("6 images") && Contains("5 labels"));
  }
  SECTION("label >= 10") {
    Bytes b = idx_labels(6);
    b[8 + 4] = 11;
    write_bytes(dir / "train-labels-idx1-ubyte", b);
    CHECK_THROWS_AS(load_fashion_mnist(dir), DataError);
    CHECK_THROWS_WITH(load_fashion_mnist(dir), Contains("label 11 >= 10 in record 4") &&
                                                   Contains("train-labels-idx1-ubyte"));
  }
  SECTION("empty file") {
    write_bytes(dir / "t10k-images-idx3-ubyte", {});
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("t10k-images-idx3-ubyte") && Contains("empty"));
  }
  SECTION("missing file") {
    fs::remove(dir / "t10k-images-idx3-ubyte");
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("missing") && Contains("t10k-images-idx3-ubyte"));
  }
  SECTION("corrupt gzip: damaged deflate data") {
    fs::remove(dir / "train-images-idx3-ubyte");
    write_gz(dir / "train-images-idx3-ubyte.gz", idx_images(6));
    Bytes b = read_bytes(dir / "train-images-idx3-ubyte.gz");
    for (std::size_t i = 20; i < b.size() - 8; i += 3) b[i] ^= 0x5a;
    write_bytes(dir / "train-images-idx3-ubyte.gz", b);
    CHECK_THROWS_AS(load_fashion_mnist(dir), DataError);
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("train-images-idx3-ubyte.gz") && Contains("gzip"));
  }
  SECTION("corrupt gzip: truncated stream") {
    fs::remove(dir / "train-labels-idx1-ubyte");
    write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels(6));
    Bytes b = read_bytes(dir / "train-labels-idx1-ubyte.gz");
    b.resize(b.size() - 6);
    write_bytes(dir / "train-labels-idx1-ubyte.gz", b);
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("train-labels-idx1-ubyte.gz") && Contains("gzip"));
  }
  SECTION("corrupt gzip: not gzip at all") {
    fs::remove(dir / "t10k-labels-idx1-ubyte");
    write_bytes(dir / "t10k-labels-idx1-ubyte.gz", idx_labels(4));
    CHECK_THROWS_WITH(load_fashion_mnist(dir),
                      Contains("t10k-labels-idx1-ubyte.gz") && Contains("not a gzip file"));
  }
  SECTION("the raw file wins over a .gz next to it") {
    write_bytes(dir / "train-images-idx3-ubyte.gz", {1, 2, 3});
    CHECK(load_fashion_mnist(dir).train.count == 6);
  }
}

TEST_CASE("load_dataset and default_data_dir report what they need", "[unit][data]") {
  test::TempDir tmp("autodetect");
  CHECK_THROWS_AS(load_dataset(tmp.path()), DataError);
  CHECK_THROWS_WITH(load_dataset(tmp.path()), Contains(tmp.path().string()) &&
                                                  Contains("data_batch_1.bin") &&
                                                  Contains("train-images-idx3-ubyte"));
  // A partial CIFAR directory is reported as CIFAR with its missing file, not as "unknown".
  write_cifar_dir(tmp.path());
  fs::remove(tmp.path() / "test_batch.bin");
  CHECK_THROWS_WITH(load_dataset(tmp.path()), Contains("test_batch.bin"));

  const char* old = std::getenv("MT_CIFAR10_DIR");
  const std::string saved = old ? old : "";
  REQUIRE(setenv("MT_CIFAR10_DIR", tmp.path().c_str(), 1) == 0);
  CHECK(default_data_dir() == tmp.path());
  REQUIRE(setenv("MT_CIFAR10_DIR", "", 1) == 0);
  if (fs::is_directory("/usr/share/datasets/fashion-mnist"))
    CHECK(default_data_dir() == fs::path("/usr/share/datasets/fashion-mnist"));
  else
    CHECK_THROWS_WITH(default_data_dir(), Contains("dataset-fashion-mnist") && Contains("--data"));
  if (old)
    setenv("MT_CIFAR10_DIR", saved.c_str(), 1);
  else
    unsetenv("MT_CIFAR10_DIR");
}

TEST_CASE("the installed Fashion-MNIST loads completely", "[unit][data]") {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir)) {
    WARN("skipped: " << dir << " is absent (install dataset-fashion-mnist)");
    return;
  }
  const DataSplit split = load_dataset(dir);
  CHECK(split.format == "fashion-mnist");
  CHECK(split.train.count == 60000);
  CHECK(split.test.count == 10000);
  std::array<std::int64_t, 10> per_class{};
  for (auto l : split.train.labels) {
    REQUIRE((l >= 0 && l < 10));
    ++per_class[l];
  }
  for (auto n : per_class) CHECK(n == 6000);
  // Padding rows are zero and the three channels are copies.
  const std::uint8_t* img = split.test.images.data() + 123 * kImageBytes;
  for (int p = 0; p < 64; ++p) CHECK(img[p] == 0);
  CHECK(std::equal(img, img + kImagePlane, img + kImagePlane));
  CHECK(std::equal(img, img + kImagePlane, img + 2 * kImagePlane));
  const ChannelStats s = compute_channel_stats(split.train);
  CHECK(s.mean[0] == Approx(0.2860f * 28 * 28 / 1024).epsilon(0.02));
  CHECK(s.mean[0] == s.mean[2]);
}

TEST_CASE("channel statistics are the per-channel mean and std in [0,1] scale", "[unit][data]") {
  Dataset d;
  d.count = 2;
  d.labels = {0, 1};
  d.images.assign(2 * kImageBytes, 0);
  // R: one image all 255, the other all 0 -> mean 0.5, std 0.5. G: constant 51. B: 0/255 halves.
  std::fill_n(d.images.begin(), kImagePlane, 255);
  std::fill_n(d.images.begin() + kImagePlane, kImagePlane, 51);
  std::fill_n(d.images.begin() + kImageBytes + kImagePlane, kImagePlane, 51);
  std::fill_n(d.images.begin() + 2 * kImagePlane, kImagePlane / 2, 255);
  const ChannelStats s = compute_channel_stats(d);
  CHECK(s.mean[0] == Approx(0.5f));
  CHECK(s.std[0] == Approx(0.5f));
  CHECK(s.mean[1] == Approx(0.2f));
  CHECK(s.std[1] == 1.0f);  // zero spread is replaced by 1
  CHECK(s.mean[2] == Approx(0.25f));
  CHECK(s.std[2] == Approx(std::sqrt(0.25 - 0.0625)));
}

TEST_CASE("the synthetic data set is valid CIFAR-10, deterministic and learnable", "[unit][data]") {
  test::TempDir tmp("synthetic");
  write_synthetic_cifar10(tmp.path() / "a", 203, 60, 9);
  write_synthetic_cifar10(tmp.path() / "b", 203, 60, 9);
  for (const char* f : {"data_batch_1.bin", "data_batch_5.bin", "test_batch.bin"}) {
    const Bytes a = read_bytes(tmp.path() / "a" / f);
    CHECK(a.size() % 3073 == 0);
    CHECK(a == read_bytes(tmp.path() / "b" / f));
  }
  CHECK(fs::file_size(tmp.path() / "a" / "data_batch_1.bin") == 41u * 3073);
  CHECK(fs::file_size(tmp.path() / "a" / "data_batch_5.bin") == 40u * 3073);
  const DataSplit split = load_dataset(tmp.path() / "a");
  REQUIRE(split.train.count == 203);
  REQUIRE(split.test.count == 60);
  std::set<std::int32_t> classes(split.train.labels.begin(), split.train.labels.end());
  CHECK(classes.size() == 10);

  // A nearest-class-mean classifier on mean colours must be far above chance.
  std::array<std::array<double, 3>, 10> centre{};
  std::array<int, 10> n{};
  const auto colour = [](const Dataset& d, std::int64_t i, int c) {
    double s = 0;
    for (int p = 0; p < kImagePlane; ++p) s += d.images[i * kImageBytes + c * kImagePlane + p];
    return s / kImagePlane;
  };
  for (std::int64_t i = 0; i < split.train.count; ++i) {
    ++n[split.train.labels[i]];
    for (int c = 0; c < 3; ++c) centre[split.train.labels[i]][c] += colour(split.train, i, c);
  }
  int correct = 0;
  for (std::int64_t i = 0; i < split.test.count; ++i) {
    int best = 0;
    double best_d = 1e30;
    for (int k = 0; k < 10; ++k) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c) {
        const double diff = colour(split.test, i, c) - centre[k][c] / n[k];
        d2 += diff * diff;
      }
      if (d2 < best_d) best_d = d2, best = k;
    }
    correct += best == split.test.labels[i];
  }
  CHECK(correct >= 50);
  CHECK_THROWS_AS(write_synthetic_cifar10(tmp.path() / "c", 4, 1, 1), DataError);
}
