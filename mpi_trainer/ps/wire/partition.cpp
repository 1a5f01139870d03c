#include "ps/wire/partition.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.hpp"

namespace mt {

Partition::Partition(const ParamLayout& layout, int shards)
    : layout_(layout), entries_(static_cast<std::size_t>(shards)), floats_(static_cast<std::size_t>(shards), 0) {
  MT_ASSERT(shards >= 1, "at least one shard");
  std::vector<int> order(layout.entries().size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return layout.at(a).size > layout.at(b).size; });
  for (int e : order) {
    const auto s = static_cast<std::size_t>(std::min_element(floats_.begin(), floats_.end()) - floats_.begin());
    entries_[s].push_back(e);
    floats_[s] += layout.at(e).size;
  }
  for (auto& v : entries_)
    std::sort(v.begin(), v.end());
}

void Partition::pack(int shard, const FlatTensors& full, std::span<float> out) const {
  std::int64_t o = 0;
  for (int e : entries(shard)) {
    const auto& info = layout_.at(e);
    std::memcpy(out.data() + o, full.flat().data() + info.offset, static_cast<std::size_t>(info.size) * sizeof(float));
    o += info.size;
  }
}

void Partition::unpack(int shard, std::span<const float> in, FlatTensors& full) const {
  std::int64_t o = 0;
  for (int e : entries(shard)) {
    const auto& info = layout_.at(e);
    std::memcpy(full.flat().data() + info.offset, in.data() + o, static_cast<std::size_t>(info.size) * sizeof(float));
    o += info.size;
  }
}

std::vector<Partition::Run> Partition::runs(int shard) const {
  std::vector<Run> out;
  std::int64_t o = 0;
  for (int e : entries(shard)) {
    const auto& info = layout_.at(e);
    if (!out.empty() && out.back().decay == info.decay)
      out.back().length += info.size;
    else
      out.push_back({o, info.size, info.decay});
    o += info.size;
  }
  return out;
}

}  // namespace mt
