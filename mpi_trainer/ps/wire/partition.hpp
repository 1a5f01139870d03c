// Parameters split across parameter-server shards, balanced by bytes: whole tensors, largest
// first, each to the shard holding the fewest bytes so far. Each shard's part is packed in
// ParamLayout order into one contiguous buffer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "nn/params.hpp"

namespace mt {

class Partition {
 public:
  Partition(const ParamLayout& layout, int shards);

  int shards() const { return static_cast<int>(entries_.size()); }
  // Entry indices of `shard`, in layout order.
  const std::vector<int>& entries(int shard) const { return entries_.at(static_cast<std::size_t>(shard)); }
  std::int64_t floats(int shard) const { return floats_.at(static_cast<std::size_t>(shard)); }

  // Full flat buffer <-> one shard's packed part.
  void pack(int shard, const FlatTensors& full, std::span<float> out) const;
  void unpack(int shard, std::span<const float> in, FlatTensors& full) const;

  // Weight-decay runs of a shard's packed buffer: (offset, length, decay).
  struct Run {
    std::int64_t offset, length;
    bool decay;
  };
  std::vector<Run> runs(int shard) const;

 private:
  const ParamLayout& layout_;
  std::vector<std::vector<int>> entries_;
  std::vector<std::int64_t> floats_;
};

}  // namespace mt
