// Internals shared by the CUDA backend's translation units (cuda_backend.cpp: the Backend;
// cuda_ops.cpp: cuDNN convolutions and batch norm): checked calls, device memory helpers and the
// Context every op shares. Not a public header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "core/error.hpp"

namespace mt::cuda_detail {

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw LibraryError("CUDA", cudaGetErrorString(e), call, file, line,
                       "run with CUDA_LAUNCH_BLOCKING=1 (or compute-sanitizer) to find the failing kernel");
}
inline void check_cudnn(cudnnStatus_t e, const char* call, const char* file, int line) {
  if (e != CUDNN_STATUS_SUCCESS)
    throw LibraryError("cuDNN", cudnnGetErrorString(e), call, file, line,
                       "CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr shows cuDNN's reason");
}
// cuBLAS is opened when the first CUDA backend is made, not linked: linking libcublas costs
// every process about 0.1 s and 200 MB at start (measured on a CPU-only run), CPU runs included.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

const CublasApi& cublas_api();  // defined in cuda_backend.cpp

inline void check_cublas(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS) throw LibraryError("cuBLAS", cublas_api().status_string(e), call, file, line);
}
#define MT_CUDA(call) check_cuda((call), #call, __FILE__, __LINE__)
#define MT_CUDNN(call) check_cudnn((call), #call, __FILE__, __LINE__)
#define MT_CUBLAS(call) check_cublas((call), #call, __FILE__, __LINE__)
// A kernel launch: launch errors surface here, execution errors at the next synchronize.
#define MT_LAUNCH(...)                   \
  do {                                   \
    __VA_ARGS__;                         \
    MT_CUDA(cudaGetLastError());         \
  } while (0)

// Device pointer of a tensor that must be in device memory.
inline float* dev(const Tensor& t, const char* what) {
  MT_ASSERT(t.on_device(), std::string(what) + ": a host tensor was passed to the CUDA backend");
  return const_cast<float*>(t.data());
}
inline int i32(std::int64_t v) {
  MT_ASSERT(v >= 0 && v <= 0x7fffffff, "dimension too large for the CUDA kernels");
  return static_cast<int>(v);
}

// Device memory that grows; growing waits for the stream so queued work never sees it freed.
class Scratch {
 public:
  ~Scratch() {
    if (ptr_) cudaFree(ptr_);  // no check: may run after the CUDA context is torn down
  }
  void* get(std::size_t bytes, cudaStream_t stream) {
    if (bytes > size_) {
      MT_CUDA(cudaStreamSynchronize(stream));
      if (ptr_) MT_CUDA(cudaFree(ptr_));
      ptr_ = nullptr;
      size_ = 0;
      MT_CUDA(cudaMalloc(&ptr_, bytes));
      size_ = bytes;
    }
    return ptr_;
  }
  std::size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

struct CudnnHandles {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  ~CudnnHandles() {
    if (cublas) cublas_api().destroy(cublas);
    if (cudnn) cudnnDestroy(cudnn);
  }
};

struct ConvAlgos {
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
  std::size_t workspace = 0;  // the largest of the three
};

// What every op shares: device, stream, library handles, the workspace, the algorithm cache,
// the pinned staging arena and the results that synchronize() delivers.
struct Context {
  int device = 0;
  bool tf32 = false;
  bool graphs = false;  // MT_CUDA_GRAPH=1: Network records its training step as a CUDA graph
  // MT_CUDA_DETERMINISTIC=1: convolutions from cuDNN's heuristics (not timed), deterministic
  // algorithms only, so the same inputs give the same bits in every run and every process.
  bool deterministic = false;
  cudaStream_t stream = nullptr;
  CudnnHandles h;
  Scratch workspace, bn_partial, labels, scalars;
  std::map<std::array<int, 8>, ConvAlgos> algos;

  struct Chunk {
    char* ptr = nullptr;
    std::size_t size = 0, used = 0;
  };
  std::vector<Chunk> pinned;
  struct PendingCopy {
    const void* from;
    void* to;
    std::size_t bytes;
  };
  std::vector<PendingCopy> pending;  // pinned -> host after the stream drains
  int scalar_slots_used = 0;
  static constexpr int kScalarSlots = 64;
  // upload_ahead(): copies on their own stream, so they run beside the compute stream's work;
  // `copied` marks the newest, and `fence_due` says the compute stream has not waited for it yet.
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t copied = nullptr;
  bool fence_due = false;
  // Recorded after the newest make_tensor()'s zeroing (on the compute stream): a copy ahead into
  // a new tensor must not be overtaken by that memset.
  cudaEvent_t made = nullptr;

  explicit Context(int dev_index) : device(dev_index) {
    const char* t = std::getenv("MT_CUDA_TF32");
    tf32 = t && *t && std::string(t) != "0";
    const char* g = std::getenv("MT_CUDA_GRAPH");
    graphs = g && *g && std::string(g) != "0";
    const char* d = std::getenv("MT_CUDA_DETERMINISTIC");
    deterministic = d && *d && std::string(d) != "0";
    MT_CUDA(cudaSetDevice(device));
    MT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MT_CUDA(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    MT_CUDA(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    MT_CUDA(cudaEventCreateWithFlags(&made, cudaEventDisableTiming));
    MT_CUDA(cudaEventRecord(made, stream));
    MT_CUDNN(cudnnCreate(&h.cudnn));
    MT_CUDNN(cudnnSetStream(h.cudnn, stream));
    MT_CUBLAS(cublas_api().create(&h.cublas));
    MT_CUBLAS(cublas_api().set_stream(h.cublas, stream));
    MT_CUBLAS(cublas_api().set_math_mode(h.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  ~Context() {
    if (stream) cudaStreamSynchronize(stream);
    if (copy_stream) cudaStreamSynchronize(copy_stream);
    for (auto& c : pinned) cudaFreeHost(c.ptr);
    if (copied) cudaEventDestroy(copied);
    if (made) cudaEventDestroy(made);
    if (copy_stream) cudaStreamDestroy(copy_stream);
    if (stream) cudaStreamDestroy(stream);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Pinned host memory valid until the next synchronize().
  void* stage(std::size_t bytes) {
    bytes = (bytes + 255) / 256 * 256;
    for (auto& c : pinned)
      if (c.size - c.used >= bytes) {
        void* p = c.ptr + c.used;
        c.used += bytes;
        return p;
      }
    Chunk c;
    c.size = std::max<std::size_t>(bytes, pinned.empty() ? (4u << 20) : 2 * pinned.back().size);
    MT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&c.ptr), c.size, cudaHostAllocDefault));
    c.used = bytes;
    pinned.push_back(c);
    return c.ptr;
  }

  // `bytes` of host memory copied into the pinned arena (valid until the next synchronize()),
  // for an asynchronous copy to the device.
  void* stage_copy(const void* host, std::size_t bytes) {
    void* pin = stage(bytes);
    std::memcpy(pin, host, bytes);
    return pin;
  }

  void synchronize() {
    MT_CUDA(cudaStreamSynchronize(stream));
    // The staging arena is reused below: copies ahead that read it must be done too.
    MT_CUDA(cudaStreamSynchronize(copy_stream));
    fence_due = false;
    for (const auto& p : pending) std::memcpy(p.to, p.from, p.bytes);
    pending.clear();
    scalar_slots_used = 0;
    // Steady state: one chunk big enough for a whole step.
    if (pinned.size() > 1) {
      std::size_t total = 0;
      for (auto& c : pinned) {
        total += c.size;
        MT_CUDA(cudaFreeHost(c.ptr));
      }
      pinned.clear();
      Chunk c;
      c.size = total;
      MT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&c.ptr), c.size, cudaHostAllocDefault));
      pinned.push_back(c);
    }
    for (auto& c : pinned) c.used = 0;
  }

  const ConvAlgos& conv_algos(const ConvSpec& s, const Dims& x, cudnnTensorDescriptor_t xd,
                              cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                              cudnnTensorDescriptor_t yd);
};

// The ops of cuda_ops.cpp.
std::unique_ptr<ConvOp> make_cudnn_conv(std::shared_ptr<Context> ctx, const ConvSpec& spec, const Dims& x_dims);
std::unique_ptr<BatchNormOp> make_cuda_batch_norm(std::shared_ptr<Context> ctx, const Dims& x_dims, float eps,
                                                  bool fuse_relu);

}  // namespace mt::cuda_detail
