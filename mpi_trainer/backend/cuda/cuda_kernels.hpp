// The CUDA backend's own kernels (cuda_kernels.cu), launched on the caller's stream. All
// activations are plain NCHW float32. Launch errors are checked by the caller
// (cudaGetLastError after each launch, in cuda_backend.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mt::cuda {

// Batch norm over (N, H, W) per channel of an NCHW tensor. `partial` holds
// 2 * channels * bn_partial_blocks(n * hw) doubles.
int bn_partial_blocks(std::int64_t per_channel);
// Training forward: writes mean, biased var, y = gamma * (x - mean) / sqrt(var + eps) + beta
// (then ReLU when relu).
void bn_forward_training(const float* x, const float* gamma, const float* beta, float* y,
                         float* mean, float* var, double* partial, int n, int c, int hw, float eps,
                         bool relu, cudaStream_t s);
void bn_forward_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float* y, int n, int c, int hw, float eps, bool relu,
                          cudaStream_t s);
// g = relu ? dy * (y > 0) : dy; dgamma = sum g * xhat, dbeta = sum g,
// dx = gamma / sqrt(var + eps) * (g - dbeta / count - xhat * dgamma / count).
void bn_backward(const float* x, const float* y, const float* dy, const float* gamma,
                 const float* mean, const float* var, float* dx, float* dgamma, float* dbeta,
                 double* partial, int n, int c, int hw, float eps, bool relu, cudaStream_t s);

void relu_forward(const float* x, float* y, std::int64_t count, cudaStream_t s);
void relu_backward(const float* y, const float* dy, float* dx, std::int64_t count, cudaStream_t s);
void add(const float* a, const float* b, float* y, std::int64_t count, bool relu, cudaStream_t s);

// Option-A shortcut, x: (N, Ci, H, W) -> y: (N, Co, H / stride, W / stride) (rounded up).
void pad_shortcut_forward(const float* x, float* y, int n, int ci, int h, int w, int co, int ho,
                          int wo, int stride, cudaStream_t s);
// dx (N, Ci, H, W) = transpose of the above applied to dy; accumulate adds into dx.
void pad_shortcut_backward(const float* dy, float* dx, int n, int ci, int h, int w, int co, int ho,
                           int wo, int stride, bool accumulate, cudaStream_t s);

void global_avg_pool_forward(const float* x, float* y, int nc, int hw, cudaStream_t s);
void global_avg_pool_backward(const float* dy, float* dx, int nc, int hw, cudaStream_t s);

// y (N, M) += b broadcast over rows.
void add_bias(float* y, const float* b, int n, int m, cudaStream_t s);
// db[m] = sum over rows of dy (N, M).
void bias_grad(const float* dy, float* db, int n, int m, cudaStream_t s);

// Mean loss and argmax hits over N rows of M logits; dlogits = (softmax - onehot) / N.
// out_loss (one float) and out_correct (one int) are device memory.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                           float* out_loss, int* out_correct, int n, int m, cudaStream_t s);

// cudaSuccess when this build's kernels can run on the current device; else the runtime's reason
// (cudaErrorNoKernelImageForDevice: its architecture was not compiled in).
cudaError_t kernel_image_status();

// SGD with momentum (Backend::sgd_update_to): out may equal param.
void sgd_update(const float* param, const float* grad, float* velocity, float* out,
                std::int64_t count, float lr, float momentum, float weight_decay, bool nesterov,
                cudaStream_t s);

}  // namespace mt::cuda
