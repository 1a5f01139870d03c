// CUDA backend: cuDNN convolutions (forward, backward-data, backward-filter) with the algorithm
// chosen once per shape by cudnnFind* (cached in the backend, so the ResNet's many identical
// convolutions benchmark once) and one workspace shared by every op; cuBLAS for the linear layer;
// own kernels (cuda_kernels.cu) for batch norm, ReLU, add, the option-A shortcut, pooling,
// softmax cross-entropy and the SGD update. Activations are plain NCHW in device memory; all
// work is queued on one stream, and host <-> device copies go through a pinned staging arena so
// they are asynchronous DMA. Numerics are strict FP32 by default (cuDNN FMA math, cuBLAS default
// math); MT_CUDA_TF32=1 allows TF32 tensor cores as PyTorch does by default for convolutions.
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

namespace mt {
namespace {

void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw LibraryError("CUDA", cudaGetErrorString(e), call, file, line,
                       "run with CUDA_LAUNCH_BLOCKING=1 (or compute-sanitizer) to find the failing kernel");
}
void check_cudnn(cudnnStatus_t e, const char* call, const char* file, int line) {
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

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw DataError("--device cuda: cannot load " + soname + ": " + dlerror());
    CublasApi a;
    const auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) throw DataError("--device cuda: " + soname + " has no " + name);
    };
    sym(a.create, "cublasCreate_v2");
    sym(a.destroy, "cublasDestroy_v2");
    sym(a.set_stream, "cublasSetStream_v2");
    sym(a.set_math_mode, "cublasSetMathMode");
    sym(a.sgemm, "cublasSgemm_v2");
    sym(a.status_string, "cublasGetStatusString");
    return a;  // the library stays open for the life of the process
  }();
  return api;
}

void check_cublas(cublasStatus_t e, const char* call, const char* file, int line) {
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
float* dev(const Tensor& t, const char* what) {
  MT_ASSERT(t.on_device(), std::string(what) + ": a host tensor was passed to the CUDA backend");
  return const_cast<float*>(t.data());
}
int i32(std::int64_t v) {
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

template <class T, class D>
using Handle = std::unique_ptr<std::remove_pointer_t<T>, D>;
struct TensorDescDel {
  void operator()(cudnnTensorDescriptor_t d) const { cudnnDestroyTensorDescriptor(d); }
};
struct FilterDescDel {
  void operator()(cudnnFilterDescriptor_t d) const { cudnnDestroyFilterDescriptor(d); }
};
struct ConvDescDel {
  void operator()(cudnnConvolutionDescriptor_t d) const { cudnnDestroyConvolutionDescriptor(d); }
};
using TensorDesc = Handle<cudnnTensorDescriptor_t, TensorDescDel>;
using FilterDesc = Handle<cudnnFilterDescriptor_t, FilterDescDel>;
using ConvDesc = Handle<cudnnConvolutionDescriptor_t, ConvDescDel>;

TensorDesc tensor_desc(const Dims& d) {
  cudnnTensorDescriptor_t t = nullptr;
  MT_CUDNN(cudnnCreateTensorDescriptor(&t));
  TensorDesc owned(t);
  MT_CUDNN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i32(d[0]), i32(d[1]),
                                      i32(d[2]), i32(d[3])));
  return owned;
}

ConvDesc conv_desc(const ConvSpec& s, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t c = nullptr;
  MT_CUDNN(cudnnCreateConvolutionDescriptor(&c));
  ConvDesc owned(c);
  MT_CUDNN(cudnnSetConvolution2dDescriptor(c, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  MT_CUDNN(cudnnSetConvolutionMathType(c, math));
  return owned;
}

// Workspaces above this are not worth it for these small convolutions.
constexpr std::size_t kMaxWorkspace = std::size_t(512) << 20;

// The fastest result that succeeded, fits the workspace limit and (strict FP32) uses no
// tensor-core math.
template <class Perf>
const Perf& pick(const Perf* perf, int n, bool tf32, const char* what) {
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (!tf32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    return p;
  }
  throw LibraryError("cuDNN", "no usable algorithm", what, __FILE__, __LINE__);
}

const ConvAlgos& Context::conv_algos(const ConvSpec& s, const Dims& x, cudnnTensorDescriptor_t xd,
                                     cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                                     cudnnTensorDescriptor_t yd) {
  const std::array<int, 8> key{i32(x[0]), i32(x[1]), i32(x[2]), i32(x[3]), s.out_channels, s.kernel, s.stride, s.pad};
  if (auto it = algos.find(key); it != algos.end()) return it->second;
  ConvAlgos a;
  int n = 0;
  std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> fwd{};
  MT_CUDNN(cudnnFindConvolutionForwardAlgorithm(h.cudnn, xd, wd, cd, yd, static_cast<int>(fwd.size()), &n, fwd.data()));
  const auto& f = pick(fwd.data(), n, tf32, "cudnnFindConvolutionForwardAlgorithm");
  // Strict FP32 pins FMA math: CUDNN_DEFAULT_MATH would let Ampere and later use TF32.
  const auto math = [&](cudnnMathType_t found) { return tf32 ? found : CUDNN_FMA_MATH; };
  a.fwd = f.algo;
  a.fwd_math = math(f.mathType);
  a.workspace = std::max(a.workspace, f.memory);
  std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> bd{};
  MT_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(h.cudnn, wd, yd, cd, xd, static_cast<int>(bd.size()), &n, bd.data()));
  const auto& b = pick(bd.data(), n, tf32, "cudnnFindConvolutionBackwardDataAlgorithm");
  a.bwd_data = b.algo;
  a.bwd_data_math = math(b.mathType);
  a.workspace = std::max(a.workspace, b.memory);
  std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> bf{};
  MT_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(h.cudnn, xd, yd, cd, wd, static_cast<int>(bf.size()), &n, bf.data()));
  const auto& w = pick(bf.data(), n, tf32, "cudnnFindConvolutionBackwardFilterAlgorithm");
  a.bwd_filter = w.algo;
  a.bwd_filter_math = math(w.mathType);
  a.workspace = std::max(a.workspace, w.memory);
  if (std::getenv("MT_CUDA_ALGOS"))
    std::fprintf(stderr, "mt: conv x%s k%d s%d -> co %d: fwd %d bwd-data %d bwd-filter %d, workspace %zu\n",
                 dims_to_string(x).c_str(), s.kernel, s.stride, s.out_channels, int(a.fwd),
                 int(a.bwd_data), int(a.bwd_filter), a.workspace);
  return algos.emplace(key, a).first->second;
}

class CudnnConv final : public ConvOp {
 public:
  CudnnConv(std::shared_ptr<Context> ctx, const ConvSpec& s, const Dims& x_dims) : ctx_(std::move(ctx)) {
    const int ho = s.out_size(i32(x_dims[2])), wo = s.out_size(i32(x_dims[3]));
    y_dims_ = {x_dims[0], s.out_channels, ho, wo};
    x_dims_ = x_dims;
    xd_ = tensor_desc(x_dims);
    yd_ = tensor_desc(y_dims_);
    cudnnFilterDescriptor_t w = nullptr;
    MT_CUDNN(cudnnCreateFilterDescriptor(&w));
    wd_.reset(w);
    MT_CUDNN(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out_channels,
                                        s.in_channels, s.kernel, s.kernel));
    const cudnnMathType_t math = ctx_->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    fwd_ = conv_desc(s, math);
    int on = 0, oc = 0, oh = 0, ow = 0;
    MT_CUDNN(cudnnGetConvolution2dForwardOutputDim(fwd_.get(), xd_.get(), wd_.get(), &on, &oc, &oh, &ow));
    MT_ASSERT(on == x_dims[0] && oc == s.out_channels && oh == ho && ow == wo, "cuDNN output shape");
    algos_ = ctx_->conv_algos(s, x_dims, xd_.get(), wd_.get(), fwd_.get(), yd_.get());
    // One descriptor per direction, each with the math type its algorithm was found with.
    bwd_data_ = conv_desc(s, algos_.bwd_data_math);
    bwd_filter_ = conv_desc(s, algos_.bwd_filter_math);
    MT_CUDNN(cudnnSetConvolutionMathType(fwd_.get(), algos_.fwd_math));
    ctx_->workspace.get(std::max<std::size_t>(algos_.workspace, 1), ctx_->stream);
  }

  void forward(const Tensor& x, const Tensor& w, Tensor& y) override {
    check(x, y);
    const float one = 1.f, zero = 0.f;
    MT_CUDNN(cudnnConvolutionForward(ctx_->h.cudnn, &one, xd_.get(), dev(x, "conv x"), wd_.get(),
                                     dev(w, "conv w"), fwd_.get(), algos_.fwd, workspace(),
                                     algos_.workspace, &zero, yd_.get(), dev(y, "conv y")));
  }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    check(dx, dy);
    const float one = 1.f, zero = 0.f;
    MT_CUDNN(cudnnConvolutionBackwardData(ctx_->h.cudnn, &one, wd_.get(), dev(w, "conv w"),
                                          yd_.get(), dev(dy, "conv dy"), bwd_data_.get(),
                                          algos_.bwd_data, workspace(), algos_.workspace, &zero,
                                          xd_.get(), dev(dx, "conv dx")));
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw) override {
    check(x, dy);
    const float one = 1.f, zero = 0.f;
    MT_CUDNN(cudnnConvolutionBackwardFilter(ctx_->h.cudnn, &one, xd_.get(), dev(x, "conv x"),
                                            yd_.get(), dev(dy, "conv dy"), bwd_filter_.get(),
                                            algos_.bwd_filter, workspace(), algos_.workspace,
                                            &zero, wd_.get(), dev(dw, "conv dw")));
  }

 private:
  void check(const Tensor& x, const Tensor& y) const {
    MT_ASSERT(x.dims() == x_dims_ && y.dims() == y_dims_,
              "conv op made for " + dims_to_string(x_dims_) + " got " + dims_to_string(x.dims()));
  }
  void* workspace() { return ctx_->workspace.get(std::max<std::size_t>(algos_.workspace, 1), ctx_->stream); }

  std::shared_ptr<Context> ctx_;
  Dims x_dims_, y_dims_;
  TensorDesc xd_, yd_;
  FilterDesc wd_;
  ConvDesc fwd_, bwd_data_, bwd_filter_;
  ConvAlgos algos_;
};

class CudaBatchNorm final : public BatchNormOp {
 public:
  CudaBatchNorm(std::shared_ptr<Context> ctx, const Dims& x, float eps, bool relu)
      : ctx_(std::move(ctx)), dims_(x), eps_(eps), relu_(relu) {
    MT_ASSERT(x.size() == 4, "batch norm input must be 4-D");
    n_ = i32(x[0]);
    c_ = i32(x[1]);
    hw_ = i32(x[2] * x[3]);
    partial_bytes_ = sizeof(double) * 2 * std::size_t(c_) *
                     std::size_t(cuda::bn_partial_blocks(std::int64_t(n_) * hw_));
    ctx_->bn_partial.get(partial_bytes_, ctx_->stream);
  }
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var) override {
    MT_ASSERT(x.dims() == dims_, "batch norm shape");
    MT_LAUNCH(cuda::bn_forward_training(dev(x, "bn x"), dev(gamma, "bn gamma"), dev(beta, "bn beta"),
                                        dev(y, "bn y"), dev(mean, "bn mean"), dev(var, "bn var"),
                                        partial(), n_, c_, hw_, eps_, relu_, ctx_->stream));
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    MT_ASSERT(x.dims() == dims_, "batch norm shape");
    MT_LAUNCH(cuda::bn_forward_inference(dev(x, "bn x"), dev(gamma, "bn gamma"), dev(beta, "bn beta"),
                                         dev(mean, "bn mean"), dev(var, "bn var"), dev(y, "bn y"), n_,
                                         c_, hw_, eps_, relu_, ctx_->stream));
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta) override {
    MT_ASSERT(x.dims() == dims_ && dy.dims() == dims_, "batch norm shape");
    MT_LAUNCH(cuda::bn_backward(dev(x, "bn x"), dev(y, "bn y"), dev(dy, "bn dy"), dev(gamma, "bn gamma"),
                                dev(mean, "bn mean"), dev(var, "bn var"), dev(dx, "bn dx"),
                                dev(dgamma, "bn dgamma"), dev(dbeta, "bn dbeta"), partial(), n_, c_,
                                hw_, eps_, relu_, ctx_->stream));
  }

 private:
  double* partial() { return static_cast<double*>(ctx_->bn_partial.get(partial_bytes_, ctx_->stream)); }

  std::shared_ptr<Context> ctx_;
  Dims dims_;
  float eps_;
  bool relu_;
  int n_ = 0, c_ = 0, hw_ = 0;
  std::size_t partial_bytes_ = 0;
};

struct CudaFree {
  void operator()(float* p) const noexcept { cudaFree(p); }
};

// A captured CUDA graph, instantiated once and launched on the compute stream.
class CudaRecording final : public Backend::Recording {
 public:
  CudaRecording(std::shared_ptr<Context> ctx, cudaGraphExec_t exec) : ctx_(std::move(ctx)), exec_(exec) {}
  ~CudaRecording() override {
    if (exec_) cudaGraphExecDestroy(exec_);  // no check: may run after the context is torn down
  }
  CudaRecording(const CudaRecording&) = delete;
  CudaRecording& operator=(const CudaRecording&) = delete;
  void replay() override { MT_CUDA(cudaGraphLaunch(exec_, ctx_->stream)); }

 private:
  std::shared_ptr<Context> ctx_;
  cudaGraphExec_t exec_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : ctx_(std::make_shared<Context>(device)) {
    cudaDeviceProp prop{};
    MT_CUDA(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda:") + std::to_string(device) + " (" + prop.name + ", sm_" +
            std::to_string(prop.major) + std::to_string(prop.minor) + (ctx_->tf32 ? ", TF32" : ", FP32") +
            (ctx_->graphs ? ", graphs" : "") + ")";
  }
  ~CudaBackend() override = default;

  std::string name() const override { return name_; }
  Layout activation_layout() const override { return Layout::kPlain; }
  bool device_resident() const override { return true; }

  Tensor make_tensor(Dims dims, Layout layout) override {
    MT_ASSERT(layout == Layout::kPlain, "the CUDA backend keeps activations plain NCHW");
    const std::size_t bytes =
        static_cast<std::size_t>(std::max<std::int64_t>(Tensor::storage_size(dims, layout), 1)) * sizeof(float);
    MT_CUDA(cudaSetDevice(ctx_->device));
    float* p = nullptr;
    MT_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), bytes));
    std::shared_ptr<float> owned(p, CudaFree{});
    MT_CUDA(cudaMemsetAsync(p, 0, bytes, ctx_->stream));
    MT_CUDA(cudaEventRecord(ctx_->made, ctx_->stream));
    return Tensor::adopt(std::move(dims), layout, std::move(owned), /*on_device=*/true);
  }

  void upload(std::span<const float> host, Tensor& dst) override {
    MT_ASSERT(static_cast<std::int64_t>(host.size()) <= dst.storage_size(), "upload larger than the tensor");
    const std::size_t bytes = host.size_bytes();
    void* pin = ctx_->stage_copy(host.data(), bytes);
    MT_CUDA(cudaMemcpyAsync(dev(dst, "upload"), pin, bytes, cudaMemcpyHostToDevice, ctx_->stream));
  }
  void upload_ahead(std::span<const float> host, Tensor& dst) override {
    MT_ASSERT(static_cast<std::int64_t>(host.size()) <= dst.storage_size(), "upload larger than the tensor");
    const std::size_t bytes = host.size_bytes();
    void* pin = ctx_->stage_copy(host.data(), bytes);
    MT_CUDA(cudaStreamWaitEvent(ctx_->copy_stream, ctx_->made, 0));
    MT_CUDA(cudaMemcpyAsync(dev(dst, "upload_ahead"), pin, bytes, cudaMemcpyHostToDevice, ctx_->copy_stream));
    MT_CUDA(cudaEventRecord(ctx_->copied, ctx_->copy_stream));
    ctx_->fence_due = true;
  }
  void upload_fence() override {
    if (!ctx_->fence_due) return;
    MT_CUDA(cudaStreamWaitEvent(ctx_->stream, ctx_->copied, 0));
    ctx_->fence_due = false;
  }
  void download(const Tensor& src, std::span<float> host) override {
    MT_ASSERT(static_cast<std::int64_t>(host.size()) <= src.storage_size(), "download larger than the tensor");
    const std::size_t bytes = host.size_bytes();
    void* pin = ctx_->stage(bytes);
    MT_CUDA(cudaMemcpyAsync(pin, dev(src, "download"), bytes, cudaMemcpyDeviceToHost, ctx_->stream));
    ctx_->pending.push_back({pin, host.data(), bytes});
  }
  void synchronize() override { ctx_->synchronize(); }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec, const Dims& x_dims, Layout x_layout,
                                    Layout y_layout) override {
    MT_ASSERT(x_layout == Layout::kPlain && y_layout == Layout::kPlain, "CUDA convolutions are plain NCHW");
    return std::make_unique<CudnnConv>(ctx_, spec, x_dims);
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const Dims& x_dims, Layout layout, float eps,
                                              bool fuse_relu) override {
    MT_ASSERT(layout == Layout::kPlain, "CUDA batch norm is plain NCHW");
    return std::make_unique<CudaBatchNorm>(ctx_, x_dims, eps, fuse_relu);
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    MT_LAUNCH(cuda::relu_forward(dev(x, "relu x"), dev(y, "relu y"), x.storage_size(), ctx_->stream));
  }
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    MT_LAUNCH(cuda::relu_backward(dev(y, "relu y"), dev(dy, "relu dy"), dev(dx, "relu dx"),
                                  y.storage_size(), ctx_->stream));
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    MT_ASSERT(a.storage_size() == b.storage_size() && a.storage_size() == y.storage_size(), "add shapes");
    MT_LAUNCH(cuda::add(dev(a, "add a"), dev(b, "add b"), dev(y, "add y"), a.storage_size(), false, ctx_->stream));
  }
  void add_relu(const Tensor& a, const Tensor& b, Tensor& y) override {
    MT_ASSERT(a.storage_size() == b.storage_size() && a.storage_size() == y.storage_size(), "add shapes");
    MT_LAUNCH(cuda::add(dev(a, "add a"), dev(b, "add b"), dev(y, "add y"), a.storage_size(), true, ctx_->stream));
  }

  void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y) override {
    MT_LAUNCH(cuda::pad_shortcut_forward(dev(x, "shortcut x"), dev(y, "shortcut y"), i32(x.dim(0)),
                                         i32(x.dim(1)), i32(x.dim(2)), i32(x.dim(3)), i32(y.dim(1)),
                                         i32(y.dim(2)), i32(y.dim(3)), stride, ctx_->stream));
  }
  void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx) override {
    shortcut_backward(dy, stride, dx, false);
  }
  void pad_shortcut_backward_accumulate(const Tensor& dy, int stride, Tensor& dx) override {
    shortcut_backward(dy, stride, dx, true);
  }

  void global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    MT_LAUNCH(cuda::global_avg_pool_forward(dev(x, "pool x"), dev(y, "pool y"), i32(x.dim(0) * x.dim(1)),
                                            i32(x.dim(2) * x.dim(3)), ctx_->stream));
  }
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    MT_LAUNCH(cuda::global_avg_pool_backward(dev(dy, "pool dy"), dev(dx, "pool dx"),
                                             i32(dx.dim(0) * dx.dim(1)), i32(dx.dim(2) * dx.dim(3)),
                                             ctx_->stream));
  }

  // Row-major matrices are their transposes to column-major cuBLAS; each call says which.
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int n = i32(x.dim(0)), k = i32(x.dim(1)), m = i32(w.dim(0));
    const float one = 1.f, zero = 0.f;
    // y^T (M x N) = w (M x K, stored as K x M column-major: op T) * x^T (K x N, op N).
    MT_CUBLAS(cublas_api().sgemm(ctx_->h.cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dev(w, "fc w"), k,
                          dev(x, "fc x"), k, &zero, dev(y, "fc y"), m));
    MT_LAUNCH(cuda::add_bias(dev(y, "fc y"), dev(b, "fc b"), n, m, ctx_->stream));
  }
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db) override {
    const int n = i32(x.dim(0)), k = i32(x.dim(1)), m = i32(w.dim(0));
    const float one = 1.f, zero = 0.f;
    if (!dx.empty()) {
      // dx^T (K x N) = w^T (K x M, as stored) * dy^T (M x N, as stored).
      MT_CUBLAS(cublas_api().sgemm(ctx_->h.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k, n, m, &one, dev(w, "fc w"), k,
                            dev(dy, "fc dy"), m, &zero, dev(dx, "fc dx"), k));
    }
    // dw^T (K x M) = x^T (K x N, as stored) * dy (N x M: the stored M x N, op T).
    MT_CUBLAS(cublas_api().sgemm(ctx_->h.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, &one, dev(x, "fc x"), k,
                          dev(dy, "fc dy"), m, &zero, dev(dw, "fc dw"), k));
    MT_LAUNCH(cuda::bias_grad(dev(dy, "fc dy"), dev(db, "fc db"), n, m, ctx_->stream));
  }

  float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels,
                              Tensor& dlogits, int& correct) override {
    float loss = 0.f;
    softmax_cross_entropy_deferred(logits, labels, dlogits, &loss, &correct);
    synchronize();
    return loss;
  }
  void softmax_cross_entropy_deferred(const Tensor& logits, std::span<const std::int32_t> labels,
                                      Tensor& dlogits, float* loss, int* correct) override {
    const int n = i32(logits.dim(0)), m = i32(logits.dim(1));
    MT_ASSERT(static_cast<int>(labels.size()) >= n, "one label per row");
    check_labels(labels.first(static_cast<std::size_t>(n)), m);
    if (ctx_->scalar_slots_used == Context::kScalarSlots) synchronize();
    const int slot = ctx_->scalar_slots_used++;
    // Labels: pinned, then to a device buffer that only grows (after a wait) between steps.
    const std::size_t lbytes = std::size_t(n) * sizeof(std::int32_t);
    auto* lab = static_cast<std::int32_t*>(ctx_->labels.get(lbytes * Context::kScalarSlots, ctx_->stream)) +
                std::size_t(slot) * std::size_t(n);
    void* pin = ctx_->stage_copy(labels.data(), lbytes);
    MT_CUDA(cudaMemcpyAsync(lab, pin, lbytes, cudaMemcpyHostToDevice, ctx_->stream));
    auto* scalars = static_cast<char*>(ctx_->scalars.get(8 * Context::kScalarSlots, ctx_->stream)) + 8 * slot;
    MT_LAUNCH(cuda::softmax_cross_entropy(dev(logits, "logits"), lab, dev(dlogits, "dlogits"),
                                          reinterpret_cast<float*>(scalars), reinterpret_cast<int*>(scalars + 4),
                                          n, m, ctx_->stream));
    auto* out = static_cast<char*>(ctx_->stage(8));
    MT_CUDA(cudaMemcpyAsync(out, scalars, 8, cudaMemcpyDeviceToHost, ctx_->stream));
    ctx_->pending.push_back({out, loss, sizeof(float)});
    ctx_->pending.push_back({out + 4, correct, sizeof(int)});
  }

  void softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, Tensor& dlogits, Tensor& out) override {
    const int n = i32(logits.dim(0)), m = i32(logits.dim(1));
    MT_ASSERT(labels.storage_size() >= n && out.storage_size() >= 2, "softmax_cross_entropy_to sizes");
    float* o = dev(out, "loss out");
    MT_LAUNCH(cuda::softmax_cross_entropy(dev(logits, "logits"),
                                          reinterpret_cast<const std::int32_t*>(dev(labels, "labels")),
                                          dev(dlogits, "dlogits"), o, reinterpret_cast<int*>(o + 1), n, m,
                                          ctx_->stream));
  }

  bool can_record() const override { return ctx_->graphs; }
  std::unique_ptr<Recording> record(const std::function<void()>& work) override {
    MT_ASSERT(ctx_->graphs, "CUDA graph recording is off (MT_CUDA_GRAPH=1 turns it on)");
    // Thread-local mode: this thread may not make calls that are unsafe while capturing (an
    // allocation, a synchronize), others are not affected.
    MT_CUDA(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      work();
    } catch (...) {
      cudaStreamEndCapture(ctx_->stream, &graph);  // ends the (invalidated) capture; no check
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    MT_CUDA(cudaStreamEndCapture(ctx_->stream, &graph));
    std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, decltype(&cudaGraphDestroy)> owned(graph, &cudaGraphDestroy);
    cudaGraphExec_t exec = nullptr;
    MT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    return std::make_unique<CudaRecording>(ctx_, exec);
  }

  // Device spans (flat parameter buffers made with make_tensor).
  void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> velocity,
                  const SgdSpec& spec) override {
    sgd_update_to(param, grad, velocity, param, spec);
  }
  void sgd_update_to(std::span<const float> param, std::span<const float> grad, std::span<float> velocity,
                     std::span<float> out, const SgdSpec& spec) override {
    MT_ASSERT(grad.size() == param.size() && velocity.size() == param.size() && out.size() == param.size(),
              "sgd_update sizes");
    MT_LAUNCH(cuda::sgd_update(param.data(), grad.data(), velocity.data(), out.data(),
                               static_cast<std::int64_t>(param.size()), spec.lr, spec.momentum,
                               spec.weight_decay, spec.nesterov, ctx_->stream));
  }

 private:
  void shortcut_backward(const Tensor& dy, int stride, Tensor& dx, bool accumulate) {
    MT_LAUNCH(cuda::pad_shortcut_backward(dev(dy, "shortcut dy"), dev(dx, "shortcut dx"), i32(dx.dim(0)),
                                          i32(dx.dim(1)), i32(dx.dim(2)), i32(dx.dim(3)), i32(dy.dim(1)),
                                          i32(dy.dim(2)), i32(dy.dim(3)), stride, accumulate, ctx_->stream));
  }

  std::shared_ptr<Context> ctx_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    throw DataError(std::string("--device cuda: no usable GPU: CUDA runtime: ") + cudaGetErrorString(e));
  if (device < 0 || device >= count)
    throw DataError("--device cuda: GPU " + std::to_string(device) + " does not exist (the CUDA runtime sees " +
                    std::to_string(count) + ")");
  // A GPU whose architecture this build has no kernels for fails here, clearly, instead of at the
  // first kernel launch.
  MT_CUDA(cudaSetDevice(device));
  if (const cudaError_t k = cuda::kernel_image_status(); k != cudaSuccess) {
    cudaGetLastError();  // clear the sticky launch-configuration error
    cudaDeviceProp prop{};
    MT_CUDA(cudaGetDeviceProperties(&prop, device));
    const std::string sm = std::to_string(prop.major) + std::to_string(prop.minor);
    throw DataError("--device cuda: GPU " + std::to_string(device) + " (" + prop.name + ", sm_" + sm +
                    ") cannot run this build's kernels, compiled for CUDA architectures " MT_CUDA_ARCHS " (" +
                    cudaGetErrorString(k) + "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + sm +
                    " and a CUDA toolkit that supports sm_" + sm + ", or use --device cpu");
  }
  return std::make_unique<CudaBackend>(device);
}

}  // namespace mt
