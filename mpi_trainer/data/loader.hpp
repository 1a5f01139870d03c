// Training batches prepared ahead on a background thread, and evaluation batches in dataset
// order. A batch's content depends only on (seed, shard, epoch, position), never on thread
// timing, so runs repeat and a checkpointed LoaderCursor resumes the exact data stream.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.hpp"
#include "data/dataset.hpp"

namespace mt {

enum class Normalization {
  kNone,          // pixel / 255
  kChannelStats,  // (pixel / 255 - stats.mean[c]) / stats.std[c]
  kPerImage,      // like tf.image.per_image_standardization on pixel / 255:
                  // (x - mean) / max(std, 1 / sqrt(3072)) over the whole (augmented) image
};

const char* normalization_name(Normalization n);

struct LoaderOptions {
  int batch_size = 128;
  bool shuffle = true;
  bool augment = false;  // pad 4 (zeros) + random 32x32 crop + random horizontal flip
  Normalization normalization = Normalization::kChannelStats;
  ChannelStats stats{};
  std::uint64_t seed = 1;
  int shard = 0;
  int num_shards = 1;
  bool drop_last = true;
  int prefetch = 2;  // batches prepared ahead on a background thread
};

struct Batch {
  Tensor images;  // (N, 3, 32, 32) plain float
  std::vector<std::int32_t> labels;
  std::int64_t epoch = 0;
  std::int64_t index_in_epoch = 0;
};

struct LoaderCursor {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // batches consumed in the epoch
};

// Epoch e visits a permutation of all examples seeded by (seed, e) (identity without shuffle);
// shard s of S takes every S-th entry of it from entry s, floor(count / S) entries in all, so
// shards are disjoint within an epoch and all run the same number of steps. The up to S - 1
// left over change from epoch to epoch. Augmentation draws from an Rng seeded by
// (seed, shard, epoch, position). `data` must outlive the loader.
class BatchLoader {
 public:
  BatchLoader(const Dataset& data, LoaderOptions opts, LoaderCursor start = {});
  ~BatchLoader();  // stops and joins the thread; never throws
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Blocks until the next batch is ready; the reference stays valid until the next call.
  // Rethrows an exception raised while preparing it.
  const Batch& next();
  // Position after the last batch next() returned (the start cursor before any call); an
  // epoch's end reads as {epoch + 1, 0}. Restarting with it neither replays nor skips data.
  LoaderCursor cursor() const;
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Examples this shard visits per epoch (before drop_last).
  std::int64_t shard_size() const { return shard_size_; }
  // Total time next() spent blocked waiting for the background thread.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot {
    Batch batch;
    // Shares batch.images' storage with the shape of the other batch size (the partial last
    // batch when !drop_last); swapped in so no batch allocates after construction.
    Tensor alt_images;
  };

  void produce() noexcept;
  void build_order(std::int64_t epoch);
  void fill(Slot& slot, std::int64_t epoch, std::int64_t position);

  const Dataset& data_;
  const LoaderOptions opts_;
  std::int64_t shard_size_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  LoaderCursor start_;
  std::array<std::array<float, 256>, 3> lut_{};  // pixel value -> normalized float per channel

  // Touched only by the producer thread.
  std::vector<std::int64_t> permutation_;  // all examples, this epoch's order
  std::vector<std::int64_t> order_;        // this shard's examples, this epoch's order

  // Touched only by the consumer.
  LoaderCursor cursor_;
  double wait_seconds_ = 0.0;
  bool holding_ = false;  // the consumer still reads slots_[consumed_ % size]

  std::vector<Slot> slots_;  // prefetch + 1: the one the consumer holds, and prefetch ahead
  std::mutex mutex_;
  std::condition_variable ready_cv_;  // producer -> consumer: a batch is ready or it failed
  std::condition_variable space_cv_;  // consumer -> producer: a slot is free or stop
  std::int64_t produced_ = 0;         // guarded by mutex_
  std::int64_t consumed_ = 0;         // guarded by mutex_
  bool stop_ = false;                 // guarded by mutex_
  std::exception_ptr error_;          // guarded by mutex_
  std::thread thread_;                // last: starts after everything above is ready
};

// Fills `out` with examples [start, start + count) of `data` in dataset order, normalized per
// `opts` without augmentation (sharding and shuffling are ignored). out.images is reallocated
// only when its shape changes, e.g. for a final partial batch.
void fill_eval_batch(const Dataset& data, const LoaderOptions& opts, std::int64_t start,
                     std::int64_t count, Batch& out);

}  // namespace mt
