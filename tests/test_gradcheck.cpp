// Finite-difference gradient checks of the CPU backend's ops and of whole residual networks of
// both block kinds. Each check compares analytic and central-difference derivatives of a
// random linear functional of the op's output at sampled coordinates.
#include <catch2/catch.hpp>
#include <functional>

#include "backend/backend.hpp"
#include "nn/resnet.hpp"
#include "test_util.hpp"

using namespace mt;
using mt::test::cpu;
using mt::test::fill_random;
using mt::test::random_tensor;

namespace {

// sum(t * r) over logical elements, in double.
double dot(const Tensor& t, const Tensor& r) {
  const Tensor a = to_plain(t), b = to_plain(r);
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += double(a.data()[i]) * b.data()[i];
  return s;
}

// Collects (analytic, numeric) pairs and judges them together. A coordinate whose central
// difference straddles a ReLU kink (the two one-sided differences disagree) is skipped and
// counted, as Caffe's checker does; the tests bound how many may be skipped.
struct GradCheck {
  std::vector<double> analytic, numeric;
  int skipped = 0;
  void add(double a, double n) {
    if (std::isnan(n)) {
      ++skipped;
      return;
    }
    analytic.push_back(a);
    numeric.push_back(n);
  }
  double rel_error() const {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      num += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
      den += numeric[i] * numeric[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
};

// Central difference of `loss` with respect to `v`; NaN when the step crosses a kink.
// `l0` is the loss at the unperturbed point.
double central(float& v, float h, double l0, const std::function<double()>& loss) {
  const float orig = v;
  v = orig + h;
  const double lp = loss();
  v = orig - h;
  const double lm = loss();
  v = orig;
  const double right = lp - l0, left = l0 - lm;
  if (std::fabs(right - left) > 0.1 * std::max(std::fabs(right), std::fabs(left)) + 1e-5)
    return std::nan("");
  return (lp - lm) / (2.0 * double(h));
}

// Samples `count` logical coordinates of a tensor (any layout) and checks them.
void check_coords(Tensor& t, const Tensor& grad, int count, Rng& rng, float h,
                  const std::function<double()>& loss, GradCheck& gc) {
  const double l0 = loss();
  for (int i = 0; i < count; ++i) {
    if (t.rank() == 4) {
      const auto n = std::int64_t(rng.below(t.dim(0))), c = std::int64_t(rng.below(t.dim(1)));
      const auto y = std::int64_t(rng.below(t.dim(2))), x = std::int64_t(rng.below(t.dim(3)));
      gc.add(grad.at(n, c, y, x), central(t.at(n, c, y, x), h, l0, loss));
    } else {
      const auto k = std::int64_t(rng.below(t.numel()));
      gc.add(grad.data()[k], central(t.data()[k], h, l0, loss));
    }
  }
}

}  // namespace

TEST_CASE("conv2d gradients match finite differences", "[gradcheck]") {
  const int stride = GENERATE(1, 2);
  Rng rng(100 + stride);
  INFO("seed " << 100 + stride);
  const Layout act = cpu().activation_layout();
  const ConvSpec s{16, 32, 3, stride, 1};
  const Dims xd{2, 16, 6, 6}, yd{2, 32, s.out_size(6), s.out_size(6)};
  Tensor x(xd, act), w = random_tensor({32, 16, 3, 3}, rng, 0.2f), r(yd, act), y(yd, act);
  fill_random(x, rng);
  fill_random(r, rng);
  auto op = cpu().make_conv(s, xd, act, act);
  auto loss = [&] { op->forward(x, w, y); return dot(y, r); };
  Tensor dx(xd, act), dw(w.dims());
  op->backward_data(r, w, dx);
  op->backward_weights(x, r, dw);
  GradCheck gc;
  check_coords(x, dx, 20, rng, 1e-2f, loss, gc);
  check_coords(w, dw, 20, rng, 1e-2f, loss, gc);
  INFO("relative error " << gc.rel_error());
  CHECK(gc.rel_error() < 1e-3);
}

TEST_CASE("batch norm gradients match finite differences", "[gradcheck]") {
  const bool relu = GENERATE(false, true);
  Rng rng(200 + relu);
  INFO("seed " << 200 + relu);
  const Layout act = cpu().activation_layout();
  const Dims xd{4, 16, 4, 4};
  Tensor x(xd, act), r(xd, act), y(xd, act), dx(xd, act);
  fill_random(x, rng);
  fill_random(r, rng);
  Tensor gamma = random_tensor({16}, rng, 0.3f), beta = random_tensor({16}, rng, 0.3f);
  for (auto& v : gamma.span()) v += 1.0f;
  Tensor mean({16}), var({16}), dg({16}), db({16});
  auto op = cpu().make_batchnorm(xd, act, 1e-5f, relu);
  auto loss = [&] { op->forward_training(x, gamma, beta, y, mean, var); return dot(y, r); };
  loss();
  op->backward(x, y, r, gamma, mean, var, dx, dg, db);
  GradCheck gc;
  check_coords(x, dx, 30, rng, 1e-3f, loss, gc);
  check_coords(gamma, dg, 8, rng, 1e-3f, loss, gc);
  check_coords(beta, db, 8, rng, 1e-3f, loss, gc);
  INFO("relative error " << gc.rel_error() << ", skipped at kinks " << gc.skipped);
  CHECK(gc.rel_error() < 1e-2);
  CHECK(gc.skipped <= 4);
}

TEST_CASE("pooling, linear, softmax cross-entropy, shortcut gradients match finite differences",
          "[gradcheck]") {
  Rng rng(300);
  INFO("seed 300");
  const Layout act = cpu().activation_layout();
  const Dims xd{3, 16, 4, 4}, sd{3, 32, 2, 2};
  Tensor x(xd, act), sc(sd, act), pooled({3, 32}), dpooled({3, 32}), dsc(sd, act), dx(xd, act);
  fill_random(x, rng);
  Tensor w = random_tensor({10, 32}, rng, 0.3f), b = random_tensor({10}, rng, 0.1f);
  Tensor z({3, 10}), dz({3, 10}), dw({10, 32}), db({10});
  const std::vector<std::int32_t> labels{1, 7, 4};
  int correct = 0;
  // x -> pad shortcut -> relu -> avg pool -> linear -> softmax cross-entropy
  Tensor a(sd, act);
  auto loss = [&] {
    cpu().pad_shortcut_forward(x, 2, sc);
    cpu().relu_forward(sc, a);
    cpu().global_avg_pool_forward(a, pooled);
    cpu().linear_forward(pooled, w, b, z);
    return double(cpu().softmax_cross_entropy(z, labels, dz, correct));
  };
  loss();
  cpu().linear_backward(pooled, w, dz, dpooled, dw, db);
  cpu().global_avg_pool_backward(dpooled, dsc);
  cpu().relu_backward(a, dsc, dsc);
  cpu().pad_shortcut_backward(dsc, 2, dx);
  GradCheck gc;
  check_coords(x, dx, 30, rng, 1e-2f, loss, gc);
  check_coords(w, dw, 20, rng, 1e-2f, loss, gc);
  check_coords(b, db, 10, rng, 1e-2f, loss, gc);
  INFO("relative error " << gc.rel_error());
  CHECK(gc.rel_error() < 2e-2);
}

TEST_CASE("whole residual networks: parameter gradients match finite differences",
          "[gradcheck]") {
  const std::string name = GENERATE(std::string("resnet8"), std::string("resnet8-t2t"));
  const std::uint64_t seed = 400;
  INFO("model " << name << " seed " << seed);
  Model model(parse_model(name));
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()),
      batch_stats(model.stats());
  model.init_params(params, stats, seed);
  Rng rng(seed);
  const int batch = 2;
  Network net(model, cpu(), batch);
  Tensor images = random_tensor({batch, 3, 32, 32}, rng);
  const std::vector<std::int32_t> labels{3, 9};
  auto loss = [&] { return double(net.train_step(images, labels, params, grads, batch_stats).loss); };
  FlatTensors analytic(model.params());
  loss();
  std::copy(grads.span().begin(), grads.span().end(), analytic.span().begin());
  GradCheck gc;
  // Two coordinates of every parameter tensor: every layer kind of every block.
  const double l0 = loss();
  for (std::size_t i = 0; i < model.params().entries().size(); ++i) {
    Tensor p = params.view(static_cast<int>(i)), g = analytic.view(static_cast<int>(i));
    for (int k = 0; k < 2; ++k) {
      const auto j = std::int64_t(rng.below(p.numel()));
      gc.add(g.data()[j], central(p.data()[j], 2e-3f, l0, loss));
    }
  }
  INFO("relative error " << gc.rel_error() << " over " << gc.analytic.size()
                          << " coordinates, skipped at kinks " << gc.skipped);
  CHECK(gc.rel_error() < 5e-2);
  CHECK(gc.skipped <= 6);
}
