// The CUDA backend's own kernels: batch norm (two-pass statistics accumulated in double),
// element-wise ops, the option-A shortcut, pooling, the bias of the linear layer, softmax
// cross-entropy and the SGD update. Plain NCHW float32 throughout.
#include <algorithm>

#include "backend/cuda/cuda_kernels.hpp"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 8192)));
}

// Threads for one (n, c) plane of hw values: a multiple of 32, at most kThreads.
int plane_threads(int hw) { return std::min(kThreads, (hw + 31) / 32 * 32); }

// Sums a and b over the block; the result is valid in thread 0. blockDim.x % 32 == 0.
__device__ void block_sum2(double& a, double& b) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  __shared__ double sa[32], sb[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    a = lane < warps ? sa[lane] : 0.0;
    b = lane < warps ? sb[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
  }
}

// Element i of channel ch's (N, H, W) values.
__device__ __forceinline__ std::int64_t chan_index(std::int64_t i, int ch, int c, int hw) {
  const std::int64_t nn = i / hw;
  return (nn * c + ch) * hw + (i - nn * hw);
}

// Block (s, ch) sums (x - K) and (x - K)^2 over its share of channel ch, K = the channel's first
// value (a shift that keeps the one-pass variance from cancelling).
__global__ void bn_stats_partial(const float* x, double* partial, int n, int c, int hw) {
  const int ch = blockIdx.y, s = blockIdx.x, parts = gridDim.x;
  const std::int64_t count = std::int64_t(n) * hw;
  const std::int64_t chunk = (count + parts - 1) / parts;
  const std::int64_t begin = s * chunk, end = min(count, begin + chunk);
  const float k = x[std::int64_t(ch) * hw];
  float s1 = 0.f, s2 = 0.f;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float d = x[chan_index(i, ch, c, hw)] - k;
    s1 += d;
    s2 = fmaf(d, d, s2);
  }
  double a = s1, b = s2;
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    partial[(std::int64_t(ch) * parts + s) * 2] = a;
    partial[(std::int64_t(ch) * parts + s) * 2 + 1] = b;
  }
}

__global__ void bn_stats_final(const float* x, const double* partial, float* mean, float* var,
                               int c, int hw, int parts, std::int64_t count) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s1 = 0, s2 = 0;
  for (int s = 0; s < parts; ++s) {
    s1 += partial[(std::int64_t(ch) * parts + s) * 2];
    s2 += partial[(std::int64_t(ch) * parts + s) * 2 + 1];
  }
  const double d1 = s1 / double(count), d2 = s2 / double(count);
  mean[ch] = static_cast<float>(double(x[std::int64_t(ch) * hw]) + d1);
  var[ch] = static_cast<float>(fmax(d2 - d1 * d1, 0.0));
}

// One block per (n, c) plane.
__global__ void bn_apply(const float* x, const float* gamma, const float* beta, const float* mean,
                         const float* var, float* y, int c, int hw, float eps, bool relu) {
  const std::int64_t plane = blockIdx.x;
  const int ch = static_cast<int>(plane % c);
  const float inv = rsqrtf(var[ch] + eps);
  const float scale = gamma[ch] * inv, shift = beta[ch] - mean[ch] * scale;
  const float* xp = x + plane * hw;
  float* yp = y + plane * hw;
  for (int i = threadIdx.x; i < hw; i += blockDim.x) {
    const float v = fmaf(xp[i], scale, shift);
    yp[i] = relu ? fmaxf(v, 0.f) : v;
  }
}

__global__ void bn_grad_partial(const float* x, const float* y, const float* dy, const float* mean,
                                const float* var, double* partial, int n, int c, int hw, float eps,
                                bool relu) {
  const int ch = blockIdx.y, s = blockIdx.x, parts = gridDim.x;
  const std::int64_t count = std::int64_t(n) * hw;
  const std::int64_t chunk = (count + parts - 1) / parts;
  const std::int64_t begin = s * chunk, end = min(count, begin + chunk);
  const float m = mean[ch], inv = rsqrtf(var[ch] + eps);
  float sg = 0.f, sgx = 0.f;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const std::int64_t j = chan_index(i, ch, c, hw);
    const float g = (relu && y[j] <= 0.f) ? 0.f : dy[j];
    sg += g;
    sgx = fmaf(g, (x[j] - m) * inv, sgx);
  }
  double a = sg, b = sgx;
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    partial[(std::int64_t(ch) * parts + s) * 2] = a;
    partial[(std::int64_t(ch) * parts + s) * 2 + 1] = b;
  }
}

__global__ void bn_grad_final(const double* partial, float* dgamma, float* dbeta, int c, int parts) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double sg = 0, sgx = 0;
  for (int s = 0; s < parts; ++s) {
    sg += partial[(std::int64_t(ch) * parts + s) * 2];
    sgx += partial[(std::int64_t(ch) * parts + s) * 2 + 1];
  }
  dbeta[ch] = static_cast<float>(sg);
  dgamma[ch] = static_cast<float>(sgx);
}

__global__ void bn_grad_apply(const float* x, const float* y, const float* dy, const float* gamma,
                              const float* mean, const float* var, const float* dgamma,
                              const float* dbeta, float* dx, int c, int hw, float inv_count,
                              float eps, bool relu) {
  const std::int64_t plane = blockIdx.x;
  const int ch = static_cast<int>(plane % c);
  const float m = mean[ch], inv = rsqrtf(var[ch] + eps);
  const float k = gamma[ch] * inv, mg = dbeta[ch] * inv_count, mgx = dgamma[ch] * inv_count;
  const std::int64_t base = plane * hw;
  for (int i = threadIdx.x; i < hw; i += blockDim.x) {
    const std::int64_t j = base + i;
    const float g = (relu && y[j] <= 0.f) ? 0.f : dy[j];
    const float xhat = (x[j] - m) * inv;
    dx[j] = k * (g - mg - xhat * mgx);
  }
}

__global__ void relu_fwd_k(const float* x, float* y, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] = fmaxf(x[i], 0.f);
}

__global__ void relu_bwd_k(const float* y, const float* dy, float* dx, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

__global__ void add_k(const float* a, const float* b, float* y, std::int64_t count, bool relu) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float v = a[i] + b[i];
    y[i] = relu ? fmaxf(v, 0.f) : v;
  }
}

__global__ void pad_fwd_k(const float* x, float* y, int n, int ci, int h, int w, int co, int ho,
                          int wo, int stride) {
  const std::int64_t total = std::int64_t(n) * co * ho * wo;
  const int pad = (co - ci) / 2;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(i % wo);
    const int oh = static_cast<int>((i / wo) % ho);
    const int oc = static_cast<int>((i / (std::int64_t(wo) * ho)) % co);
    const std::int64_t nn = i / (std::int64_t(wo) * ho * co);
    const int c = oc - pad;
    y[i] = (c >= 0 && c < ci)
               ? x[((nn * ci + c) * h + std::int64_t(oh) * stride) * w + std::int64_t(ow) * stride]
               : 0.f;
  }
}

__global__ void pad_bwd_k(const float* dy, float* dx, int n, int ci, int h, int w, int co, int ho,
                          int wo, int stride, bool accumulate) {
  const std::int64_t total = std::int64_t(n) * ci * h * w;
  const int pad = (co - ci) / 2;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const int ww = static_cast<int>(i % w);
    const int hh = static_cast<int>((i / w) % h);
    const int c = static_cast<int>((i / (std::int64_t(w) * h)) % ci);
    const std::int64_t nn = i / (std::int64_t(w) * h * ci);
    float v = 0.f;
    if (hh % stride == 0 && ww % stride == 0 && hh / stride < ho && ww / stride < wo)
      v = dy[((nn * co + c + pad) * ho + hh / stride) * wo + ww / stride];
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

// One warp per (n, c) plane.
__global__ void avg_pool_fwd_k(const float* x, float* y, int nc, int hw) {
  const std::int64_t plane = blockIdx.x * std::int64_t(blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (plane >= nc) return;
  float s = 0.f;
  for (int i = lane; i < hw; i += 32) s += x[plane * hw + i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) y[plane] = s / float(hw);
}

__global__ void avg_pool_bwd_k(const float* dy, float* dx, std::int64_t count, int hw) {
  const float inv = 1.f / float(hw);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i / hw] * inv;
}

__global__ void add_bias_k(float* y, const float* b, int n, int m) {
  const std::int64_t total = std::int64_t(n) * m;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % m];
}

__global__ void bias_grad_k(const float* dy, float* db, int n, int m) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= m) return;
  double s = 0;
  for (int r = 0; r < n; ++r) s += dy[std::int64_t(r) * m + j];
  db[j] = static_cast<float>(s);
}

// One block; thread t takes rows t, t + blockDim.x, ...
__global__ void softmax_ce_k(const float* logits, const std::int32_t* labels, float* dlogits,
                             float* out_loss, int* out_correct, int n, int m) {
  double loss = 0, hits = 0;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    const float* z = logits + std::int64_t(r) * m;
    float mx = z[0];
    int arg = 0;
    for (int j = 1; j < m; ++j)
      if (z[j] > mx) mx = z[j], arg = j;
    double sum = 0;
    for (int j = 0; j < m; ++j) sum += exp(double(z[j] - mx));
    const int label = labels[r];
    loss += -(double(z[label] - mx) - log(sum));
    hits += arg == label ? 1.0 : 0.0;
    for (int j = 0; j < m; ++j)
      dlogits[std::int64_t(r) * m + j] =
          static_cast<float>((exp(double(z[j] - mx)) / sum - (j == label ? 1.0 : 0.0)) / double(n));
  }
  block_sum2(loss, hits);
  if (threadIdx.x == 0) {
    *out_loss = static_cast<float>(loss / double(n));
    *out_correct = static_cast<int>(hits + 0.5);
  }
}

__global__ void sgd_k(const float* param, const float* grad, float* velocity, float* out,
                      std::int64_t count, float lr, float momentum, float wd, bool nesterov) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < count;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float p = param[i];
    const float g = fmaf(wd, p, grad[i]);
    const float v = fmaf(momentum, velocity[i], g);
    velocity[i] = v;
    out[i] = p - lr * (nesterov ? fmaf(momentum, v, g) : v);
  }
}

}  // namespace

int bn_partial_blocks(std::int64_t per_channel) {
  return static_cast<int>(std::clamp<std::int64_t>(per_channel / 4096, 1, 64));
}

void bn_forward_training(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* var, double* partial, int n, int c, int hw, float eps,
                         bool relu, cudaStream_t s) {
  const std::int64_t count = std::int64_t(n) * hw;
  const int parts = bn_partial_blocks(count);
  bn_stats_partial<<<dim3(parts, c), kThreads, 0, s>>>(x, partial, n, c, hw);
  bn_stats_final<<<(c + 127) / 128, 128, 0, s>>>(x, partial, mean, var, c, hw, parts, count);
  bn_apply<<<std::int64_t(n) * c, plane_threads(hw), 0, s>>>(x, gamma, beta, mean, var, y, c, hw,
                                                              eps, relu);
}

void bn_forward_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, int n, int c, int hw, float eps, bool relu,
                          cudaStream_t s) {
  bn_apply<<<std::int64_t(n) * c, plane_threads(hw), 0, s>>>(x, gamma, beta, mean, var, y, c, hw,
                                                              eps, relu);
}

void bn_backward(const float* x, const float* y, const float* dy, const float* gamma,
                 const float* mean, const float* var, float* dx, float* dgamma, float* dbeta,
                 double* partial, int n, int c, int hw, float eps, bool relu, cudaStream_t s) {
  const std::int64_t count = std::int64_t(n) * hw;
  const int parts = bn_partial_blocks(count);
  bn_grad_partial<<<dim3(parts, c), kThreads, 0, s>>>(x, y, dy, mean, var, partial, n, c, hw, eps,
                                                      relu);
  bn_grad_final<<<(c + 127) / 128, 128, 0, s>>>(partial, dgamma, dbeta, c, parts);
  bn_grad_apply<<<std::int64_t(n) * c, plane_threads(hw), 0, s>>>(
      x, y, dy, gamma, mean, var, dgamma, dbeta, dx, c, hw, 1.f / float(count), eps, relu);
}

void relu_forward(const float* x, float* y, std::int64_t count, cudaStream_t s) {
  relu_fwd_k<<<blocks_for(count), kThreads, 0, s>>>(x, y, count);
}

void relu_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t s) {
  relu_bwd_k<<<blocks_for(count), kThreads, 0, s>>>(y, dy, dx, count);
}

void add(const float* a, const float* b, float* y, std::int64_t count, bool relu, cudaStream_t s) {
  add_k<<<blocks_for(count), kThreads, 0, s>>>(a, b, y, count, relu);
}

void pad_shortcut_forward(const float* x, float* y, int n, int ci, int h, int w, int co, int ho,
                          int wo, int stride, cudaStream_t s) {
  pad_fwd_k<<<blocks_for(std::int64_t(n) * co * ho * wo), kThreads, 0, s>>>(x, y, n, ci, h, w, co,
                                                                          ho, wo, stride);
}

void pad_shortcut_backward(const float* dy, float* dx, int n, int ci, int h, int w, int co, int ho,
                           int wo, int stride, bool accumulate, cudaStream_t s) {
  pad_bwd_k<<<blocks_for(std::int64_t(n) * ci * h * w), kThreads, 0, s>>>(dy, dx, n, ci, h, w, co,
                                                                         ho, wo, stride, accumulate);
}

void global_avg_pool_forward(const float* x, float* y, int nc, int hw, cudaStream_t s) {
  constexpr int kWarps = kThreads / 32;
  avg_pool_fwd_k<<<(nc + kWarps - 1) / kWarps, kThreads, 0, s>>>(x, y, nc, hw);
}

void global_avg_pool_backward(const float* dy, float* dx, int nc, int hw, cudaStream_t s) {
  const std::int64_t count = std::int64_t(nc) * hw;
  avg_pool_bwd_k<<<blocks_for(count), kThreads, 0, s>>>(dy, dx, count, hw);
}

void add_bias(float* y, const float* b, int n, int m, cudaStream_t s) {
  add_bias_k<<<blocks_for(std::int64_t(n) * m), kThreads, 0, s>>>(y, b, n, m);
}

void bias_grad(const float* dy, float* db, int n, int m, cudaStream_t s) {
  bias_grad_k<<<(m + 127) / 128, 128, 0, s>>>(dy, db, n, m);
}

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                           float* out_loss, int* out_correct, int n, int m, cudaStream_t s) {
  softmax_ce_k<<<1, kThreads, 0, s>>>(logits, labels, dlogits, out_loss, out_correct, n, m);
}

void sgd_update(const float* param, const float* grad, float* velocity, float* out,
                std::int64_t count, float lr, float momentum, float weight_decay, bool nesterov,
                cudaStream_t s) {
  sgd_k<<<blocks_for(count), kThreads, 0, s>>>(param, grad, velocity, out, count, lr, momentum,
                                                weight_decay, nesterov);
}

cudaError_t kernel_image_status() {
  cudaFuncAttributes a{};
  return cudaFuncGetAttributes(&a, bn_apply);
}

}  // namespace mt::cuda
