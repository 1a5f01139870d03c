// cuDNN convolutions (the algorithm of each direction found once per shape, cached in the Context
// so identical convolutions benchmark once; one shared workspace) and batch norm on own kernels.
#include <cstdio>

#include "backend/cuda/cuda_context.hpp"

namespace mt::cuda_detail {

namespace {

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

// The first result (fastest measured, or best by the heuristics) that succeeded, fits the
// workspace limit, (strict FP32) uses no tensor-core math and (when asked) is deterministic.
template <class Perf>
const Perf& pick(const Perf* perf, int n, bool tf32, bool deterministic, const char* what) {
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (!tf32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    if (deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
    return p;
  }
  throw LibraryError("cuDNN", deterministic ? "no usable deterministic algorithm" : "no usable algorithm", what,
                     __FILE__, __LINE__);
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

}  // namespace

const ConvAlgos& Context::conv_algos(const ConvSpec& s, const Dims& x, cudnnTensorDescriptor_t xd,
                                     cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                                     cudnnTensorDescriptor_t yd) {
  const std::array<int, 8> key{i32(x[0]), i32(x[1]), i32(x[2]), i32(x[3]), s.out_channels, s.kernel, s.stride, s.pad};
  if (auto it = algos.find(key); it != algos.end()) return it->second;
  ConvAlgos a;
  int n = 0;
  // Timed (cudnnFind*) by default; MT_CUDA_DETERMINISTIC asks the heuristics (*_v7), whose answer
  // does not depend on timing noise, and keeps deterministic algorithms only.
  const bool det = deterministic;
  const auto math = [&](cudnnMathType_t found) { return tf32 ? found : CUDNN_FMA_MATH; };
  // Strict FP32 pins FMA math: CUDNN_DEFAULT_MATH would let Ampere and later use TF32.
  std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> fwd{};
  if (det)
    MT_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h.cudnn, xd, wd, cd, yd, static_cast<int>(fwd.size()), &n, fwd.data()));
  else
    MT_CUDNN(cudnnFindConvolutionForwardAlgorithm(h.cudnn, xd, wd, cd, yd, static_cast<int>(fwd.size()), &n, fwd.data()));
  const auto& f = pick(fwd.data(), n, tf32, det, det ? "cudnnGetConvolutionForwardAlgorithm_v7" : "cudnnFindConvolutionForwardAlgorithm");
  a.fwd = f.algo;
  a.fwd_math = math(f.mathType);
  std::size_t bytes = f.memory;
  if (det) MT_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(h.cudnn, xd, wd, cd, yd, a.fwd, &bytes));
  a.workspace = std::max(a.workspace, bytes);
  std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> bd{};
  if (det)
    MT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h.cudnn, wd, yd, cd, xd, static_cast<int>(bd.size()), &n, bd.data()));
  else
    MT_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(h.cudnn, wd, yd, cd, xd, static_cast<int>(bd.size()), &n, bd.data()));
  const auto& b = pick(bd.data(), n, tf32, det, det ? "cudnnGetConvolutionBackwardDataAlgorithm_v7" : "cudnnFindConvolutionBackwardDataAlgorithm");
  a.bwd_data = b.algo;
  a.bwd_data_math = math(b.mathType);
  bytes = b.memory;
  if (det) MT_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h.cudnn, wd, yd, cd, xd, a.bwd_data, &bytes));
  a.workspace = std::max(a.workspace, bytes);
  std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> bf{};
  if (det)
    MT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h.cudnn, xd, yd, cd, wd, static_cast<int>(bf.size()), &n, bf.data()));
  else
    MT_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(h.cudnn, xd, yd, cd, wd, static_cast<int>(bf.size()), &n, bf.data()));
  const auto& w = pick(bf.data(), n, tf32, det, det ? "cudnnGetConvolutionBackwardFilterAlgorithm_v7" : "cudnnFindConvolutionBackwardFilterAlgorithm");
  a.bwd_filter = w.algo;
  a.bwd_filter_math = math(w.mathType);
  bytes = w.memory;
  if (det) MT_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h.cudnn, xd, yd, cd, wd, a.bwd_filter, &bytes));
  a.workspace = std::max(a.workspace, bytes);
  if (std::getenv("MT_CUDA_ALGOS"))
    std::fprintf(stderr, "mt: conv x%s k%d s%d -> co %d: fwd %d bwd-data %d bwd-filter %d, workspace %zu\n",
                 dims_to_string(x).c_str(), s.kernel, s.stride, s.out_channels, int(a.fwd),
                 int(a.bwd_data), int(a.bwd_filter), a.workspace);
  return algos.emplace(key, a).first->second;
}

std::unique_ptr<ConvOp> make_cudnn_conv(std::shared_ptr<Context> ctx, const ConvSpec& spec, const Dims& x_dims) {
  return std::make_unique<CudnnConv>(std::move(ctx), spec, x_dims);
}

std::unique_ptr<BatchNormOp> make_cuda_batch_norm(std::shared_ptr<Context> ctx, const Dims& x_dims, float eps,
                                                  bool fuse_relu) {
  return std::make_unique<CudaBatchNorm>(std::move(ctx), x_dims, eps, fuse_relu);
}

}  // namespace mt::cuda_detail
