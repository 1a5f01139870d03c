// The data module: CIFAR-10 and IDX readers (good files and every malformed case), the
// Fashion-MNIST conversion, channel statistics, the synthetic data set, and the batch loader's
// determinism, sharding, resumption, augmentation and normalization.
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

// Random images; label i = i so tests can tell which example landed where.
Dataset indexed_dataset(std::int64_t count, std::uint64_t seed = 5) {
  Dataset d;
  d.name = "indexed";
  d.count = count;
  Rng rng(seed);
  d.images.resize(static_cast<std::size_t>(count * kImageBytes));
  for (auto& v : d.images) v = static_cast<std::uint8_t>(rng.below(256));
  d.labels.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) d.labels[i] = static_cast<std::int32_t>(i);
  return d;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.labels == b.labels && a.epoch == b.epoch && a.index_in_epoch == b.index_in_epoch &&
         a.images.dims() == b.images.dims() &&
         std::memcmp(a.images.data(), b.images.data(),
                     static_cast<std::size_t>(a.images.numel()) * sizeof(float)) == 0;
}

LoaderOptions plain_options(int batch_size) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.normalization = Normalization::kNone;
  o.seed = 42;
  return o;
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

TEST_CASE("loader batches depend only on seed, shard, epoch and position", "[unit][data]") {
  const Dataset d = indexed_dataset(50);
  LoaderOptions o = plain_options(8);
  o.augment = true;
  o.prefetch = 3;
  BatchLoader a(d, o), b(d, o);
  REQUIRE(a.batches_per_epoch() == 6);
  std::set<std::int32_t> seen;
  for (int i = 0; i < 14; ++i) {
    const Batch& x = a.next();
    const Batch& y = b.next();
    REQUIRE(same_batch(x, y));
    CHECK(x.epoch == i / 6);
    CHECK(x.index_in_epoch == i % 6);
    CHECK(x.images.dims() == Dims{8, 3, 32, 32});
    if (x.epoch == 0) seen.insert(x.labels.begin(), x.labels.end());
  }
  CHECK(seen.size() == 48);  // one epoch: distinct examples, the last 2 dropped
  CHECK(a.wait_seconds() >= 0.0);

  LoaderOptions other = o;
  other.seed = 43;
  BatchLoader c(d, other);
  BatchLoader e(d, o);
  CHECK_FALSE(same_batch(c.next(), e.next()));
}

TEST_CASE("loader shards are disjoint and the same size", "[unit][data]") {
  const Dataset d = indexed_dataset(103);
  LoaderOptions o = plain_options(5);
  o.num_shards = 4;
  std::vector<std::set<std::int32_t>> per_shard(4);
  for (int s = 0; s < 4; ++s) {
    o.shard = s;
    BatchLoader loader(d, o);
    CHECK(loader.shard_size() == 25);
    CHECK(loader.batches_per_epoch() == 5);
    for (int i = 0; i < 5; ++i) {
      const Batch& b = loader.next();
      per_shard[s].insert(b.labels.begin(), b.labels.end());
    }
    CHECK(per_shard[s].size() == 25);
  }
  std::set<std::int32_t> all;
  for (const auto& s : per_shard) all.insert(s.begin(), s.end());
  CHECK(all.size() == 100);
}

TEST_CASE("loader restarted at cursor() continues the exact stream", "[unit][data]") {
  const Dataset d = indexed_dataset(40);
  LoaderOptions o = plain_options(6);
  o.augment = true;
  o.drop_last = GENERATE(true, false);
  INFO("drop_last " << o.drop_last);
  BatchLoader a(d, o);
  const std::int64_t per_epoch = a.batches_per_epoch();
  CHECK(per_epoch == (o.drop_last ? 6 : 7));
  CHECK(a.cursor().epoch == 0);
  CHECK(a.cursor().position == 0);
  for (int stop : {3, 4, 9}) {  // 4 + 3 = 7 crosses an epoch end
    for (int i = 0; i < stop; ++i) a.next();
    const LoaderCursor at = a.cursor();
    BatchLoader b(d, o, at);
    for (int i = 0; i < 3; ++i) REQUIRE(same_batch(a.next(), b.next()));
    CHECK(b.cursor().epoch == a.cursor().epoch);
    CHECK(b.cursor().position == a.cursor().position);
  }
  // An epoch's end reads as the next epoch's start, and the raw form is accepted too.
  BatchLoader c(d, o);
  for (std::int64_t i = 0; i < per_epoch; ++i) {
    const Batch& b = c.next();
    if (!o.drop_last && i == per_epoch - 1) CHECK(b.images.dim(0) == 40 % 6);
  }
  CHECK(c.cursor().epoch == 1);
  CHECK(c.cursor().position == 0);
  BatchLoader raw(d, o, LoaderCursor{0, per_epoch});
  CHECK(raw.next().epoch == 1);
  CHECK_THROWS_AS(BatchLoader(d, o, LoaderCursor{0, per_epoch + 1}), DataError);
}

TEST_CASE("loader epoch without shuffle is dataset order; partial last batch", "[unit][data]") {
  const Dataset d = indexed_dataset(10);
  LoaderOptions o = plain_options(4);
  o.shuffle = false;
  o.drop_last = false;
  o.prefetch = 1;
  BatchLoader loader(d, o);
  std::vector<std::int32_t> got;
  for (int i = 0; i < 6; ++i) {
    const Batch& b = loader.next();
    CHECK(b.images.dim(0) == static_cast<std::int64_t>(b.labels.size()));
    got.insert(got.end(), b.labels.begin(), b.labels.end());
    // kNone: value = pixel / 255, exact copy of the example.
    const std::int64_t first = b.labels[0];
    CHECK(b.images.data()[5] == d.images[first * kImageBytes + 5] / 255.0f);
  }
  CHECK(got ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("augmentation crops and flips within the padded image, deterministically",
          "[unit][data]") {
  const Dataset d = indexed_dataset(16);
  LoaderOptions o = plain_options(16);
  o.shuffle = false;
  o.augment = true;
  BatchLoader a(d, o), b(d, o);
  const Batch& x = a.next();
  REQUIRE(same_batch(x, b.next()));
  REQUIRE(x.images.dims() == Dims{16, 3, 32, 32});
  int changed = 0;
  for (int i = 0; i < 16; ++i) {
    // Find the crop offset and flip that reproduce the output exactly.
    bool found = false;
    for (int dy = 0; dy <= 8 && !found; ++dy)
      for (int dx = 0; dx <= 8 && !found; ++dx)
        for (int flip = 0; flip < 2 && !found; ++flip) {
          bool ok = true;
          for (int c = 0; c < 3 && ok; ++c)
            for (int h = 0; h < 32 && ok; ++h)
              for (int w = 0; w < 32 && ok; ++w) {
                const int sy = h + dy - 4, sx = (flip ? 31 - w : w) + dx - 4;
                const float want =
                    (sy < 0 || sy >= 32 || sx < 0 || sx >= 32)
                        ? 0.0f
                        : d.images[i * kImageBytes + c * 1024 + sy * 32 + sx] / 255.0f;
                ok = x.images.at(i, c, h, w) == want;
              }
          if (ok) {
            found = true;
            changed += (dy != 4 || dx != 4 || flip) ? 1 : 0;
          }
        }
    CHECK(found);
  }
  CHECK(changed >= 10);
}

TEST_CASE("channel-stats normalization gives zero mean and unit std", "[unit][data]") {
  Dataset d = indexed_dataset(64, 11);
  // Skew the channels so the statistics differ per channel.
  for (std::int64_t i = 0; i < d.count; ++i)
    for (int p = 0; p < kImagePlane; ++p) d.images[i * kImageBytes + p] /= 3;
  LoaderOptions o = plain_options(64);
  o.normalization = Normalization::kChannelStats;
  o.stats = compute_channel_stats(d);
  BatchLoader loader(d, o);
  const Batch& b = loader.next();
  for (int c = 0; c < 3; ++c) {
    double s = 0, sq = 0;
    const double n = 64.0 * kImagePlane;
    for (int i = 0; i < 64; ++i)
      for (int p = 0; p < kImagePlane; ++p) {
        const double v = b.images.data()[i * kImageBytes + c * kImagePlane + p];
        s += v;
        sq += v * v;
      }
    CHECK(std::abs(s / n) < 1e-4);
    CHECK(std::sqrt(sq / n - (s / n) * (s / n)) == Approx(1.0).epsilon(1e-4));
  }
  LoaderOptions bad = o;
  bad.stats.std[1] = 0.0f;
  CHECK_THROWS_AS(BatchLoader(d, bad), DataError);
}

TEST_CASE("per-image standardization, and fill_eval_batch in dataset order", "[unit][data]") {
  Dataset d = indexed_dataset(7, 3);
  std::fill_n(d.images.begin() + 6 * kImageBytes, kImageBytes, 77);  // constant image
  LoaderOptions o = plain_options(3);
  o.normalization = Normalization::kPerImage;
  Batch out;
  fill_eval_batch(d, o, 3, 4, out);
  REQUIRE(out.images.dims() == Dims{4, 3, 32, 32});
  CHECK(out.labels == std::vector<std::int32_t>{3, 4, 5, 6});
  for (int i = 0; i < 3; ++i) {
    double s = 0, sq = 0;
    for (int k = 0; k < kImageBytes; ++k) {
      const double v = out.images.data()[i * kImageBytes + k];
      s += v;
      sq += v * v;
    }
    CHECK(std::abs(s / kImageBytes) < 1e-5);
    CHECK(std::sqrt(sq / kImageBytes) == Approx(1.0).epsilon(1e-4));
  }
  for (int k = 0; k < kImageBytes; ++k) REQUIRE(out.images.data()[3 * kImageBytes + k] == 0.0f);

  // Same shape: storage reused; a different final batch size reallocates.
  const float* storage = out.images.data();
  o.normalization = Normalization::kNone;
  fill_eval_batch(d, o, 0, 4, out);
  CHECK(out.images.data() == storage);
  CHECK(out.images.at(2, 1, 5, 6) == d.images[2 * kImageBytes + 1024 + 5 * 32 + 6] / 255.0f);
  fill_eval_batch(d, o, 4, 3, out);
  CHECK(out.images.dims() == Dims{3, 3, 32, 32});
  CHECK(out.labels == std::vector<std::int32_t>{4, 5, 6});
}

TEST_CASE("loader rejects impossible options", "[unit][data]") {
  const Dataset d = indexed_dataset(10);
  LoaderOptions o = plain_options(16);
  CHECK_THROWS_WITH(BatchLoader(d, o), Contains("fewer than one batch"));
  o.batch_size = 2;
  o.shard = 2;
  o.num_shards = 2;
  CHECK_THROWS_AS(BatchLoader(d, o), DataError);
  o.shard = 0;
  o.prefetch = 0;
  CHECK_THROWS_AS(BatchLoader(d, o), DataError);
  CHECK_THROWS_AS(BatchLoader(Dataset{}, plain_options(1)), DataError);
}
