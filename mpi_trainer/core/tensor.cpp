#include "core/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"

namespace mt {

int block_size(Layout layout) {
  switch (layout) {
    case Layout::kPlain: return 1;
    case Layout::kBlocked8: return 8;
    case Layout::kBlocked16: return 16;
  }
  return 1;
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kPlain: return "plain";
    case Layout::kBlocked8: return "nChw8c";
    case Layout::kBlocked16: return "nChw16c";
  }
  return "?";
}

std::string dims_to_string(const Dims& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + ")";
}

std::int64_t product(const Dims& dims) {
  std::int64_t p = 1;
  for (auto d : dims) p *= d;
  return p;
}

std::int64_t Tensor::storage_size(const Dims& dims, Layout layout) {
  if (layout == Layout::kPlain) return product(dims);
  MT_ASSERT(dims.size() == 4, "blocked layouts are 4-D");
  const std::int64_t b = block_size(layout);
  const std::int64_t c_padded = (dims[1] + b - 1) / b * b;
  return dims[0] * c_padded * dims[2] * dims[3];
}

namespace {
struct AlignedFree {
  void operator()(float* p) const noexcept { std::free(p); }
};

std::shared_ptr<float> allocate(std::int64_t count) {
  const std::size_t bytes =
      (static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return std::shared_ptr<float>(static_cast<float*>(p), AlignedFree{});
}
}  // namespace

Tensor::Tensor(Dims dims, Layout layout) : dims_(std::move(dims)), layout_(layout) {
  for (auto d : dims_) MT_ASSERT(d >= 0, "negative dimension in " + dims_to_string(dims_));
  data_ = allocate(storage_size());
}

Tensor Tensor::adopt(Dims dims, Layout layout, std::shared_ptr<float> storage, bool on_device) {
  MT_ASSERT(storage != nullptr, "adopt: no storage");
  Tensor t;
  t.dims_ = std::move(dims);
  t.layout_ = layout;
  t.data_ = std::move(storage);
  t.on_device_ = on_device;
  return t;
}

Tensor Tensor::view(std::int64_t offset, Dims dims, Layout layout) const {
  MT_ASSERT(offset >= 0 && offset + storage_size(dims, layout) <= storage_size(),
            "view out of range");
  Tensor t;
  t.dims_ = std::move(dims);
  t.layout_ = layout;
  t.data_ = std::shared_ptr<float>(data_, data_.get() + offset);
  t.on_device_ = on_device_;
  return t;
}

Tensor Tensor::clone() const {
  MT_ASSERT(!on_device_, "clone of a device tensor");
  Tensor t(dims_, layout_);
  std::memcpy(t.data(), data(), static_cast<std::size_t>(storage_size()) * sizeof(float));
  return t;
}

void Tensor::zero() {
  MT_ASSERT(!on_device_, "zero() of a device tensor: use the backend");
  std::memset(data(), 0, static_cast<std::size_t>(storage_size()) * sizeof(float));
}

void Tensor::fill(float value) {
  MT_ASSERT(!on_device_, "fill() of a device tensor: use the backend");
  if (layout_ == Layout::kPlain) {
    std::fill_n(data(), numel(), value);
    return;
  }
  for (std::int64_t n = 0; n < dims_[0]; ++n)
    for (std::int64_t c = 0; c < dims_[1]; ++c)
      for (std::int64_t h = 0; h < dims_[2]; ++h)
        for (std::int64_t w = 0; w < dims_[3]; ++w) at(n, c, h, w) = value;
}

std::int64_t Tensor::offset(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
  const std::int64_t C = dims_[1], H = dims_[2], W = dims_[3];
  if (layout_ == Layout::kPlain) return ((n * C + c) * H + h) * W + w;
  const std::int64_t b = block_size(layout_);
  const std::int64_t cb = (C + b - 1) / b;
  return (((n * cb + c / b) * H + h) * W + w) * b + c % b;
}

void convert_layout(const Tensor& src, Tensor& dst) {
  MT_ASSERT(src.dims() == dst.dims() && src.rank() == 4, "convert_layout needs equal 4-D shapes");
  MT_ASSERT(!src.on_device() && !dst.on_device(), "convert_layout of a device tensor");
  if (src.layout() == dst.layout()) {
    std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.storage_size()) * 4);
    return;
  }
  dst.zero();
  const auto& d = src.dims();
  for (std::int64_t n = 0; n < d[0]; ++n)
    for (std::int64_t c = 0; c < d[1]; ++c)
      for (std::int64_t h = 0; h < d[2]; ++h)
        for (std::int64_t w = 0; w < d[3]; ++w) dst.at(n, c, h, w) = src.at(n, c, h, w);
}

Tensor to_plain(const Tensor& src) {
  if (src.layout() == Layout::kPlain) return src.clone();
  Tensor dst(src.dims(), Layout::kPlain);
  convert_layout(src, dst);
  return dst;
}

}  // namespace mt
