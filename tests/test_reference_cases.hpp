// Inputs and reference results shared by the backend consistency tables (CPU and CUDA): random
// inputs from a seeded Rng and the plain-loop oracle's outputs, all plain NCHW on the host.
#pragma once

#include "backend/reference/reference.hpp"
#include "test_util.hpp"

namespace mt::test {

struct ConvCase {
  int n, ci, co, hw, k, stride;
};

struct ConvReference {
  ConvSpec spec;
  Tensor x, w, dy;      // inputs
  Tensor y, dx, dw;     // the reference's forward, backward-data, backward-weights
};

inline ConvReference conv_reference(const ConvCase& c, Rng& rng) {
  ConvReference r;
  r.spec = ConvSpec{c.ci, c.co, c.k, c.stride, c.k / 2};
  const int ho = r.spec.out_size(c.hw);
  r.x = random_tensor({c.n, c.ci, c.hw, c.hw}, rng);
  r.w = random_tensor({c.co, c.ci, c.k, c.k}, rng, 0.2f);
  r.dy = random_tensor({c.n, c.co, ho, ho}, rng);
  r.y = Tensor({c.n, c.co, ho, ho});
  r.dx = Tensor(r.x.dims());
  r.dw = Tensor(r.w.dims());
  ref::conv2d_forward(r.spec, r.x, r.w, r.y);
  ref::conv2d_backward_data(r.spec, r.dy, r.w, r.dx);
  ref::conv2d_backward_weights(r.spec, r.x, r.dy, r.dw);
  return r;
}

struct BnReference {
  Tensor x, gamma, beta, dy;           // inputs (x has mean `offset`)
  Tensor y, mean, var, dx, dg, db;     // training forward and backward
};

inline BnReference bn_reference(const Dims& shape, bool relu, float eps, float offset, Rng& rng) {
  BnReference r;
  const std::int64_t C = shape[1];
  r.x = random_tensor(shape, rng, 2.0f);
  for (auto& v : r.x.span()) v += offset;
  r.gamma = random_tensor({C}, rng, 0.5f);
  r.beta = random_tensor({C}, rng, 0.5f);
  for (auto& v : r.gamma.span()) v += 1.0f;
  r.dy = random_tensor(shape, rng);
  r.y = Tensor(shape);
  r.mean = Tensor({C});
  r.var = Tensor({C});
  r.dx = Tensor(shape);
  r.dg = Tensor({C});
  r.db = Tensor({C});
  ref::batchnorm_forward_training(r.x, r.gamma, r.beta, eps, relu, r.y, r.mean, r.var);
  ref::batchnorm_backward(r.x, r.y, r.dy, r.gamma, r.mean, r.var, eps, relu, r.dx, r.dg, r.db);
  return r;
}

}  // namespace mt::test
