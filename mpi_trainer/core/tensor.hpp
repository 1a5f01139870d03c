// A float32 tensor. Activations are 4-D (N, C, H, W); the memory order is given by
// Layout: plain row-major NCHW, or oneDNN's channel-blocked nChw8c / nChw16c, whose channel
// count is padded up to a multiple of the block with zeros. Parameters are always plain.
// Storage is host memory, or device memory adopted from a device backend (on_device()): such a
// tensor's data() is a device pointer that only that backend's ops and copies may touch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mt {

enum class Layout : std::uint8_t { kPlain, kBlocked8, kBlocked16 };

// Channels per block: 1 for plain.
int block_size(Layout layout);
const char* layout_name(Layout layout);

using Dims = std::vector<std::int64_t>;
std::string dims_to_string(const Dims& dims);
std::int64_t product(const Dims& dims);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zeroed, 64-byte aligned storage.
  explicit Tensor(Dims dims, Layout layout = Layout::kPlain);

  // Wraps storage owned elsewhere (a device backend's allocation, freed by `storage`'s deleter).
  // `storage` must hold at least storage_size(dims, layout) floats.
  static Tensor adopt(Dims dims, Layout layout, std::shared_ptr<float> storage, bool on_device);

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // A tensor sharing `storage_size(dims, layout)` floats of this one's storage from `offset`.
  Tensor view(std::int64_t offset, Dims dims, Layout layout = Layout::kPlain) const;
  Tensor clone() const;

  const Dims& dims() const { return dims_; }
  std::int64_t dim(int i) const { return dims_.at(static_cast<std::size_t>(i)); }
  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t numel() const { return product(dims_); }
  // Floats the storage holds, including padded channels of a blocked layout.
  std::int64_t storage_size() const { return storage_size(dims_, layout_); }
  static std::int64_t storage_size(const Dims& dims, Layout layout);
  Layout layout() const { return layout_; }
  bool empty() const { return data_ == nullptr; }
  bool on_device() const { return on_device_; }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::span<float> span() { return {data(), static_cast<std::size_t>(storage_size())}; }
  std::span<const float> span() const {
    return {data(), static_cast<std::size_t>(storage_size())};
  }

  // Host tensors only (as are clone, at and the layout conversions below).
  void zero();
  void fill(float value);  // logical elements only; padding stays zero

  // Offset of logical element (n, c, h, w) of a 4-D tensor in either layout.
  std::int64_t offset(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const;
  float& at(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
    return data_.get()[offset(n, c, h, w)];
  }
  float at(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
    return data_.get()[offset(n, c, h, w)];
  }

 private:
  Dims dims_;
  Layout layout_ = Layout::kPlain;
  std::shared_ptr<float> data_;
  bool on_device_ = false;
};

// Copies between layouts of the same logical 4-D shape (used at the model's edges and by tests).
void convert_layout(const Tensor& src, Tensor& dst);
// A plain NCHW copy of any tensor.
Tensor to_plain(const Tensor& src);

}  // namespace mt
