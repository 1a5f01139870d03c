#include "data/loader.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace mt {

namespace {

using Lut = std::array<std::array<float, 256>, 3>;

constexpr int kPad = 4;  // augmentation: zero padding per side before the random crop
constexpr std::uint64_t kPermutationTag = 0x7065726D75746531ull;
constexpr std::uint64_t kAugmentTag = 0x6175676D656E7431ull;

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Order-sensitive hash of the values that alone may decide a batch's content.
std::uint64_t mix_seed(std::initializer_list<std::uint64_t> values) {
  std::uint64_t h = 0;
  for (std::uint64_t v : values) h = splitmix64(h ^ splitmix64(v));
  return h;
}

void validate_normalization(const LoaderOptions& opts) {
  if (opts.normalization != Normalization::kChannelStats) return;
  for (int c = 0; c < kImageChannels; ++c)
    if (!(opts.stats.std[c] > 0.0f) || !std::isfinite(opts.stats.std[c]) ||
        !std::isfinite(opts.stats.mean[c]))
      throw DataError("channel statistics for channel " + std::to_string(c) +
                      " are invalid (mean " + std::to_string(opts.stats.mean[c]) + ", std " +
                      std::to_string(opts.stats.std[c]) + "); std must be finite and > 0");
}

Lut make_lut(const LoaderOptions& opts) {
  Lut lut{};
  for (int c = 0; c < kImageChannels; ++c)
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.0f;
      lut[c][v] = opts.normalization == Normalization::kChannelStats
                      ? (x - opts.stats.mean[c]) / opts.stats.std[c]
                      : x;
    }
  return lut;
}

struct Crop {
  int dy = kPad, dx = kPad;  // top-left of the 32x32 window in the padded 40x40 image
  bool flip = false;
};

// src: (3, 32, 32) uint8; dst: (3, 32, 32) float.
void write_example(const std::uint8_t* src, float* dst, const Crop& crop, const Lut& lut,
                   bool per_image) {
  for (int c = 0; c < kImageChannels; ++c) {
    const std::uint8_t* plane = src + c * kImagePlane;
    float* out = dst + c * kImagePlane;
    const float pad_value = lut[c][0];  // padding is black before normalization, as in torchvision
    for (int h = 0; h < kImageSize; ++h) {
      const int sy = h + crop.dy - kPad;
      float* row = out + h * kImageSize;
      if (sy < 0 || sy >= kImageSize) {
        std::fill_n(row, kImageSize, pad_value);
        continue;
      }
      const std::uint8_t* src_row = plane + sy * kImageSize;
      for (int w = 0; w < kImageSize; ++w) {
        const int sx = (crop.flip ? kImageSize - 1 - w : w) + crop.dx - kPad;
        row[w] = (sx < 0 || sx >= kImageSize) ? pad_value : lut[c][src_row[sx]];
      }
    }
  }
  if (!per_image) return;
  double sum = 0.0, sum_sq = 0.0;
  for (std::int64_t i = 0; i < kImageBytes; ++i) sum += dst[i];
  const double mean = sum / kImageBytes;
  for (std::int64_t i = 0; i < kImageBytes; ++i) sum_sq += (dst[i] - mean) * (dst[i] - mean);
  const double sd = std::sqrt(sum_sq / kImageBytes);
  // The floor keeps a constant image finite (it maps to zeros), as TF's version does.
  const double scale = 1.0 / std::max(sd, 1.0 / std::sqrt(static_cast<double>(kImageBytes)));
  for (std::int64_t i = 0; i < kImageBytes; ++i)
    dst[i] = static_cast<float>((dst[i] - mean) * scale);
}

void check_dataset(const Dataset& data) {
  if (data.count <= 0) throw DataError("data set '" + data.name + "' is empty");
  MT_ASSERT(data.images.size() == static_cast<std::size_t>(data.count * kImageBytes) &&
                data.labels.size() == static_cast<std::size_t>(data.count),
            "dataset buffers do not match its count");
}

}  // namespace

const char* normalization_name(Normalization n) {
  switch (n) {
    case Normalization::kNone: return "none";
    case Normalization::kChannelStats: return "channel-stats";
    case Normalization::kPerImage: return "per-image";
  }
  return "?";
}

BatchLoader::BatchLoader(const Dataset& data, LoaderOptions opts, LoaderCursor start)
    : data_(data), opts_(opts) {
  check_dataset(data_);
  if (opts_.batch_size < 1)
    throw DataError("batch size must be >= 1, got " + std::to_string(opts_.batch_size));
  if (opts_.num_shards < 1 || opts_.shard < 0 || opts_.shard >= opts_.num_shards)
    throw DataError("shard " + std::to_string(opts_.shard) + " of " +
                    std::to_string(opts_.num_shards) + " is out of range");
  if (opts_.prefetch < 1)
    throw DataError("prefetch must be >= 1, got " + std::to_string(opts_.prefetch));
  validate_normalization(opts_);

  shard_size_ = data_.count / opts_.num_shards;
  const std::int64_t batch = opts_.batch_size;
  batches_per_epoch_ = opts_.drop_last ? shard_size_ / batch : (shard_size_ + batch - 1) / batch;
  if (batches_per_epoch_ == 0)
    throw DataError("data set '" + data_.name + "' gives shard " + std::to_string(opts_.shard) +
                    " of " + std::to_string(opts_.num_shards) + " only " +
                    std::to_string(shard_size_) + " examples, fewer than one batch of " +
                    std::to_string(batch));
  if (start.epoch < 0 || start.position < 0 || start.position > batches_per_epoch_)
    throw DataError("loader cursor (epoch " + std::to_string(start.epoch) + ", position " +
                    std::to_string(start.position) + ") is outside an epoch of " +
                    std::to_string(batches_per_epoch_) +
                    " batches; did the batch size or shard count change since it was saved?");
  if (start.position == batches_per_epoch_) start = {start.epoch + 1, 0};
  start_ = start;
  cursor_ = start;
  lut_ = make_lut(opts_);

  permutation_.resize(static_cast<std::size_t>(data_.count));
  order_.resize(static_cast<std::size_t>(shard_size_));
  const std::int64_t tail = opts_.drop_last ? 0 : shard_size_ % batch;
  slots_.resize(static_cast<std::size_t>(opts_.prefetch) + 1);
  for (Slot& slot : slots_) {
    slot.batch.images = Tensor({batch, kImageChannels, kImageSize, kImageSize});
    if (tail > 0)
      slot.alt_images = slot.batch.images.view(0, {tail, kImageChannels, kImageSize, kImageSize});
    slot.batch.labels.reserve(static_cast<std::size_t>(batch));
  }
  thread_ = std::thread(&BatchLoader::produce, this);
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  space_cv_.notify_all();
  try {
    if (thread_.joinable()) thread_.join();
  } catch (...) {
    // join only throws on a broken thread handle; a destructor must not throw regardless.
  }
}

const Batch& BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (holding_) {
    ++consumed_;
    holding_ = false;
    space_cv_.notify_one();
  }
  if (produced_ == consumed_ && !error_) {
    const auto t0 = Clock::now();
    ready_cv_.wait(lock, [&] { return produced_ > consumed_ || error_; });
    wait_seconds_ += since(t0);
  }
  // Batches finished before a failure are still delivered; the error surfaces in order.
  if (produced_ == consumed_) std::rethrow_exception(error_);
  holding_ = true;
  const Batch& batch =
      slots_[static_cast<std::size_t>(consumed_ % static_cast<std::int64_t>(slots_.size()))].batch;
  cursor_ = {batch.epoch, batch.index_in_epoch + 1};
  if (cursor_.position == batches_per_epoch_) cursor_ = {cursor_.epoch + 1, 0};
  return batch;
}

LoaderCursor BatchLoader::cursor() const { return cursor_; }

void BatchLoader::produce() noexcept {
  try {
    const auto ring = static_cast<std::int64_t>(slots_.size());
    LoaderCursor at = start_;
    std::int64_t order_epoch = -1;
    for (;;) {
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_cv_.wait(lock, [&] { return stop_ || produced_ - consumed_ < ring; });
        if (stop_) return;
        slot = &slots_[static_cast<std::size_t>(produced_ % ring)];
      }
      if (at.epoch != order_epoch) {
        build_order(at.epoch);
        order_epoch = at.epoch;
      }
      fill(*slot, at.epoch, at.position);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++produced_;
      }
      ready_cv_.notify_one();
      if (++at.position == batches_per_epoch_) at = {at.epoch + 1, 0};
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    ready_cv_.notify_one();
  }
}

void BatchLoader::build_order(std::int64_t epoch) {
  std::iota(permutation_.begin(), permutation_.end(), std::int64_t{0});
  if (opts_.shuffle) {
    // Not seeded by shard: every shard must cut the same permutation to stay disjoint.
    Rng rng(mix_seed({opts_.seed, kPermutationTag, static_cast<std::uint64_t>(epoch)}));
    for (std::int64_t i = data_.count - 1; i > 0; --i)
      std::swap(permutation_[i], permutation_[rng.below(static_cast<std::uint64_t>(i + 1))]);
  }
  for (std::int64_t k = 0; k < shard_size_; ++k)
    order_[k] = permutation_[k * opts_.num_shards + opts_.shard];
}

void BatchLoader::fill(Slot& slot, std::int64_t epoch, std::int64_t position) {
  const std::int64_t begin = position * opts_.batch_size;
  const std::int64_t n = std::min<std::int64_t>(opts_.batch_size, shard_size_ - begin);
  Batch& batch = slot.batch;
  if (batch.images.dim(0) != n) std::swap(batch.images, slot.alt_images);
  MT_ASSERT(batch.images.dim(0) == n, "no preallocated batch of size " + std::to_string(n));
  batch.labels.resize(static_cast<std::size_t>(n));
  batch.epoch = epoch;
  batch.index_in_epoch = position;

  Rng rng(mix_seed({opts_.seed, kAugmentTag, static_cast<std::uint64_t>(opts_.shard),
                    static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(position)}));
  const bool per_image = opts_.normalization == Normalization::kPerImage;
  float* dst = batch.images.data();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t idx = order_[begin + i];
    Crop crop;
    if (opts_.augment) {
      crop.dy = static_cast<int>(rng.below(2 * kPad + 1));
      crop.dx = static_cast<int>(rng.below(2 * kPad + 1));
      crop.flip = rng.below(2) == 1;
    }
    write_example(data_.images.data() + idx * kImageBytes, dst + i * kImageBytes, crop, lut_,
                  per_image);
    batch.labels[i] = data_.labels[idx];
  }
}

void fill_eval_batch(const Dataset& data, const LoaderOptions& opts, std::int64_t start,
                     std::int64_t count, Batch& out) {
  check_dataset(data);
  MT_ASSERT(start >= 0 && count > 0 && start + count <= data.count,
            "eval batch [" + std::to_string(start) + ", " + std::to_string(start + count) +
                ") outside the " + std::to_string(data.count) + " examples");
  validate_normalization(opts);
  const Dims dims{count, kImageChannels, kImageSize, kImageSize};
  if (out.images.empty() || out.images.dims() != dims || out.images.layout() != Layout::kPlain)
    out.images = Tensor(dims);
  out.labels.resize(static_cast<std::size_t>(count));
  out.epoch = 0;
  out.index_in_epoch = opts.batch_size > 0 ? start / opts.batch_size : 0;

  const Lut lut = make_lut(opts);
  const bool per_image = opts.normalization == Normalization::kPerImage;
  for (std::int64_t i = 0; i < count; ++i) {
    write_example(data.images.data() + (start + i) * kImageBytes,
                  out.images.data() + i * kImageBytes, Crop{}, lut, per_image);
    out.labels[i] = data.labels[start + i];
  }
}

}  // namespace mt
