// CUDA backend: cuDNN convolutions (forward, backward-data, backward-filter) with the algorithm
// chosen once per shape by cudnnFind* (cached in the backend, so the ResNet's many identical
// convolutions benchmark once) and one workspace shared by every op; cuBLAS for the linear layer;
// own kernels (cuda_kernels.cu) for batch norm, ReLU, add, the option-A shortcut, pooling,
// softmax cross-entropy and the SGD update. Activations are plain NCHW in device memory; all
// work is queued on one stream, and host <-> device copies go through a pinned staging arena so
// they are asynchronous DMA. Numerics are strict FP32 by default (cuDNN FMA math, cuBLAS default
// math); MT_CUDA_TF32=1 allows TF32 tensor cores as PyTorch does by default for convolutions.
// MT_CUDA_DETERMINISTIC=1 takes cuDNN's heuristic choice among deterministic algorithms instead
// of the fastest timed one: every run on the same GPU model then gives the same bits.
#include "backend/cuda/cuda_context.hpp"

namespace mt {

namespace cuda_detail {

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

}  // namespace cuda_detail

namespace {

using namespace cuda_detail;

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
            (ctx_->graphs ? ", graphs" : "") + (ctx_->deterministic ? ", deterministic" : "") + ")";
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
    return make_cudnn_conv(ctx_, spec, x_dims);
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const Dims& x_dims, Layout layout, float eps,
                                              bool fuse_relu) override {
    MT_ASSERT(layout == Layout::kPlain, "CUDA batch norm is plain NCHW");
    return make_cuda_batch_norm(ctx_, x_dims, eps, fuse_relu);
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
