#include "nn/params.hpp"

#include "core/error.hpp"

namespace mt {

int ParamLayout::add(std::string name, Dims dims, bool decay) {
  MT_ASSERT(find(name) < 0, "duplicate parameter name " + name);
  ParamInfo info;
  info.name = std::move(name);
  info.size = product(dims);
  info.dims = std::move(dims);
  // Keep each entry 64-byte aligned so views are aligned for vector loads.
  info.offset = (total_ + 15) / 16 * 16;
  info.decay = decay;
  total_ = info.offset + info.size;
  entries_.push_back(std::move(info));
  return static_cast<int>(entries_.size()) - 1;
}

int ParamLayout::find(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace mt

namespace mt {

FlatTensors::FlatTensors(const ParamLayout& layout, Tensor flat) : layout_(&layout), flat_(std::move(flat)) {
  MT_ASSERT(flat_.rank() == 1 && flat_.numel() == layout.total(),
            "flat storage of " + dims_to_string(flat_.dims()) + " for a layout of " +
                std::to_string(layout.total()) + " floats");
}

}  // namespace mt
