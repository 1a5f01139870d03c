// The CUDA backend's consistency table: every op on the GPU against the plain-loop reference,
// on several shapes (ResNet-32's own included) with a tolerance per op; the memory contract
// (upload, download, deferred results); and whole networks: losses of a short training run
// match the CPU backend's and the committed golden trajectory.
//
// Its own binary with its own main, built whenever the CUDA backend is: with no usable GPU it
// says why and exits 77, which CTest reports as skipped. MT_CUDA_TF32=1 runs the table with
// TF32 tensor cores allowed, at TF32 tolerances.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/reference/reference.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "test_reference_cases.hpp"
#include "test_trajectory.hpp"
#include "test_util.hpp"

using namespace mt;
using mt::test::random_tensor;

namespace {

Backend& gpu() {
  static auto be = make_cuda_backend(0);
  return *be;
}

bool tf32() {
  const char* t = std::getenv("MT_CUDA_TF32");
  return t && *t && std::string(t) != "0";
}
// Tolerance of an op whose FP32 result depends on the algorithm's summation order; TF32 keeps
// 10 mantissa bits.
double tol(double fp32) { return tf32() ? std::max(fp32, 5e-3) : fp32; }

Tensor up(const Tensor& host) {
  Tensor d = gpu().make_tensor(host.dims(), Layout::kPlain);
  gpu().upload(host.span(), d);
  return d;
}
Tensor down(const Tensor& d) {
  Tensor h(d.dims());
  gpu().download(d, h.span());
  gpu().synchronize();
  return h;
}
Tensor zeros(const Dims& dims) { return gpu().make_tensor(dims, Layout::kPlain); }

// A second backend on GPU 0 made with the given MT_CUDA_* switches set to 1 (read at creation).
std::unique_ptr<Backend> cuda_with(std::initializer_list<const char*> switches) {
  for (const char* v : switches) ::setenv(v, "1", 1);
  auto be = make_cuda_backend(0);
  for (const char* v : switches) ::unsetenv(v);
  return be;
}

// Bitwise equality of two runs' losses and parameters.
void check_same_bits(const test::StagedRun& got, const test::StagedRun& want, const std::string& what) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) {
    INFO(what << " step " << i + 1 << ": " << got.losses[i] << " vs " << want.losses[i]);
    CHECK(got.losses[i] == want.losses[i]);
  }
  const auto a = got.params.flat().span(), b = want.params.flat().span();
  REQUIRE(a.size() == b.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] ? 1 : 0;
  INFO(what << ": " << differ << " of " << a.size() << " parameters differ");
  CHECK(differ == 0);
}

}  // namespace

using mt::test::ConvCase;

int main(int argc, char** argv) {
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("SKIPPED: the CUDA backend tests need a GPU: %s\n", why.c_str());
    return 77;
  }
  std::printf("CUDA backend: %s\n", gpu().name().c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("cuda: conv2d forward, backward-data and backward-weights match the reference", "[cuda]") {
  const auto c = GENERATE(ConvCase{2, 16, 16, 8, 3, 1}, ConvCase{3, 16, 32, 8, 3, 2},
                          ConvCase{2, 32, 64, 6, 1, 2}, ConvCase{2, 3, 16, 7, 7, 1},
                          ConvCase{1, 32, 32, 5, 3, 1}, ConvCase{2, 16, 32, 9, 1, 2},
                          // ResNet-32's shapes at a reference-friendly batch.
                          ConvCase{8, 3, 16, 32, 3, 1}, ConvCase{8, 16, 16, 32, 3, 1},
                          ConvCase{8, 16, 32, 32, 3, 2}, ConvCase{8, 64, 64, 8, 3, 1});
  const std::uint64_t seed = 1000 + c.ci * 7 + c.co + c.k * 3 + c.stride + c.n;
  INFO("seed " << seed << " n=" << c.n << " ci=" << c.ci << " co=" << c.co << " hw=" << c.hw
               << " k=" << c.k << " stride=" << c.stride);
  Rng rng(seed);
  auto r = test::conv_reference(c, rng);
  const ConvSpec& s = r.spec;
  const Tensor &x = r.x, &w = r.w, &dy = r.dy;
  Tensor &y_ref = r.y, &dx_ref = r.dx, &dw_ref = r.dw;

  auto op = gpu().make_conv(s, x.dims(), Layout::kPlain, Layout::kPlain);
  Tensor dx_ = up(x), dw_ = up(w), ddy = up(dy);
  Tensor y = zeros(y_ref.dims()), dx = zeros(x.dims()), dw = zeros(w.dims());
  op->forward(dx_, dw_, y);
  op->backward_data(ddy, dw_, dx);
  op->backward_weights(dx_, ddy, dw);
  MT_CHECK_CLOSE(down(y), y_ref, tol(1e-5));
  MT_CHECK_CLOSE(down(dx), dx_ref, tol(1e-5));
  MT_CHECK_CLOSE(down(dw), dw_ref, tol(1e-5));
  // Algorithms and workspace are reused: new weights, same op, still right.
  Tensor w2 = random_tensor(w.dims(), rng, 0.2f);
  ref::conv2d_forward(s, x, w2, y_ref);
  Tensor dw2 = up(w2);
  op->forward(dx_, dw2, y);
  MT_CHECK_CLOSE(down(y), y_ref, tol(1e-5));
  // A second op of the same shape (the algorithm cache) agrees bit for bit.
  auto op2 = gpu().make_conv(s, x.dims(), Layout::kPlain, Layout::kPlain);
  Tensor y2 = zeros(y_ref.dims());
  op2->forward(dx_, dw2, y2);
  MT_CHECK_CLOSE(down(y2), down(y), 0.0);
}

TEST_CASE("cuda: batch norm training, inference and backward match the reference", "[cuda]") {
  const auto relu = GENERATE(false, true);
  const auto shape = GENERATE(Dims{4, 16, 8, 8}, Dims{2, 32, 5, 5}, Dims{8, 64, 4, 4},
                              Dims{128, 16, 32, 32}, Dims{3, 7, 1, 1});
  const auto offset = GENERATE(0.5f, 100.0f);  // a large mean tests the variance's cancellation
  const std::uint64_t seed = 77 + shape[1] + relu;
  INFO("seed " << seed << " shape " << dims_to_string(shape) << " relu " << relu << " offset " << offset);
  Rng rng(seed);
  const float eps = 1e-5f;
  const std::int64_t C = shape[1];
  auto r = test::bn_reference(shape, relu, eps, offset, rng);
  const Tensor &x = r.x, &gamma = r.gamma, &beta = r.beta, &dy = r.dy;
  const Tensor &y_ref = r.y, &mean_ref = r.mean, &var_ref = r.var, &dx_ref = r.dx, &dg_ref = r.dg, &db_ref = r.db;

  auto op = gpu().make_batchnorm(shape, Layout::kPlain, eps, relu);
  Tensor gx = up(x), gg = up(gamma), gb = up(beta), gdy = up(dy);
  Tensor y = zeros(shape), mean = zeros({C}), var = zeros({C}), dx = zeros(shape), dg = zeros({C}),
         db = zeros({C});
  op->forward_training(gx, gg, gb, y, mean, var);
  MT_CHECK_CLOSE(down(mean), mean_ref, 1e-6);
  MT_CHECK_CLOSE(down(var), var_ref, 1e-5);
  MT_CHECK_CLOSE(down(y), y_ref, 1e-4);
  op->backward(gx, y, gdy, gg, mean, var, dx, dg, db);
  MT_CHECK_CLOSE(down(dx), dx_ref, 1e-4);
  MT_CHECK_CLOSE(down(dg), dg_ref, 1e-4);
  MT_CHECK_CLOSE(down(db), db_ref, 1e-5);

  Tensor rm = random_tensor({C}, rng, 0.1f), rv = random_tensor({C}, rng, 0.1f);
  for (auto& v : rm.span()) v += offset;
  for (auto& v : rv.span()) v = std::fabs(v) + 0.5f;
  Tensor yi_ref(shape), yi = zeros(shape);
  ref::batchnorm_forward_inference(x, gamma, beta, rm, rv, eps, relu, yi_ref);
  op->forward_inference(gx, gg, gb, up(rm), up(rv), yi);
  MT_CHECK_CLOSE(down(yi), yi_ref, 1e-4);
}

TEST_CASE("cuda: element-wise ops and the option-A shortcut match the reference exactly", "[cuda]") {
  const auto shape = GENERATE(Dims{2, 16, 4, 4}, Dims{3, 32, 3, 5}, Dims{128, 16, 32, 32});
  Rng rng(5);
  INFO("seed 5 shape " << dims_to_string(shape));
  Tensor a = random_tensor(shape, rng), b = random_tensor(shape, rng), g = random_tensor(shape, rng);
  Tensor ga = up(a), gb = up(b), gg = up(g), out = zeros(shape);
  Tensor want(shape);
  ref::relu_forward(a, want);
  gpu().relu_forward(ga, out);
  MT_CHECK_CLOSE(down(out), want, 0.0);
  ref::relu_backward(a, g, want);
  gpu().relu_backward(ga, gg, out);
  MT_CHECK_CLOSE(down(out), want, 0.0);
  ref::add(a, b, want);
  gpu().add(ga, gb, out);
  MT_CHECK_CLOSE(down(out), want, 0.0);
  ref::add_relu(a, b, want);
  gpu().add_relu(ga, gb, out);
  MT_CHECK_CLOSE(down(out), want, 0.0);
  gpu().add_relu(ga, gb, ga);  // in place, as the network uses it
  MT_CHECK_CLOSE(down(ga), want, 0.0);

  if (shape[2] % 2 == 0 && shape[3] % 2 == 0) {
    const Dims outd{shape[0], shape[1] * 2, shape[2] / 2, shape[3] / 2};
    Tensor dy = random_tensor(outd, rng), y_ref(outd), dx_ref(shape);
    ref::pad_shortcut_forward(a, 2, y_ref);
    ref::pad_shortcut_backward(dy, 2, dx_ref);
    Tensor y = zeros(outd), dx = zeros(shape), gdy = up(dy);
    gpu().pad_shortcut_forward(up(a), 2, y);
    MT_CHECK_CLOSE(down(y), y_ref, 0.0);
    gpu().pad_shortcut_backward(gdy, 2, dx);
    MT_CHECK_CLOSE(down(dx), dx_ref, 0.0);
    Tensor base = random_tensor(shape, rng), acc = up(base), sum(shape);
    gpu().pad_shortcut_backward_accumulate(gdy, 2, acc);
    ref::add(base, dx_ref, sum);
    MT_CHECK_CLOSE(down(acc), sum, 0.0);
  }
}

TEST_CASE("cuda: pooling, linear (cuBLAS), softmax cross-entropy match the reference", "[cuda]") {
  const int n = GENERATE(5, 128);
  Rng rng(21 + n);
  INFO("seed " << 21 + n << " batch " << n);
  const Dims xs{n, 64, 8, 8};
  Tensor x = random_tensor(xs, rng), dy = random_tensor({n, 64}, rng);
  Tensor y_ref({n, 64}), dx_ref(xs), y = zeros({n, 64}), dx = zeros(xs);
  ref::global_avg_pool_forward(x, y_ref);
  gpu().global_avg_pool_forward(up(x), y);
  MT_CHECK_CLOSE(down(y), y_ref, 1e-6);
  ref::global_avg_pool_backward(dy, dx_ref);
  gpu().global_avg_pool_backward(up(dy), dx);
  MT_CHECK_CLOSE(down(dx), dx_ref, 1e-6);

  Tensor w = random_tensor({10, 64}, rng, 0.3f), b = random_tensor({10}, rng);
  Tensor z_ref({n, 10}), z = zeros({n, 10});
  Tensor gy = up(y_ref), gw = up(w);
  ref::linear_forward(y_ref, w, b, z_ref);
  gpu().linear_forward(gy, gw, up(b), z);
  MT_CHECK_CLOSE(down(z), z_ref, tol(1e-5));
  Tensor dz = random_tensor({n, 10}, rng), gdz = up(dz);
  Tensor dxr({n, 64}), dwr({10, 64}), dbr({10});
  ref::linear_backward(y_ref, w, dz, dxr, dwr, dbr);
  Tensor dxg = zeros({n, 64}), dwg = zeros({10, 64}), dbg = zeros({10});
  gpu().linear_backward(gy, gw, gdz, dxg, dwg, dbg);
  MT_CHECK_CLOSE(down(dxg), dxr, tol(1e-5));
  MT_CHECK_CLOSE(down(dwg), dwr, tol(1e-5));
  MT_CHECK_CLOSE(down(dbg), dbr, 1e-6);
  Tensor none;  // dx not wanted
  gpu().linear_backward(gy, gw, gdz, none, dwg, dbg);
  MT_CHECK_CLOSE(down(dwg), dwr, tol(1e-5));

  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(10));
  Tensor g_ref({n, 10}), g = zeros({n, 10});
  int c_ref = 0, c = 0;
  const float l_ref = ref::softmax_cross_entropy(z_ref, labels, g_ref, c_ref);
  const float l = gpu().softmax_cross_entropy(up(z_ref), labels, g, c);
  CHECK(l == Approx(l_ref).epsilon(1e-6));
  CHECK(c == c_ref);
  MT_CHECK_CLOSE(down(g), g_ref, 1e-6);
  // Deferred: the results land at synchronize(), in call order, for several calls.
  float l1 = -1, l2 = -1;
  int c1 = -1, c2 = -1;
  Tensor gz = up(z_ref);
  gpu().softmax_cross_entropy_deferred(gz, labels, g, &l1, &c1);
  labels[0] = (labels[0] + 1) % 10;  // the labels may be reused at once
  gpu().softmax_cross_entropy_deferred(gz, labels, g, &l2, &c2);
  gpu().synchronize();
  CHECK(l1 == Approx(l_ref).epsilon(1e-6));
  CHECK(c1 == c_ref);
  CHECK(l2 != l1);
  labels[0] = 10;
  CHECK_THROWS_AS(gpu().softmax_cross_entropy(gz, labels, g, c), DataError);
}

TEST_CASE("cuda: SGD momentum and Nesterov updates match the reference", "[cuda]") {
  const bool nesterov = GENERATE(false, true);
  Rng rng(33);
  INFO("seed 33 nesterov " << nesterov);
  const std::int64_t n = 100003;
  Tensor p = random_tensor({n}, rng), gr = random_tensor({n}, rng), v = random_tensor({n}, rng, 0.1f);
  Tensor pr = p.clone(), vr = v.clone();
  const SgdSpec spec{0.05f, 0.9f, 1e-4f, nesterov};
  ref::sgd_update(pr.span(), gr.span(), vr.span(), spec);
  Tensor gp = up(p), gg = up(gr), gv = up(v);
  gpu().sgd_update(gp.span(), gg.span(), gv.span(), spec);
  MT_CHECK_CLOSE(down(gp), pr, 1e-6);
  MT_CHECK_CLOSE(down(gv), vr, 1e-6);
  // Out of place (the parameter server's form) leaves the source alone.
  Tensor gp2 = up(p), gv2 = up(v), out = zeros({n});
  gpu().sgd_update_to(gp2.span(), gg.span(), gv2.span(), out.span(), spec);
  MT_CHECK_CLOSE(down(out), pr, 1e-6);
  MT_CHECK_CLOSE(down(gp2), p, 0.0);
}

TEST_CASE("cuda: memory contract and misuse", "[cuda]") {
  Rng rng(3);
  Tensor h = random_tensor({1000}, rng);
  Tensor d = up(h);
  CHECK(d.on_device());
  CHECK(gpu().device_resident());
  Tensor back({1000});
  gpu().download(d, back.span());
  gpu().synchronize();
  MT_CHECK_CLOSE(back, h, 0.0);
  CHECK(d.view(10, {5}).on_device());
  // Host tensors passed to device ops, and host-only calls on device tensors, are errors.
  Tensor hy({1000});
  CHECK_THROWS_AS(gpu().relu_forward(h, hy), Error);
  CHECK_THROWS_AS(d.zero(), Error);
  CHECK_THROWS_AS(d.clone(), Error);
  // A GPU that does not exist is a configuration error (exit 3).
  CHECK_THROWS_AS(make_cuda_backend(cuda_device_count() + 3), DataError);
}

TEST_CASE("cuda: whole networks train like the CPU backend and the golden trajectory", "[cuda]") {
  auto cpu = make_cpu_backend(0);
  SECTION("resnet8 matches the committed golden trajectory") {
    std::ifstream in(std::string(mt::test::source_dir()) + "/tests/golden/loss_trajectory_resnet8.txt");
    REQUIRE(in);
    std::vector<double> golden;
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') golden.push_back(std::stod(line));
    REQUIRE(golden.size() == 10);
    const auto got = test::trajectory(gpu(), *cpu, "resnet8", 8, 10, 7);
    for (std::size_t i = 0; i < golden.size(); ++i) {
      INFO("step " << i + 1 << " seed 7");
      CHECK(got[i] == Approx(golden[i]).epsilon(tol(2e-3)));
    }
  }
  SECTION("resnet32 and resnet32-t2t at batch 128 follow the CPU backend") {
    for (const char* model : {"resnet32", "resnet32-t2t"}) {
      const auto a = test::trajectory(gpu(), *cpu, model, 128, 6, 11);
      const auto b = test::trajectory(*cpu, model, 128, 6, 11);
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO(model << " step " << i + 1 << " seed 11: cuda " << a[i] << " cpu " << b[i]);
        CHECK(a[i] == Approx(b[i]).epsilon(tol(2e-3)));
      }
      CHECK(a.back() < a.front());
    }
  }
  SECTION("evaluation with running statistics agrees with the CPU backend") {
    const Model model(parse_model("resnet20"));
    FlatTensors params(model.params()), stats(model.stats());
    model.init_params(params, stats, 5);
    Rng rng(6);
    for (auto& v : stats.span()) v = std::fabs(v) + 0.1f * float(rng.uniform());
    Tensor images = random_tensor({64, 3, 32, 32}, rng);
    std::vector<std::int32_t> labels(64);
    for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(10));
    Network on_gpu(model, gpu(), 64), on_cpu(model, *cpu, 64);
    const StepStats g = on_gpu.evaluate(images, labels, 50, params, stats);
    const StepStats c = on_cpu.evaluate(images, labels, 50, params, stats);
    CHECK(g.loss == Approx(c.loss).epsilon(tol(1e-4)));
    CHECK(std::abs(g.correct - c.correct) <= (tf32() ? 2 : 0));
  }
}

// Runs on the default (fastest, timed) cuDNN algorithms differ in their last bits from run to
// run: some of those algorithms sum with atomics (the first H200 run saw parameters 1.5e-4 to
// 5e-4 apart after 6-8 steps). The equivalence checks below therefore run in the deterministic
// mode and ask for the same bits.
TEST_CASE("cuda: MT_CUDA_DETERMINISTIC=1 gives the same bits in two backends", "[cuda]") {
  auto a = cuda_with({"MT_CUDA_DETERMINISTIC"});
  auto b = cuda_with({"MT_CUDA_DETERMINISTIC"});
  CHECK(a->name().find("deterministic") != std::string::npos);
  CHECK(gpu().name().find("deterministic") == std::string::npos);
  auto cpu = make_cpu_backend(0);
  for (const char* model : {"resnet20", "resnet8-t2t"}) {
    const auto first = test::staged_trajectory(*a, *cpu, model, 128, 6, 29, false);
    const auto second = test::staged_trajectory(*b, *cpu, model, 128, 6, 29, false);
    check_same_bits(second, first, std::string(model) + " second backend");
    // And it still trains like the default algorithms, to rounding.
    const auto fastest = test::staged_trajectory(gpu(), *cpu, model, 128, 6, 29, false);
    for (std::size_t i = 0; i < fastest.losses.size(); ++i) {
      INFO(model << " step " << i + 1 << ": deterministic " << first.losses[i] << " fastest " << fastest.losses[i]);
      CHECK(first.losses[i] == Approx(fastest.losses[i]).epsilon(tol(2e-3)));
    }
  }
}

TEST_CASE("cuda: the next batch uploaded on the copy stream during a step trains like one uploaded at its start",
          "[cuda]") {
  auto det = cuda_with({"MT_CUDA_DETERMINISTIC"});
  auto cpu = make_cpu_backend(0);
  for (const char* model : {"resnet20", "resnet8-t2t"}) {
    const auto want = test::staged_trajectory(*det, *cpu, model, 128, 6, 31, false);
    const auto got = test::staged_trajectory(*det, *cpu, model, 128, 6, 31, true);
    CHECK(got.hook_calls == 6);
    check_same_bits(got, want, std::string(model) + " uploaded ahead vs at start");
    CHECK(want.losses[1] != want.losses[0]);
  }
}

TEST_CASE("cuda: training steps recorded as CUDA graphs (MT_CUDA_GRAPH=1) train like steps launched op by op",
          "[cuda]") {
  auto graphs = cuda_with({"MT_CUDA_GRAPH", "MT_CUDA_DETERMINISTIC"});
  auto op_by_op = cuda_with({"MT_CUDA_DETERMINISTIC"});
  REQUIRE(graphs->can_record());
  CHECK(graphs->name().find("graphs") != std::string::npos);
  CHECK_FALSE(gpu().can_record());
  CHECK_FALSE(op_by_op->can_record());
  auto cpu = make_cpu_backend(0);
  for (const char* model : {"resnet20", "resnet8-t2t"}) {
    const auto want = test::staged_trajectory(*op_by_op, *cpu, model, 128, 8, 37, true);
    const auto got = test::staged_trajectory(*graphs, *cpu, model, 128, 8, 37, true);
    check_same_bits(got, want, std::string(model) + " graph vs op by op");
  }
}
