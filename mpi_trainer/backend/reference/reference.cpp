#include "backend/reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace mt::ref {

namespace {
void require_plain(const Tensor& t) { MT_ASSERT(t.layout() == Layout::kPlain, "reference ops are plain"); }

// Element (n, c, h, w) of a plain NCHW tensor of C x H x W: the index Tensor::at computes, here so
// that the convolutions' inner loops need no call per element (Tensor::offset is out of line; under
// the sanitizers it was 60% of a reference-backend test's time). Same elements, same order of
// accumulation: the results are bit for bit those of Tensor::at.
struct Nchw {
  std::int64_t C, H, W;
  explicit Nchw(const Tensor& t) : C(t.dim(1)), H(t.dim(2)), W(t.dim(3)) { require_plain(t); }
  std::int64_t operator()(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) const {
    return ((n * C + c) * H + h) * W + w;
  }
};
}  // namespace

void conv2d_forward(const ConvSpec& s, const Tensor& x, const Tensor& w, Tensor& y) {
  const Nchw ix(x), iwt(w), iy(y);
  const float* xp = x.data();
  const float* wp = w.data();
  float* yp = y.data();
  const auto N = x.dim(0), Ci = x.dim(1), H = x.dim(2), W = x.dim(3);
  const auto Co = w.dim(0), K = w.dim(2), Ho = y.dim(2), Wo = y.dim(3);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t co = 0; co < Co; ++co)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          double acc = 0;
          for (std::int64_t ci = 0; ci < Ci; ++ci)
            for (std::int64_t kh = 0; kh < K; ++kh)
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t ih = oh * s.stride - s.pad + kh, iw = ow * s.stride - s.pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(xp[ix(n, ci, ih, iw)]) * wp[iwt(co, ci, kh, kw)];
              }
          yp[iy(n, co, oh, ow)] = static_cast<float>(acc);
        }
}

void conv2d_backward_data(const ConvSpec& s, const Tensor& dy, const Tensor& w, Tensor& dx) {
  const Nchw idy(dy), iwt(w), idx(dx);
  const float* dyp = dy.data();
  const float* wp = w.data();
  const auto N = dx.dim(0), Ci = dx.dim(1), H = dx.dim(2), W = dx.dim(3);
  const auto Co = w.dim(0), K = w.dim(2), Ho = dy.dim(2), Wo = dy.dim(3);
  std::vector<double> acc(static_cast<std::size_t>(dx.numel()), 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t co = 0; co < Co; ++co)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow)
          for (std::int64_t ci = 0; ci < Ci; ++ci)
            for (std::int64_t kh = 0; kh < K; ++kh)
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t ih = oh * s.stride - s.pad + kh, iw = ow * s.stride - s.pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc[static_cast<std::size_t>(idx(n, ci, ih, iw))] +=
                    double(dyp[idy(n, co, oh, ow)]) * wp[iwt(co, ci, kh, kw)];
              }
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    dx.data()[i] = static_cast<float>(acc[static_cast<std::size_t>(i)]);
}

void conv2d_backward_weights(const ConvSpec& s, const Tensor& x, const Tensor& dy, Tensor& dw) {
  const Nchw ix(x), idy(dy), idw(dw);
  const float* xp = x.data();
  const float* dyp = dy.data();
  float* dwp = dw.data();
  const auto N = x.dim(0), Ci = x.dim(1), H = x.dim(2), W = x.dim(3);
  const auto Co = dw.dim(0), K = dw.dim(2), Ho = dy.dim(2), Wo = dy.dim(3);
  for (std::int64_t co = 0; co < Co; ++co)
    for (std::int64_t ci = 0; ci < Ci; ++ci)
      for (std::int64_t kh = 0; kh < K; ++kh)
        for (std::int64_t kw = 0; kw < K; ++kw) {
          double acc = 0;
          for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t oh = 0; oh < Ho; ++oh)
              for (std::int64_t ow = 0; ow < Wo; ++ow) {
                const std::int64_t ih = oh * s.stride - s.pad + kh, iw = ow * s.stride - s.pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(xp[ix(n, ci, ih, iw)]) * dyp[idy(n, co, oh, ow)];
              }
          dwp[idw(co, ci, kh, kw)] = static_cast<float>(acc);
        }
}

namespace {
// Calls f(n, h, w) over the spatial positions of one channel.
template <class F>
void for_nhw(const Tensor& x, F&& f) {
  for (std::int64_t n = 0; n < x.dim(0); ++n)
    for (std::int64_t h = 0; h < x.dim(2); ++h)
      for (std::int64_t w = 0; w < x.dim(3); ++w)
        f(n, h, w);
}
}  // namespace

void batchnorm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, bool relu,
                                Tensor& y, Tensor& mean, Tensor& var) {
  const double count = double(x.dim(0) * x.dim(2) * x.dim(3));
  for (std::int64_t c = 0; c < x.dim(1); ++c) {
    double sum = 0, sq = 0;
    for_nhw(x, [&](auto n, auto h, auto w) { sum += x.at(n, c, h, w); });
    const double m = sum / count;
    for_nhw(x, [&](auto n, auto h, auto w) {
      const double d = x.at(n, c, h, w) - m;
      sq += d * d;
    });
    const double v = sq / count;
    mean.data()[c] = static_cast<float>(m);
    var.data()[c] = static_cast<float>(v);
    const double inv = 1.0 / std::sqrt(v + eps);
    for_nhw(x, [&](auto n, auto h, auto w) {
      double o = gamma.data()[c] * (x.at(n, c, h, w) - m) * inv + beta.data()[c];
      if (relu) o = std::max(o, 0.0);
      y.at(n, c, h, w) = static_cast<float>(o);
    });
  }
}

void batchnorm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                 const Tensor& var, float eps, bool relu, Tensor& y) {
  for (std::int64_t c = 0; c < x.dim(1); ++c) {
    const double inv = 1.0 / std::sqrt(double(var.data()[c]) + eps);
    for_nhw(x, [&](auto n, auto h, auto w) {
      double o = gamma.data()[c] * (x.at(n, c, h, w) - mean.data()[c]) * inv + beta.data()[c];
      if (relu) o = std::max(o, 0.0);
      y.at(n, c, h, w) = static_cast<float>(o);
    });
  }
}

void batchnorm_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& var, float eps, bool relu, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const double count = double(x.dim(0) * x.dim(2) * x.dim(3));
  for (std::int64_t c = 0; c < x.dim(1); ++c) {
    const double m = mean.data()[c], inv = 1.0 / std::sqrt(double(var.data()[c]) + eps);
    auto g = [&](auto n, auto h, auto w) {
      return (relu && y.at(n, c, h, w) <= 0.f) ? 0.0 : double(dy.at(n, c, h, w));
    };
    double sum_g = 0, sum_gx = 0;
    for_nhw(x, [&](auto n, auto h, auto w) {
      sum_g += g(n, h, w);
      sum_gx += g(n, h, w) * (x.at(n, c, h, w) - m) * inv;
    });
    dgamma.data()[c] = static_cast<float>(sum_gx);
    dbeta.data()[c] = static_cast<float>(sum_g);
    for_nhw(x, [&](auto n, auto h, auto w) {
      const double xhat = (x.at(n, c, h, w) - m) * inv;
      dx.at(n, c, h, w) =
          static_cast<float>(gamma.data()[c] * inv * (g(n, h, w) - sum_g / count - xhat * sum_gx / count));
    });
  }
}

void relu_forward(const Tensor& x, Tensor& y) {
  for (std::int64_t i = 0; i < x.numel(); ++i)
    y.data()[i] = std::max(x.data()[i], 0.f);
}
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  for (std::int64_t i = 0; i < y.numel(); ++i)
    dx.data()[i] = y.data()[i] > 0.f ? dy.data()[i] : 0.f;
}
void add(const Tensor& a, const Tensor& b, Tensor& y) {
  for (std::int64_t i = 0; i < a.numel(); ++i)
    y.data()[i] = a.data()[i] + b.data()[i];
}
void add_relu(const Tensor& a, const Tensor& b, Tensor& y) {
  for (std::int64_t i = 0; i < a.numel(); ++i)
    y.data()[i] = std::max(a.data()[i] + b.data()[i], 0.f);
}

void pad_shortcut_forward(const Tensor& x, int stride, Tensor& y) {
  const std::int64_t pad = (y.dim(1) - x.dim(1)) / 2;
  y.zero();
  for (std::int64_t n = 0; n < y.dim(0); ++n)
    for (std::int64_t c = 0; c < x.dim(1); ++c)
      for (std::int64_t h = 0; h < y.dim(2); ++h)
        for (std::int64_t w = 0; w < y.dim(3); ++w)
          y.at(n, c + pad, h, w) = x.at(n, c, h * stride, w * stride);
}

void pad_shortcut_backward(const Tensor& dy, int stride, Tensor& dx) {
  const std::int64_t pad = (dy.dim(1) - dx.dim(1)) / 2;
  dx.zero();
  for (std::int64_t n = 0; n < dy.dim(0); ++n)
    for (std::int64_t c = 0; c < dx.dim(1); ++c)
      for (std::int64_t h = 0; h < dy.dim(2); ++h)
        for (std::int64_t w = 0; w < dy.dim(3); ++w)
          dx.at(n, c, h * stride, w * stride) = dy.at(n, c + pad, h, w);
}

void global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const double hw = double(x.dim(2) * x.dim(3));
  for (std::int64_t n = 0; n < x.dim(0); ++n)
    for (std::int64_t c = 0; c < x.dim(1); ++c) {
      double s = 0;
      for (std::int64_t h = 0; h < x.dim(2); ++h)
        for (std::int64_t w = 0; w < x.dim(3); ++w)
          s += x.at(n, c, h, w);
      y.data()[n * x.dim(1) + c] = static_cast<float>(s / hw);
    }
}

void global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  const float inv = 1.0f / float(dx.dim(2) * dx.dim(3));
  for (std::int64_t n = 0; n < dx.dim(0); ++n)
    for (std::int64_t c = 0; c < dx.dim(1); ++c)
      for (std::int64_t h = 0; h < dx.dim(2); ++h)
        for (std::int64_t w = 0; w < dx.dim(3); ++w)
          dx.at(n, c, h, w) = dy.data()[n * dx.dim(1) + c] * inv;
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const auto N = x.dim(0), K = x.dim(1), M = w.dim(0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      double acc = b.data()[m];
      for (std::int64_t k = 0; k < K; ++k)
        acc += double(x.data()[n * K + k]) * w.data()[m * K + k];
      y.data()[n * M + m] = static_cast<float>(acc);
    }
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  const auto N = x.dim(0), K = x.dim(1), M = w.dim(0);
  if (!dx.empty())
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < K; ++k) {
        double acc = 0;
        for (std::int64_t m = 0; m < M; ++m)
          acc += double(dy.data()[n * M + m]) * w.data()[m * K + k];
        dx.data()[n * K + k] = static_cast<float>(acc);
      }
  for (std::int64_t m = 0; m < M; ++m) {
    double sb = 0;
    for (std::int64_t n = 0; n < N; ++n)
      sb += dy.data()[n * M + m];
    db.data()[m] = static_cast<float>(sb);
    for (std::int64_t k = 0; k < K; ++k) {
      double acc = 0;
      for (std::int64_t n = 0; n < N; ++n)
        acc += double(dy.data()[n * M + m]) * x.data()[n * K + k];
      dw.data()[m * K + k] = static_cast<float>(acc);
    }
  }
}

float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels, Tensor& dlogits, int& correct) {
  const auto N = logits.dim(0), M = logits.dim(1);
  double loss = 0;
  correct = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    const float* z = logits.data() + n * M;
    double mx = z[0];
    std::int64_t arg = 0;
    for (std::int64_t m = 1; m < M; ++m)
      if (z[m] > mx) mx = z[m], arg = m;
    double sum = 0;
    for (std::int64_t m = 0; m < M; ++m)
      sum += std::exp(z[m] - mx);
    const auto label = labels[static_cast<std::size_t>(n)];
    loss += -(z[label] - mx - std::log(sum));
    if (arg == label) ++correct;
    for (std::int64_t m = 0; m < M; ++m)
      dlogits.data()[n * M + m] =
          static_cast<float>((std::exp(z[m] - mx) / sum - (m == label ? 1.0 : 0.0)) / double(N));
  }
  return static_cast<float>(loss / double(N));
}

void sgd_update(std::span<float> param, std::span<const float> grad, std::span<float> velocity, const SgdSpec& spec) {
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = double(grad[i]) + double(spec.weight_decay) * param[i];
    const double v = double(spec.momentum) * velocity[i] + g;
    velocity[i] = static_cast<float>(v);
    param[i] -= static_cast<float>(spec.lr * (spec.nesterov ? g + spec.momentum * v : v));
  }
}

}  // namespace mt::ref
