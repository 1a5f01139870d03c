// Named parameters in one flat buffer. Every trainable tensor of a model, its gradient, its
// momentum and the BatchNorm statistics live in flat float arrays with the same layout, so the
// optimizer is one loop, a push or pull is one message, and a checkpoint maps name -> slice.
// Names are dotted paths (`stage2.block3.conv1.weight`) that map 1:1 to HDF5 paths.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace mt {

struct ParamInfo {
  std::string name;
  Dims dims;
  std::int64_t offset = 0;
  std::int64_t size = 0;
  bool decay = true;  // weight decay applies
};

// The layout of a flat buffer: names, shapes, offsets.
class ParamLayout {
 public:
  // Returns the index of the new entry.
  int add(std::string name, Dims dims, bool decay = true);
  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ParamInfo& at(int index) const { return entries_.at(static_cast<std::size_t>(index)); }
  std::int64_t total() const { return total_; }
  // -1 when absent.
  int find(const std::string& name) const;

 private:
  std::vector<ParamInfo> entries_;
  std::int64_t total_ = 0;
};

// A flat buffer laid out by a ParamLayout.
class FlatTensors {
 public:
  FlatTensors() = default;
  explicit FlatTensors(const ParamLayout& layout) : layout_(&layout), flat_(Dims{layout.total()}) {}
  // Over given storage (for example a device backend's tensor of layout.total() floats).
  FlatTensors(const ParamLayout& layout, Tensor flat);

  const ParamLayout& layout() const { return *layout_; }
  Tensor& flat() { return flat_; }
  const Tensor& flat() const { return flat_; }
  std::span<float> span() { return flat_.span(); }
  std::span<const float> span() const { return flat_.span(); }
  // A tensor of the entry's shape sharing the flat storage.
  Tensor view(int index) const {
    const auto& e = layout_->at(index);
    return flat_.view(e.offset, e.dims);
  }

 private:
  const ParamLayout* layout_ = nullptr;
  Tensor flat_;
};

}  // namespace mt
