// CPU backend on oneDNN. Convolutions and batch norm are oneDNN primitives built once per op
// and reused every step; activations stay in oneDNN's channel-blocked layout (nChw16c with
// AVX-512, nChw8c otherwise) between layers so no layout reorder happens inside the network.
// Only the small weight tensors are reordered between the plain layout the optimizer, the
// parameter server and checkpoints use, and the layout each primitive prefers. All primitives
// share one user-managed scratchpad, so steady-state steps allocate nothing.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <optional>
#include <unordered_map>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mt {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

[[noreturn]] void throw_dnnl(const dnnl::error& e, const char* what, const char* file, int line) {
  throw LibraryError("oneDNN", std::string(e.what()) + " (status " +
                                   std::to_string(static_cast<int>(e.status)) + ")",
                     what, file, line,
                     "run with DNNL_VERBOSE=1 to see the primitive that failed");
}

// Wraps a block of oneDNN calls; errors become LibraryError with the op name and location.
#define MT_DNNL_TRY try {
#define MT_DNNL_CATCH(what)                     \
  }                                             \
  catch (const dnnl::error& e) {                \
    throw_dnnl(e, what, __FILE__, __LINE__);    \
  }

Tag tag_of(Layout layout, int rank) {
  if (rank == 1) return Tag::a;
  if (rank == 2) return Tag::ab;
  switch (layout) {
    case Layout::kPlain: return Tag::nchw;
    case Layout::kBlocked8: return Tag::nChw8c;
    case Layout::kBlocked16: return Tag::nChw16c;
  }
  return Tag::nchw;
}

memory::desc md_of(const Dims& dims, Layout layout) {
  return memory::desc(memory::dims(dims.begin(), dims.end()), Dt::f32,
                      tag_of(layout, static_cast<int>(dims.size())));
}

float* mut(const Tensor& t) { return const_cast<float*>(t.data()); }

void require(bool ok, const std::string& what) { MT_ASSERT(ok, what); }

// MT_DNNL_IMPL=1 prints the implementation oneDNN chose for each primitive (a "ref" or
// "gemm" name means a slow path).
void report_impl(const char* what, const dnnl::primitive_desc_base& pd) {
  static const bool on = [] {
    const char* v = std::getenv("MT_DNNL_IMPL");
    return v && *v && std::string(v) != "0";
  }();
  if (on) std::fprintf(stderr, "mt: %-28s %s\n", what, pd.impl_info_str());
}

// Engine, stream and the scratchpad all primitives share (they run one at a time).
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  Tensor scratch{Dims{0}};

  dnnl::primitive_attr attr() const {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }
  // Grows the shared scratchpad to fit `pd` (only while ops are built, never per step).
  memory scratch_mem(const dnnl::primitive_desc_base& pd) {
    const auto md = pd.scratchpad_desc();
    const auto floats = static_cast<std::int64_t>((md.get_size() + 3) / 4);
    if (floats > scratch.storage_size()) scratch = Tensor(Dims{floats});
    return memory(md, engine, scratch.data());
  }
  void run(const dnnl::primitive& p, std::unordered_map<int, memory> args,
           const dnnl::primitive_desc_base& pd) {
    args.insert({DNNL_ARG_SCRATCHPAD, scratch_mem(pd)});
    p.execute(stream, args);
  }
};

// Weights kept in the layout a primitive wants, reordered from/to the plain user layout.
struct PackedWeights {
  memory user;    // plain oihw, handle set per call
  memory packed;  // primitive's layout, owned
  dnnl::reorder to_packed, to_user;
  bool same = false;

  PackedWeights() = default;
  PackedWeights(Context& ctx, const memory::desc& user_md, const memory::desc& packed_md) {
    user = memory(user_md, ctx.engine, DNNL_MEMORY_NONE);
    same = user_md == packed_md;
    if (!same) {
      packed = memory(packed_md, ctx.engine);
      to_packed = dnnl::reorder(user, packed);
      to_user = dnnl::reorder(packed, user);
    }
  }
  // Returns the memory the primitive reads, after reordering the user's weights into it.
  memory& load(Context& ctx, const Tensor& w) {
    user.set_data_handle(mut(w));
    if (same) return user;
    to_packed.execute(ctx.stream, user, packed);
    return packed;
  }
  // Memory the primitive writes; call store() after executing.
  memory& target(Tensor& w) {
    user.set_data_handle(w.data());
    return same ? user : packed;
  }
  void store(Context& ctx) {
    if (!same) to_user.execute(ctx.stream, packed, user);
  }
};

class CpuConv final : public ConvOp {
 public:
  CpuConv(Context& ctx, const ConvSpec& s, const Dims& x_dims, Layout xl, Layout yl)
      : ctx_(ctx), spec_(s) {
    MT_DNNL_TRY
    require(x_dims.size() == 4 && x_dims[1] == s.in_channels, "conv input shape mismatch");
    const Dims y_dims{x_dims[0], s.out_channels, s.out_size(static_cast<int>(x_dims[2])),
                      s.out_size(static_cast<int>(x_dims[3]))};
    src_md_ = md_of(x_dims, xl);
    dst_md_ = md_of(y_dims, yl);
    w_user_md_ = memory::desc({s.out_channels, s.in_channels, s.kernel, s.kernel}, Dt::f32, Tag::oihw);
    const memory::desc w_any({s.out_channels, s.in_channels, s.kernel, s.kernel}, Dt::f32, Tag::any);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_direct, src_md_, w_any,
                                      dst_md_, strides(), pads(), pads());
    fwd_pd_ = dnnl::convolution_forward::primitive_desc(d, ctx_.attr(), ctx_.engine);
    fwd_ = dnnl::convolution_forward(fwd_pd_);
    report_impl("conv forward", fwd_pd_);
    fwd_w_ = PackedWeights(ctx_, w_user_md_, fwd_pd_.weights_desc());
    src_ = memory(src_md_, ctx_.engine, DNNL_MEMORY_NONE);
    dst_ = memory(dst_md_, ctx_.engine, DNNL_MEMORY_NONE);
    ctx_.scratch_mem(fwd_pd_);
    MT_DNNL_CATCH("convolution_forward primitive")
  }

  void forward(const Tensor& x, const Tensor& w, Tensor& y) override {
    MT_DNNL_TRY
    src_.set_data_handle(mut(x));
    dst_.set_data_handle(y.data());
    memory& wm = fwd_w_.load(ctx_, w);
    ctx_.run(fwd_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dst_}}, fwd_pd_);
    MT_DNNL_CATCH("convolution forward")
  }

  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    MT_DNNL_TRY
    if (!bwd_data_) {
      const memory::desc w_any(w_user_md_.dims(), Dt::f32, Tag::any);
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src_md_,
                                              w_any, dst_md_, strides(), pads(), pads());
      bwd_data_pd_ = dnnl::convolution_backward_data::primitive_desc(d, ctx_.attr(), ctx_.engine, fwd_pd_);
      bwd_data_ = dnnl::convolution_backward_data(bwd_data_pd_);
      report_impl("conv backward data", bwd_data_pd_);
      bwd_data_w_ = PackedWeights(ctx_, w_user_md_, bwd_data_pd_.weights_desc());
      ctx_.scratch_mem(bwd_data_pd_);
    }
    src_.set_data_handle(dx.data());
    dst_.set_data_handle(mut(dy));
    memory& wm = bwd_data_w_.load(ctx_, w);
    ctx_.run(*bwd_data_, {{DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, src_}},
             bwd_data_pd_);
    MT_DNNL_CATCH("convolution backward data")
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw) override {
    MT_DNNL_TRY
    if (!bwd_w_) {
      const memory::desc w_any(w_user_md_.dims(), Dt::f32, Tag::any);
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, src_md_,
                                                 w_any, dst_md_, strides(), pads(), pads());
      bwd_w_pd_ = dnnl::convolution_backward_weights::primitive_desc(d, ctx_.attr(), ctx_.engine, fwd_pd_);
      bwd_w_ = dnnl::convolution_backward_weights(bwd_w_pd_);
      report_impl("conv backward weights", bwd_w_pd_);
      bwd_w_w_ = PackedWeights(ctx_, w_user_md_, bwd_w_pd_.diff_weights_desc());
      ctx_.scratch_mem(bwd_w_pd_);
    }
    src_.set_data_handle(mut(x));
    dst_.set_data_handle(mut(dy));
    memory& wm = bwd_w_w_.target(dw);
    ctx_.run(*bwd_w_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_WEIGHTS, wm}},
             bwd_w_pd_);
    bwd_w_w_.store(ctx_);
    MT_DNNL_CATCH("convolution backward weights")
  }

 private:
  memory::dims strides() const { return {spec_.stride, spec_.stride}; }
  memory::dims pads() const { return {spec_.pad, spec_.pad}; }

  Context& ctx_;
  ConvSpec spec_;
  memory::desc src_md_, dst_md_, w_user_md_;
  memory src_, dst_;
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_forward fwd_;
  PackedWeights fwd_w_;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd_;
  std::optional<dnnl::convolution_backward_data> bwd_data_;
  PackedWeights bwd_data_w_;
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd_;
  std::optional<dnnl::convolution_backward_weights> bwd_w_;
  PackedWeights bwd_w_w_;
};

class CpuBatchNorm final : public BatchNormOp {
 public:
  CpuBatchNorm(Context& ctx, const Dims& x_dims, Layout layout, float eps, bool relu)
      : ctx_(ctx), eps_(eps), relu_(relu) {
    MT_DNNL_TRY
    x_md_ = md_of(x_dims, layout);
    flags_ = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (relu) flags_ = flags_ | dnnl::normalization_flags::fuse_norm_relu;
    dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_training, x_md_, eps_, flags_);
    fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(d, ctx_.attr(), ctx_.engine);
    fwd_ = dnnl::batch_normalization_forward(fwd_pd_);
    report_impl("batch norm forward", fwd_pd_);
    if (relu) workspace_ = memory(fwd_pd_.workspace_desc(), ctx_.engine);
    src_ = memory(x_md_, ctx_.engine, DNNL_MEMORY_NONE);
    dst_ = memory(x_md_, ctx_.engine, DNNL_MEMORY_NONE);
    const memory::desc c_md({x_dims[1]}, Dt::f32, Tag::a);
    for (auto* m : {&scale_, &shift_, &mean_, &var_, &dscale_, &dshift_})
      *m = memory(c_md, ctx_.engine, DNNL_MEMORY_NONE);
    ctx_.scratch_mem(fwd_pd_);
    MT_DNNL_CATCH("batch_normalization_forward primitive")
  }

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var) override {
    MT_DNNL_TRY
    bind(x, y, gamma, beta, mean.data(), var.data());
    std::unordered_map<int, memory> args = common_args();
    if (relu_) args.insert({DNNL_ARG_WORKSPACE, workspace_});
    ctx_.run(fwd_, std::move(args), fwd_pd_);
    MT_DNNL_CATCH("batch norm forward (training)")
  }

  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& mean, const Tensor& var, Tensor& y) override {
    MT_DNNL_TRY
    if (!inf_) {
      dnnl::batch_normalization_forward::desc d(
          dnnl::prop_kind::forward_inference, x_md_, eps_,
          flags_ | dnnl::normalization_flags::use_global_stats);
      inf_pd_ = dnnl::batch_normalization_forward::primitive_desc(d, ctx_.attr(), ctx_.engine);
      inf_ = dnnl::batch_normalization_forward(inf_pd_);
      ctx_.scratch_mem(inf_pd_);
    }
    bind(x, y, gamma, beta, mut(mean), mut(var));
    ctx_.run(*inf_, common_args(), inf_pd_);
    MT_DNNL_CATCH("batch norm forward (inference)")
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta) override {
    MT_DNNL_TRY
    (void)y;  // the ReLU mask comes from the forward's workspace
    if (!bwd_) {
      dnnl::batch_normalization_backward::desc d(dnnl::prop_kind::backward, x_md_, x_md_, eps_, flags_);
      bwd_pd_ = dnnl::batch_normalization_backward::primitive_desc(d, ctx_.attr(), ctx_.engine, fwd_pd_);
      bwd_ = dnnl::batch_normalization_backward(bwd_pd_);
      report_impl("batch norm backward", bwd_pd_);
      diff_dst_ = memory(x_md_, ctx_.engine, DNNL_MEMORY_NONE);
      diff_src_ = memory(x_md_, ctx_.engine, DNNL_MEMORY_NONE);
      ctx_.scratch_mem(bwd_pd_);
    }
    src_.set_data_handle(mut(x));
    diff_dst_.set_data_handle(mut(dy));
    diff_src_.set_data_handle(dx.data());
    scale_.set_data_handle(mut(gamma));
    mean_.set_data_handle(mut(mean));
    var_.set_data_handle(mut(var));
    dscale_.set_data_handle(dgamma.data());
    dshift_.set_data_handle(dbeta.data());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src_},          {DNNL_ARG_MEAN, mean_},
        {DNNL_ARG_VARIANCE, var_},     {DNNL_ARG_DIFF_DST, diff_dst_},
        {DNNL_ARG_SCALE, scale_},      {DNNL_ARG_DIFF_SRC, diff_src_},
        // oneDNN 2.6 lists the shift as an input of the backward pass although the gradient
        // does not depend on it; it still points at the beta of the forward pass.
        {DNNL_ARG_SHIFT, shift_},
        {DNNL_ARG_DIFF_SCALE, dscale_}, {DNNL_ARG_DIFF_SHIFT, dshift_}};
    if (relu_) args.insert({DNNL_ARG_WORKSPACE, workspace_});
    ctx_.run(*bwd_, std::move(args), bwd_pd_);
    MT_DNNL_CATCH("batch norm backward")
  }

 private:
  void bind(const Tensor& x, Tensor& y, const Tensor& gamma, const Tensor& beta, float* mean,
            float* var) {
    src_.set_data_handle(mut(x));
    dst_.set_data_handle(y.data());
    scale_.set_data_handle(mut(gamma));
    shift_.set_data_handle(mut(beta));
    mean_.set_data_handle(mean);
    var_.set_data_handle(var);
  }
  std::unordered_map<int, memory> common_args() {
    return {{DNNL_ARG_SRC, src_},   {DNNL_ARG_DST, dst_},       {DNNL_ARG_SCALE, scale_},
            {DNNL_ARG_SHIFT, shift_}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}};
  }

  Context& ctx_;
  float eps_;
  bool relu_;
  memory::desc x_md_;
  dnnl::normalization_flags flags_;
  dnnl::batch_normalization_forward::primitive_desc fwd_pd_, inf_pd_;
  dnnl::batch_normalization_forward fwd_;
  std::optional<dnnl::batch_normalization_forward> inf_;
  dnnl::batch_normalization_backward::primitive_desc bwd_pd_;
  std::optional<dnnl::batch_normalization_backward> bwd_;
  memory workspace_, src_, dst_, diff_dst_, diff_src_, scale_, shift_, mean_, var_, dscale_, dshift_;
};

void check_same_storage(const Tensor& a, const Tensor& b, const char* op) {
  MT_ASSERT(a.storage_size() == b.storage_size() && a.layout() == b.layout(),
            std::string(op) + ": operands differ in shape or layout");
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
    // Channel blocks match the vector width oneDNN's convolution kernels use.
    const auto isa = dnnl::get_effective_cpu_isa();
    layout_ = (isa >= dnnl::cpu_isa::avx512_core) ? Layout::kBlocked16 : Layout::kBlocked8;
  }

  std::string name() const override { return "cpu"; }
  Layout activation_layout() const override { return layout_; }

  std::unique_ptr<ConvOp> make_conv(const ConvSpec& spec, const Dims& x_dims, Layout xl,
                                    Layout yl) override {
    return std::make_unique<CpuConv>(ctx_, spec, x_dims, xl, yl);
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const Dims& x_dims, Layout layout, float eps,
                                              bool fuse_relu) override {
    return std::make_unique<CpuBatchNorm>(ctx_, x_dims, layout, eps, fuse_relu);
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    check_same_storage(x, y, "relu_forward");
    const float* a = x.data();
    float* o = y.data();
    const std::int64_t n = x.storage_size();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) o[i] = a[i] > 0.f ? a[i] : 0.f;
  }
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    check_same_storage(y, dy, "relu_backward");
    check_same_storage(y, dx, "relu_backward");
    const float* yp = y.data();
    const float* g = dy.data();
    float* o = dx.data();
    const std::int64_t n = y.storage_size();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) o[i] = yp[i] > 0.f ? g[i] : 0.f;
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    check_same_storage(a, b, "add");
    check_same_storage(a, y, "add");
    const float* p = a.data();
    const float* q = b.data();
    float* o = y.data();
    const std::int64_t n = a.storage_size();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) o[i] = p[i] + q[i];
  }
  void add_relu(const Tensor& a, const Tensor& b, Tensor& y) override {
    check_same_storage(a, b, "add_relu");
    check_same_storage(a, y, "add_relu");
    const float* p = a.data();
    const float* q = b.data();
    float* o = y.data();
    const std::int64_t n = a.storage_size();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float s = p[i] + q[i];
      o[i] = s > 0.f ? s : 0.f;
    }
  }

  void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y) override {
    pad_shortcut(y, x, stride, /*forward=*/true, /*accumulate=*/false);
  }
  void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx) override {
    dx.zero();
    pad_shortcut(dy, dx, stride, /*forward=*/false, /*accumulate=*/false);
  }
  void pad_shortcut_backward_accumulate(const Tensor& dy, int stride, Tensor& dx) override {
    pad_shortcut(dy, dx, stride, /*forward=*/false, /*accumulate=*/true);
  }

  void global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    const std::int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3);
    const std::int64_t b = block_size(x.layout()), cb = (C + b - 1) / b;
    const float inv = 1.0f / static_cast<float>(HW);
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < cb; ++k) {
        const float* src = x.data() + (n * cb + k) * HW * b;
        float acc[16] = {};
        for (std::int64_t p = 0; p < HW; ++p)
          for (std::int64_t j = 0; j < b; ++j) acc[j] += src[p * b + j];
        for (std::int64_t j = 0; j < b && k * b + j < C; ++j)
          y.data()[n * C + k * b + j] = acc[j] * inv;
      }
  }
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    const std::int64_t N = dx.dim(0), C = dx.dim(1), HW = dx.dim(2) * dx.dim(3);
    const std::int64_t b = block_size(dx.layout()), cb = (C + b - 1) / b;
    const float inv = 1.0f / static_cast<float>(HW);
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < cb; ++k) {
        float v[16] = {};
        for (std::int64_t j = 0; j < b && k * b + j < C; ++j) v[j] = dy.data()[n * C + k * b + j] * inv;
        float* dst = dx.data() + (n * cb + k) * HW * b;
        for (std::int64_t p = 0; p < HW; ++p)
          for (std::int64_t j = 0; j < b; ++j) dst[p * b + j] = v[j];
      }
  }

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const std::int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
    sgemm('N', 'T', N, M, K, x.data(), K, w.data(), K, y.data(), M, 0.f);
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t m = 0; m < M; ++m) y.data()[n * M + m] += b.data()[m];
  }
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db) override {
    const std::int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
    if (!dx.empty()) sgemm('N', 'N', N, K, M, dy.data(), M, w.data(), K, dx.data(), K, 0.f);
    sgemm('T', 'N', M, K, N, dy.data(), M, x.data(), K, dw.data(), K, 0.f);
    for (std::int64_t m = 0; m < M; ++m) {
      float s = 0;
      for (std::int64_t n = 0; n < N; ++n) s += dy.data()[n * M + m];
      db.data()[m] = s;
    }
  }

  float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels,
                              Tensor& dlogits, int& correct) override {
    const std::int64_t N = logits.dim(0), M = logits.dim(1);
    double loss = 0;
    correct = 0;
    for (std::int64_t n = 0; n < N; ++n) {
      const float* z = logits.data() + n * M;
      float* g = dlogits.data() + n * M;
      std::int64_t arg = 0;
      for (std::int64_t m = 1; m < M; ++m)
        if (z[m] > z[arg]) arg = m;
      const float mx = z[arg];
      double sum = 0;
      for (std::int64_t m = 0; m < M; ++m) sum += std::exp(double(z[m] - mx));
      const auto label = labels[static_cast<std::size_t>(n)];
      loss += std::log(sum) - double(z[label] - mx);
      correct += (arg == label);
      for (std::int64_t m = 0; m < M; ++m)
        g[m] = static_cast<float>((std::exp(double(z[m] - mx)) / sum - (m == label)) / double(N));
    }
    return static_cast<float>(loss / double(N));
  }

  void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> velocity,
                  const SgdSpec& spec) override {
    sgd_update_to(param, grad, velocity, param, spec);
  }

  void sgd_update_to(std::span<const float> param, std::span<const float> grad, std::span<float> velocity,
                     std::span<float> out, const SgdSpec& spec) override {
    MT_ASSERT(param.size() == grad.size() && param.size() == velocity.size() && param.size() == out.size(),
              "sgd sizes");
    const float* p = param.data();
    const float* g = grad.data();
    float* v = velocity.data();
    float* o = out.data();  // may be p: each element is read before it is written
    const float lr = spec.lr, mu = spec.momentum, wd = spec.weight_decay;
    const auto n = static_cast<std::int64_t>(param.size());
    if (spec.nesterov) {
#pragma omp parallel for simd schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * p[i];
        const float vi = mu * v[i] + gi;
        v[i] = vi;
        o[i] = p[i] - lr * (gi + mu * vi);
      }
    } else {
#pragma omp parallel for simd schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const float vi = mu * v[i] + g[i] + wd * p[i];
        v[i] = vi;
        o[i] = p[i] - lr * vi;
      }
    }
  }

 private:
  // Row-major C = A * B (with transposes), checked.
  static void sgemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                    std::int64_t lda, const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                    float beta) {
    const dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
    if (st != dnnl_success)
      throw LibraryError("oneDNN", "status " + std::to_string(static_cast<int>(st)), "dnnl_sgemm",
                         __FILE__, __LINE__);
  }

  // Moves between the wide tensor `wide` (N, Cout, Ho, Wo) and `narrow` (N, Cin, H, W):
  // forward writes wide from narrow (zero in padded channels), backward writes or adds narrow
  // from wide. Both tensors share the activation layout.
  static void pad_shortcut(const Tensor& wide_c, const Tensor& narrow_c, int stride, bool forward,
                           bool accumulate) {
    Tensor& wide = const_cast<Tensor&>(wide_c);
    Tensor& narrow = const_cast<Tensor&>(narrow_c);
    MT_ASSERT(wide.layout() == narrow.layout(), "pad shortcut needs one layout");
    const std::int64_t N = wide.dim(0), Co = wide.dim(1), Ho = wide.dim(2), Wo = wide.dim(3);
    const std::int64_t Ci = narrow.dim(1), H = narrow.dim(2), W = narrow.dim(3);
    const std::int64_t pad = (Co - Ci) / 2;
    const std::int64_t b = block_size(wide.layout());
    const std::int64_t cbo = (Co + b - 1) / b, cbi = (Ci + b - 1) / b;
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < cbo; ++k)
        for (std::int64_t h = 0; h < Ho; ++h)
          for (std::int64_t w = 0; w < Wo; ++w)
            for (std::int64_t j = 0; j < b; ++j) {
              const std::int64_t co = k * b + j, ci = co - pad;
              const std::int64_t wo_off = (((n * cbo + k) * Ho + h) * Wo + w) * b + j;
              const bool inside = ci >= 0 && ci < Ci && co < Co;
              const std::int64_t ni_off =
                  inside ? (((n * cbi + ci / b) * H + h * stride) * W + w * stride) * b + ci % b : 0;
              if (forward) {
                wide.data()[wo_off] = inside ? narrow.data()[ni_off] : 0.f;
              } else if (inside) {
                if (accumulate)
                  narrow.data()[ni_off] += wide.data()[wo_off];
                else
                  narrow.data()[ni_off] = wide.data()[wo_off];
              }
            }
  }

  Context ctx_;
  Layout layout_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  try {
    return std::make_unique<CpuBackend>(threads);
  } catch (const dnnl::error& e) {
    throw_dnnl(e, "creating the oneDNN CPU engine", __FILE__, __LINE__);
  }
}

}  // namespace mt
