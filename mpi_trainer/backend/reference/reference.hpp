// Plain-loop reference implementation of every op: the oracle the tests hold each backend to.
// Everything is plain NCHW and accumulates in double. Slow on purpose: clarity over speed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.hpp"
#include "core/tensor.hpp"

namespace mt::ref {

// x: (N, Cin, H, W), w: (Cout, Cin, K, K) -> y: (N, Cout, Ho, Wo)
void conv2d_forward(const ConvSpec& s, const Tensor& x, const Tensor& w, Tensor& y);
void conv2d_backward_data(const ConvSpec& s, const Tensor& dy, const Tensor& w, Tensor& dx);
void conv2d_backward_weights(const ConvSpec& s, const Tensor& x, const Tensor& dy, Tensor& dw);

// mean/var: (C), biased batch variance.
void batchnorm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                float eps, bool relu, Tensor& y, Tensor& mean, Tensor& var);
void batchnorm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& mean, const Tensor& var, float eps, bool relu,
                                 Tensor& y);
void batchnorm_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                        const Tensor& mean, const Tensor& var, float eps, bool relu, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta);

void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void add(const Tensor& a, const Tensor& b, Tensor& y);
void add_relu(const Tensor& a, const Tensor& b, Tensor& y);
void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y);
void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx);
void global_avg_pool_forward(const Tensor& x, Tensor& y);
void global_avg_pool_backward(const Tensor& dy, Tensor& dx);
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db);
float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels,
                            Tensor& dlogits, int& correct);
void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> velocity,
                const SgdSpec& spec);

}  // namespace mt::ref

namespace mt {

// The reference ops behind the Backend interface (plain layout), so whole networks can be run
// on the oracle and compared step by step with a real backend.
std::unique_ptr<Backend> make_reference_backend();

}  // namespace mt
