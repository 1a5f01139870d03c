// The batch loader: determinism, sharding, resumption at a cursor, augmentation and
// normalization (the readers are in test_data.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "test_util.hpp"

using namespace mt;
using Catch::Matchers::Contains;

namespace {

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
