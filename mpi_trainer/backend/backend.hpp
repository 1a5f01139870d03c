// The compute interface every backend implements (CPU on oneDNN, CUDA on cuDNN/cuBLAS).
//
// Shape-bound ops (convolution, batch norm) are objects made once per layer and input shape, so
// a backend can build its primitives, pick algorithms and size workspaces once and reuse them
// every step. Cheap element-wise ops are plain calls. Activations use the layout that
// activation_layout() names; parameters and their gradients are always plain row-major.
// The plain-loop oracle for every op is in backend/reference (tests only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace mt {

struct ConvSpec {
  int in_channels = 0;
  int out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int pad = 1;
  int out_size(int in) const { return (in + 2 * pad - kernel) / stride + 1; }
};

class ConvOp {
 public:
  virtual ~ConvOp() = default;
  // x: (N, Cin, H, W); w: (Cout, Cin, K, K) plain; y: (N, Cout, Ho, Wo). No bias.
  virtual void forward(const Tensor& x, const Tensor& w, Tensor& y) = 0;
  // dy: (N, Cout, Ho, Wo) -> dx: (N, Cin, H, W), overwritten.
  virtual void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  // dw: (Cout, Cin, K, K) plain, overwritten.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw) = 0;
};

// Spatial batch normalization over (N, H, W) per channel, optionally followed by ReLU.
// mean/var are the batch statistics (biased variance), each (C) plain.
class BatchNormOp {
 public:
  virtual ~BatchNormOp() = default;
  virtual void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                Tensor& y, Tensor& mean, Tensor& var) = 0;
  // Uses the given (running) statistics.
  virtual void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& mean, const Tensor& var, Tensor& y) = 0;
  // x, y, mean, var from the last forward_training of this op. dgamma/dbeta overwritten.
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                        const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta) = 0;
};

struct SgdSpec {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  bool nesterov = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Layout of 4-D activations between layers.
  virtual Layout activation_layout() const = 0;

  virtual std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec, const Dims& x_dims,
                                            Layout x_layout, Layout y_layout) = 0;
  virtual std::unique_ptr<BatchNormOp> make_batchnorm(const Dims& x_dims, Layout layout,
                                                      float eps, bool fuse_relu) = 0;

  // Element-wise ops work on whole storage (zero channel padding stays zero). Outputs may
  // alias inputs.
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy * (y > 0)
  virtual void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  // y = a + b
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  // y = relu(a + b): the end of a post-activation residual block.
  virtual void add_relu(const Tensor& a, const Tensor& b, Tensor& y) = 0;

  // Option-A shortcut: y[n, c + (Cout - Cin) / 2, h, w] = x[n, c, h*s, w*s], zero elsewhere.
  virtual void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y) = 0;
  // dx (overwritten) is the transpose of the above applied to dy.
  virtual void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx) = 0;
  // Same as backward but adds into dx.
  virtual void pad_shortcut_backward_accumulate(const Tensor& dy, int stride, Tensor& dx) = 0;

  // x: (N, C, H, W) -> y: (N, C) plain.
  virtual void global_avg_pool_forward(const Tensor& x, Tensor& y) = 0;
  virtual void global_avg_pool_backward(const Tensor& dy, Tensor& dx) = 0;

  // x: (N, K), w: (M, K), b: (M) -> y: (N, M); all plain.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dx may be empty (not needed). dw, db overwritten.
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                               Tensor& dw, Tensor& db) = 0;

  // logits: (N, M) plain, labels: N ints in [0, M). Writes dlogits = d(mean loss)/dlogits and
  // returns the mean loss; `correct` gets the number of argmax hits.
  virtual float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels,
                                      Tensor& dlogits, int& correct) = 0;

  // One SGD step with momentum on a flat range:
  //   g = grad + wd * param;  v = momentum * v + g;
  //   param -= lr * (nesterov ? g + momentum * v : v)
  virtual void sgd_update(std::span<float> param, std::span<const float> grad,
                          std::span<float> velocity, const SgdSpec& spec) = 0;

  // The same step out of place: reads `param`, writes the updated parameters to `out` (which may
  // be `param` itself; otherwise the two must not overlap). The parameter server updates straight
  // into a reply buffer this way instead of updating and then copying.
  virtual void sgd_update_to(std::span<const float> param, std::span<const float> grad,
                             std::span<float> velocity, std::span<float> out, const SgdSpec& spec) {
    if (out.data() != param.data()) std::copy(param.begin(), param.end(), out.begin());
    sgd_update(out, grad, velocity, spec);
  }

  // Waits for queued work (no-op on the CPU); results of the deferred calls below are in place
  // when it returns.
  virtual void synchronize() {}

  // ---- Memory. Host backends (CPU, reference) compute on host tensors and need none of this.
  // A device backend (CUDA) computes on tensors in its own memory: Network then allocates
  // activations with make_tensor and stages parameters, images and results through upload and
  // download. Ops of a device backend take device tensors, and sgd_update device spans.
  virtual bool device_resident() const { return false; }
  // A zeroed tensor in this backend's memory.
  virtual Tensor make_tensor(Dims dims, Layout layout) { return Tensor(std::move(dims), layout); }
  // Queues host -> backend memory; `host` may be reused as soon as the call returns.
  virtual void upload(std::span<const float> host, Tensor& dst) {
    std::copy(host.begin(), host.end(), dst.data());
  }
  // Queues host -> backend memory on a copy queue beside the compute queue, so an upload issued
  // while the device computes (the next batch's images) overlaps that work. `host` may be reused
  // as soon as the call returns. The caller guarantees that no queued op reads or writes `dst`
  // until the copy is done; ops queued after the next upload_fence() see the values, and
  // synchronize() waits for the copy too.
  virtual void upload_ahead(std::span<const float> host, Tensor& dst) { upload(host, dst); }
  // Ops queued from now on wait (on the device, not the host) for every upload_ahead() before.
  virtual void upload_fence() {}
  // Queues backend memory -> host; `host` holds the values once synchronize() returns.
  virtual void download(const Tensor& src, std::span<float> host) {
    std::copy_n(src.data(), host.size(), host.begin());
  }
  // softmax_cross_entropy for recorded work, touching no host memory: `labels` holds N int32
  // bit patterns in a float tensor (uploaded by the caller, who checked their range), and `out`
  // (2 floats) gets the mean loss, then the number of argmax hits as an int32 bit pattern.
  virtual void softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                                        Tensor& out);

  // ---- Recording (CUDA Graphs). A backend that can_record() captures the device work that
  // `work` queues, without running it, as a Recording whose replay() queues all of it again in
  // one launch (hundreds of kernel launches and cuDNN calls become one). Replays use the same
  // tensors: only their contents may change in between. `work` may queue ops only: no upload,
  // download, synchronize, new tensor or host result (softmax_cross_entropy_to, not _deferred).
  class Recording {
   public:
    virtual ~Recording() = default;
    virtual void replay() = 0;
  };
  virtual bool can_record() const { return false; }
  virtual std::unique_ptr<Recording> record(const std::function<void()>& work);

  // softmax_cross_entropy without waiting: `loss` and `correct` (host memory) are written by
  // synchronize() at the latest. Labels are host memory and may be reused when this returns.
  virtual void softmax_cross_entropy_deferred(const Tensor& logits,
                                              std::span<const std::int32_t> labels,
                                              Tensor& dlogits, float* loss, int* correct) {
    *loss = softmax_cross_entropy(logits, labels, dlogits, *correct);
  }
};

// Every label must index one of `classes` outputs: a bad one is a data error, found on the host
// before device work would read past a row.
inline void check_labels(std::span<const std::int32_t> labels, int classes) {
  for (const std::int32_t l : labels)
    if (l < 0 || l >= classes)
      throw DataError("label " + std::to_string(l) + " out of range [0, " + std::to_string(classes) + ")");
}

// Host memory: labels and results are plain host tensors here.
inline void Backend::softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, Tensor& dlogits,
                                              Tensor& out) {
  MT_ASSERT(labels.numel() >= logits.dim(0) && out.numel() >= 2, "softmax_cross_entropy_to sizes");
  std::vector<std::int32_t> l(static_cast<std::size_t>(logits.dim(0)));
  std::memcpy(l.data(), labels.data(), l.size() * sizeof(std::int32_t));
  int correct = 0;
  out.data()[0] = softmax_cross_entropy(logits, l, dlogits, correct);
  std::memcpy(out.data() + 1, &correct, sizeof correct);
}

inline std::unique_ptr<Backend::Recording> Backend::record(const std::function<void()>&) {
  throw Error(kExitInternal, "internal error: the " + name() + " backend cannot record work");
}

enum class DeviceKind { kCpu, kCuda, kAuto };

// threads <= 0: leave the runtime default.
std::unique_ptr<Backend> make_cpu_backend(int threads);
// The CUDA backend on GPU `device` (an ordinal the CUDA runtime sees). Throws DataError when
// this build has no CUDA backend or the GPU cannot be used (backend/cuda).
std::unique_ptr<Backend> make_cuda_backend(int device);

}  // namespace mt
