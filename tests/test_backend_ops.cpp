// Every op of the CPU backend against the plain-loop reference, on several shapes and in the
// backend's own activation layout, with a tolerance per op. Seeds are fixed and printed.
#include <catch2/catch.hpp>

#include "backend/backend.hpp"
#include "backend/reference/reference.hpp"
#include "test_reference_cases.hpp"
#include "test_util.hpp"

using namespace mt;
using mt::test::cpu;
using mt::test::in_layout;
using mt::test::random_tensor;

using mt::test::ConvCase;

TEST_CASE("conv2d forward, backward-data and backward-weights match the reference",
          "[unit][backend]") {
  const auto c = GENERATE(ConvCase{2, 16, 16, 8, 3, 1}, ConvCase{3, 16, 32, 8, 3, 2},
                          ConvCase{2, 32, 64, 6, 1, 2}, ConvCase{2, 3, 16, 7, 7, 1},
                          ConvCase{1, 32, 32, 5, 3, 1}, ConvCase{2, 16, 32, 9, 1, 2});
  const std::uint64_t seed = 1000 + c.ci * 7 + c.co + c.k * 3 + c.stride;
  INFO("seed " << seed << " n=" << c.n << " ci=" << c.ci << " co=" << c.co << " hw=" << c.hw
               << " k=" << c.k << " stride=" << c.stride);
  Rng rng(seed);
  auto r = test::conv_reference(c, rng);
  const ConvSpec& s = r.spec;
  const int ho = s.out_size(c.hw);
  const Layout act = cpu().activation_layout();
  // The stem reads plain images; every other conv reads the activation layout.
  const Layout xl = c.ci == 3 ? Layout::kPlain : act;
  const Tensor &x = r.x, &w = r.w, &dy = r.dy;
  Tensor &y_ref = r.y, &dx_ref = r.dx, &dw_ref = r.dw;

  auto op = cpu().make_conv(s, x.dims(), xl, act);
  Tensor xb = in_layout(x, xl), dyb = in_layout(dy, act);
  Tensor y({c.n, c.co, ho, ho}, act), dx(x.dims(), xl), dw(w.dims());
  op->forward(xb, w, y);
  MT_CHECK_CLOSE(y, y_ref, 1e-5);
  op->backward_weights(xb, dyb, dw);
  MT_CHECK_CLOSE(dw, dw_ref, 1e-5);
  if (xl == act) {
    op->backward_data(dyb, w, dx);
    MT_CHECK_CLOSE(dx, dx_ref, 1e-5);
  }
  // Primitives are reused: a second call on new data must still be right.
  Tensor w2 = random_tensor(w.dims(), rng, 0.2f);
  ref::conv2d_forward(s, x, w2, y_ref);
  op->forward(xb, w2, y);
  MT_CHECK_CLOSE(y, y_ref, 1e-5);
}

TEST_CASE("batch norm training, inference and backward match the reference", "[unit][backend]") {
  const auto relu = GENERATE(false, true);
  const auto shape = GENERATE(Dims{4, 16, 8, 8}, Dims{2, 32, 5, 5}, Dims{8, 64, 4, 4});
  const std::uint64_t seed = 77 + shape[1] + relu;
  INFO("seed " << seed << " shape " << dims_to_string(shape) << " relu " << relu);
  Rng rng(seed);
  const float eps = 1e-5f;
  const std::int64_t C = shape[1];
  auto r = test::bn_reference(shape, relu, eps, 0.5f, rng);  // non-zero mean
  const Tensor &x = r.x, &gamma = r.gamma, &beta = r.beta, &dy = r.dy;
  const Tensor &y_ref = r.y, &mean_ref = r.mean, &var_ref = r.var, &dx_ref = r.dx, &dg_ref = r.dg, &db_ref = r.db;

  const Layout act = cpu().activation_layout();
  auto op = cpu().make_batchnorm(shape, act, eps, relu);
  Tensor xb = in_layout(x, act), dyb = in_layout(dy, act);
  Tensor y(shape, act), mean({C}), var({C}), dx(shape, act), dg({C}), db({C});
  op->forward_training(xb, gamma, beta, y, mean, var);
  MT_CHECK_CLOSE(y, y_ref, 1e-5);
  MT_CHECK_CLOSE(mean, mean_ref, 1e-5);
  MT_CHECK_CLOSE(var, var_ref, 1e-5);
  op->backward(xb, y, dyb, gamma, mean, var, dx, dg, db);
  MT_CHECK_CLOSE(dx, dx_ref, 1e-4);
  MT_CHECK_CLOSE(dg, dg_ref, 1e-4);
  MT_CHECK_CLOSE(db, db_ref, 1e-5);

  Tensor rm = random_tensor({C}, rng, 0.1f), rv = random_tensor({C}, rng, 0.1f);
  for (auto& v : rv.span()) v = std::fabs(v) + 0.5f;
  Tensor yi_ref(shape), yi(shape, act);
  ref::batchnorm_forward_inference(x, gamma, beta, rm, rv, eps, relu, yi_ref);
  op->forward_inference(xb, gamma, beta, rm, rv, yi);
  MT_CHECK_CLOSE(yi, yi_ref, 1e-5);
}

TEST_CASE("element-wise ops match the reference", "[unit][backend]") {
  const auto shape = GENERATE(Dims{2, 16, 4, 4}, Dims{3, 32, 3, 5});
  Rng rng(5);
  INFO("seed 5 shape " << dims_to_string(shape));
  const Layout act = cpu().activation_layout();
  Tensor a = random_tensor(shape, rng), b = random_tensor(shape, rng), g = random_tensor(shape, rng);
  Tensor ab = in_layout(a, act), bb = in_layout(b, act), gb = in_layout(g, act);
  Tensor want(shape), got(shape, act);

  ref::relu_forward(a, want);
  cpu().relu_forward(ab, got);
  MT_CHECK_CLOSE(got, want, 0.0);

  ref::relu_backward(a, g, want);
  cpu().relu_backward(ab, gb, got);
  MT_CHECK_CLOSE(got, want, 0.0);

  ref::add(a, b, want);
  cpu().add(ab, bb, got);
  MT_CHECK_CLOSE(got, want, 0.0);

  ref::add_relu(a, b, want);
  cpu().add_relu(ab, bb, got);
  MT_CHECK_CLOSE(got, want, 0.0);
  // In place, as the network uses it.
  cpu().add_relu(ab, bb, ab);
  MT_CHECK_CLOSE(ab, want, 0.0);
}

TEST_CASE("option-A pad shortcut matches the reference", "[unit][backend]") {
  const auto shape = GENERATE(Dims{2, 16, 8, 8}, Dims{3, 32, 6, 6}, Dims{2, 8, 4, 4});
  Rng rng(9);
  INFO("seed 9 shape " << dims_to_string(shape));
  const Layout act = cpu().activation_layout();
  const Dims out{shape[0], shape[1] * 2, shape[2] / 2, shape[3] / 2};
  Tensor x = random_tensor(shape, rng), dy = random_tensor(out, rng);
  Tensor y_ref(out), dx_ref(shape);
  ref::pad_shortcut_forward(x, 2, y_ref);
  ref::pad_shortcut_backward(dy, 2, dx_ref);
  Tensor y(out, act), dx(shape, act);
  cpu().pad_shortcut_forward(in_layout(x, act), 2, y);
  MT_CHECK_CLOSE(y, y_ref, 0.0);
  Tensor dyb = in_layout(dy, act);
  cpu().pad_shortcut_backward(dyb, 2, dx);
  MT_CHECK_CLOSE(dx, dx_ref, 0.0);
  // Accumulating form adds onto what is there.
  Tensor base = random_tensor(shape, rng), acc = in_layout(base, act), want(shape);
  cpu().pad_shortcut_backward_accumulate(dyb, 2, acc);
  ref::add(base, dx_ref, want);
  MT_CHECK_CLOSE(acc, want, 1e-7);
}

TEST_CASE("global average pool, linear, softmax cross-entropy match the reference",
          "[unit][backend]") {
  Rng rng(21);
  INFO("seed 21");
  const Layout act = cpu().activation_layout();
  const Dims xs{5, 64, 8, 8};
  Tensor x = random_tensor(xs, rng), dy = random_tensor({5, 64}, rng);
  Tensor y_ref({5, 64}), y({5, 64}), dx_ref(xs), dx(xs, act);
  ref::global_avg_pool_forward(x, y_ref);
  cpu().global_avg_pool_forward(in_layout(x, act), y);
  MT_CHECK_CLOSE(y, y_ref, 1e-6);
  ref::global_avg_pool_backward(dy, dx_ref);
  cpu().global_avg_pool_backward(dy, dx);
  MT_CHECK_CLOSE(dx, dx_ref, 1e-6);

  Tensor w = random_tensor({10, 64}, rng, 0.3f), b = random_tensor({10}, rng);
  Tensor z_ref({5, 10}), z({5, 10});
  ref::linear_forward(y_ref, w, b, z_ref);
  cpu().linear_forward(y_ref, w, b, z);
  MT_CHECK_CLOSE(z, z_ref, 1e-5);
  Tensor dz = random_tensor({5, 10}, rng);
  Tensor dxr({5, 64}), dwr({10, 64}), dbr({10}), dxg({5, 64}), dwg({10, 64}), dbg({10});
  ref::linear_backward(y_ref, w, dz, dxr, dwr, dbr);
  cpu().linear_backward(y_ref, w, dz, dxg, dwg, dbg);
  MT_CHECK_CLOSE(dxg, dxr, 1e-5);
  MT_CHECK_CLOSE(dwg, dwr, 1e-5);
  MT_CHECK_CLOSE(dbg, dbr, 1e-5);

  const std::vector<std::int32_t> labels{3, 0, 9, 9, 1};
  Tensor g_ref({5, 10}), g({5, 10});
  int c_ref = 0, c = 0;
  const float l_ref = ref::softmax_cross_entropy(z_ref, labels, g_ref, c_ref);
  const float l = cpu().softmax_cross_entropy(z_ref, labels, g, c);
  CHECK(l == Approx(l_ref).epsilon(1e-6));
  CHECK(c == c_ref);
  MT_CHECK_CLOSE(g, g_ref, 1e-6);
}

TEST_CASE("SGD momentum and Nesterov updates match the reference", "[unit][backend]") {
  const bool nesterov = GENERATE(false, true);
  Rng rng(33);
  INFO("seed 33 nesterov " << nesterov);
  Tensor p = random_tensor({1000}, rng), g = random_tensor({1000}, rng), v = random_tensor({1000}, rng);
  Tensor p2 = p.clone(), v2 = v.clone();
  const SgdSpec spec{0.05f, 0.9f, 1e-4f, nesterov};
  for (int i = 0; i < 3; ++i) {
    ref::sgd_update(p.span(), g.span(), v.span(), spec);
    cpu().sgd_update(p2.span(), g.span(), v2.span(), spec);
  }
  MT_CHECK_CLOSE(p2, p, 1e-6);
  MT_CHECK_CLOSE(v2, v, 1e-6);

  // Out of place (the parameter server's reply buffer): the same values, the input untouched.
  Tensor p3 = p.clone(), v3 = v.clone(), v4 = v.clone(), out = random_tensor({1000}, rng);
  const Tensor p3_before = p3.clone();
  cpu().sgd_update_to(p3.span(), g.span(), v3.span(), out.span(), spec);
  ref::sgd_update(p.span(), g.span(), v4.span(), spec);
  MT_CHECK_CLOSE(out, p, 1e-6);
  MT_CHECK_CLOSE(v3, v4, 1e-6);
  CHECK(std::equal(p3.span().begin(), p3.span().end(), p3_before.span().begin()));
}
