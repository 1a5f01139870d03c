// The device-memory contract of Backend (device_resident, make_tensor, upload, download,
// deferred loss) as Network and the optimizer use it, checked without a GPU: a fake device
// backend keeps "device" tensors in host memory marked on_device, refuses host tensors in its
// ops, and lets copies and the loss land only at synchronize(). Whole networks on it must match
// the CPU backend it wraps bit for bit, with host-staged and with device-resident parameters.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "app/device.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "test_trajectory.hpp"
#include "test_util.hpp"

using namespace mt;

namespace {

// A host view of a fake-device tensor, for the wrapped backend.
Tensor host(const Tensor& t) {
  REQUIRE(t.on_device());
  return Tensor::adopt(t.dims(), t.layout(), std::shared_ptr<float>(std::shared_ptr<void>{}, const_cast<float*>(t.data())),
                       false);
}

class FakeConv final : public ConvOp {
 public:
  explicit FakeConv(std::unique_ptr<ConvOp> op) : op_(std::move(op)) {}
  void forward(const Tensor& x, const Tensor& w, Tensor& y) override {
    Tensor hy = host(y);
    op_->forward(host(x), host(w), hy);
  }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    Tensor h = host(dx);
    op_->backward_data(host(dy), host(w), h);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw) override {
    Tensor h = host(dw);
    op_->backward_weights(host(x), host(dy), h);
  }

 private:
  std::unique_ptr<ConvOp> op_;
};

class FakeBn final : public BatchNormOp {
 public:
  explicit FakeBn(std::unique_ptr<BatchNormOp> op) : op_(std::move(op)) {}
  void forward_training(const Tensor& x, const Tensor& g, const Tensor& b, Tensor& y, Tensor& m,
                        Tensor& v) override {
    Tensor hy = host(y), hm = host(m), hv = host(v);
    op_->forward_training(host(x), host(g), host(b), hy, hm, hv);
  }
  void forward_inference(const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& m,
                         const Tensor& v, Tensor& y) override {
    Tensor hy = host(y);
    op_->forward_inference(host(x), host(g), host(b), host(m), host(v), hy);
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& g, const Tensor& m,
                const Tensor& v, Tensor& dx, Tensor& dg, Tensor& db) override {
    Tensor hdx = host(dx), hdg = host(dg), hdb = host(db);
    op_->backward(host(x), host(y), host(dy), host(g), host(m), host(v), hdx, hdg, hdb);
  }

 private:
  std::unique_ptr<BatchNormOp> op_;
};

class FakeDevice final : public Backend {
 public:
  // `recording`: records work as a CUDA graph capture would: record() runs nothing, replay()
  // runs the captured work again, on whatever the tensors hold then.
  explicit FakeDevice(Backend& inner, bool recording = false) : in_(inner), recording_(recording) {}
  class FakeRecording final : public Recording {
   public:
    FakeRecording(std::function<void()> work, int& replays) : work_(std::move(work)), replays_(replays) {}
    void replay() override {
      ++replays_;
      work_();
    }

   private:
    std::function<void()> work_;
    int& replays_;
  };
  bool can_record() const override { return recording_; }
  std::unique_ptr<Recording> record(const std::function<void()>& work) override {
    REQUIRE(recording_);
    ++records;
    return std::make_unique<FakeRecording>(work, replays);
  }
  std::string name() const override { return "fake-device"; }
  Layout activation_layout() const override { return in_.activation_layout(); }
  bool device_resident() const override { return true; }
  Tensor make_tensor(Dims dims, Layout layout) override {
    const std::int64_t n = Tensor::storage_size(dims, layout);  // host storage, zeroed
    auto buf = std::make_shared<std::vector<float>>(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
    std::shared_ptr<float> storage(buf, buf->data());
    ++allocations;
    return Tensor::adopt(std::move(dims), layout, std::move(storage), true);
  }
  void upload(std::span<const float> h, Tensor& dst) override {
    REQUIRE(dst.on_device());
    std::memcpy(dst.data(), h.data(), h.size_bytes());  // the host buffer may be reused at once
    ++uploads;
  }
  void upload_ahead(std::span<const float> h, Tensor& dst) override {
    REQUIRE(dst.on_device());
    // Taken from `h` now (a pinned copy), lands at the next upload_fence() or synchronize():
    // ops that run before the fence see the old values, as a copy still in flight would give.
    auto copy = std::make_shared<std::vector<float>>(h.begin(), h.end());
    float* to = dst.data();
    ahead.push_back([copy, to] { std::copy(copy->begin(), copy->end(), to); });
    ++uploads;
    ++uploads_ahead;
  }
  void upload_fence() override {
    for (auto& f : ahead) f();
    ahead.clear();
    ++fences;
  }
  void download(const Tensor& src, std::span<float> h) override {
    REQUIRE(src.on_device());
    // Lands at synchronize(), from the values the tensor has then (as a queued copy would).
    pending.push_back([&src = src, h] { std::memcpy(h.data(), src.data(), h.size_bytes()); });
    ++downloads;
  }
  void softmax_cross_entropy_deferred(const Tensor& logits, std::span<const std::int32_t> labels,
                                      Tensor& dlogits, float* loss, int* correct) override {
    Tensor hd = host(dlogits);
    int c = 0;
    const float l = in_.softmax_cross_entropy(host(logits), labels, hd, c);
    pending.push_back([=] {
      *loss = l;
      *correct = c;
    });
  }
  float softmax_cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels, Tensor& d,
                              int& correct) override {
    Tensor hd = host(d);
    return in_.softmax_cross_entropy(host(logits), labels, hd, correct);
  }
  void synchronize() override {
    for (auto& f : ahead) f();
    ahead.clear();
    for (auto& f : pending) f();
    pending.clear();
  }
  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s, const Dims& d, Layout xl, Layout yl) override {
    return std::make_unique<FakeConv>(in_.make_conv(s, d, xl, yl));
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const Dims& d, Layout l, float eps, bool relu) override {
    return std::make_unique<FakeBn>(in_.make_batchnorm(d, l, eps, relu));
  }
  void relu_forward(const Tensor& x, Tensor& y) override {
    Tensor hy = host(y);
    in_.relu_forward(host(x), hy);
  }
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    Tensor h = host(dx);
    in_.relu_backward(host(y), host(dy), h);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    Tensor h = host(y);
    in_.add(host(a), host(b), h);
  }
  void add_relu(const Tensor& a, const Tensor& b, Tensor& y) override {
    Tensor h = host(y);
    in_.add_relu(host(a), host(b), h);
  }
  void pad_shortcut_forward(const Tensor& x, int s, Tensor& y) override {
    Tensor h = host(y);
    in_.pad_shortcut_forward(host(x), s, h);
  }
  void pad_shortcut_backward(const Tensor& dy, int s, Tensor& dx) override {
    Tensor h = host(dx);
    in_.pad_shortcut_backward(host(dy), s, h);
  }
  void pad_shortcut_backward_accumulate(const Tensor& dy, int s, Tensor& dx) override {
    Tensor h = host(dx);
    in_.pad_shortcut_backward_accumulate(host(dy), s, h);
  }
  void global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    Tensor h = host(y);
    in_.global_avg_pool_forward(host(x), h);
  }
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    Tensor h = host(dx);
    in_.global_avg_pool_backward(host(dy), h);
  }
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    Tensor h = host(y);
    in_.linear_forward(host(x), host(w), host(b), h);
  }
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db) override {
    Tensor hdx = dx.empty() ? Tensor() : host(dx), hdw = host(dw), hdb = host(db);
    in_.linear_backward(host(x), host(w), host(dy), hdx, hdw, hdb);
  }
  void sgd_update(std::span<float> p, std::span<const float> g, std::span<float> v, const SgdSpec& s) override {
    in_.sgd_update(p, g, v, s);
  }

  int allocations = 0, uploads = 0, downloads = 0, uploads_ahead = 0, fences = 0, records = 0, replays = 0;
  std::vector<std::function<void()>> pending, ahead;

 private:
  Backend& in_;
  bool recording_;
};

}  // namespace

TEST_CASE("Network on a device backend: host-staged parameters match the host backend exactly",
          "[unit][model][device]") {
  auto cpu = make_cpu_backend(2);
  FakeDevice dev(*cpu);
  for (const char* model : {"resnet8", "resnet8-t2t"}) {
    INFO(model << " seed 7");
    const auto want = test::trajectory(*cpu, model, 8, 4, 7);
    const auto got = test::trajectory(dev, *cpu, model, 8, 4, 7);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
  }
  CHECK(dev.pending.empty());  // train_step ends with synchronize()
  // Each step uploads the images and the parameters, downloads gradients and statistics.
  CHECK(dev.uploads == 2 * 4 * 2);
  CHECK(dev.downloads == 2 * 4 * 2);
}

TEST_CASE("Network on a device backend: device-resident parameters, SGD and evaluation",
          "[unit][model][device]") {
  auto cpu = make_cpu_backend(2);
  FakeDevice dev(*cpu);
  const Model model(parse_model("resnet8"));
  const auto total = model.params().total();
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()), bstats(model.stats());
  model.init_params(params, stats, 3);
  // The host run.
  FlatTensors p2(model.params()), s2(model.stats());
  model.init_params(p2, s2, 3);
  Sgd sgd(model.params(), SgdConfig{0.9f, 1e-4f, false});
  Network net_host(model, *cpu, 8);
  // The device run: parameters, gradients and momentum in device memory (as train.cpp does).
  FlatTensors dparams(model.params(), dev.make_tensor(Dims{total}, Layout::kPlain));
  FlatTensors dgrads(model.params(), dev.make_tensor(Dims{total}, Layout::kPlain));
  Sgd dsgd(model.params(), SgdConfig{0.9f, 1e-4f, false}, dev);
  CHECK(dsgd.velocity().flat().on_device());
  dev.upload(params.span(), dparams.flat());
  Network net_dev(model, dev, 8);
  Rng rng(4);
  Tensor images = test::random_tensor({8, 3, 32, 32}, rng);
  std::vector<std::int32_t> labels(8);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(10));
  const int uploads_before = dev.uploads;
  for (int s = 0; s < 3; ++s) {
    const StepStats a = net_host.train_step(images, labels, p2, grads, bstats);
    model.update_running_stats(s2, bstats, net_host.bn_counts());
    sgd.step(*cpu, p2, grads, 0.05f);
    const StepStats b = net_dev.train_step(images, labels, dparams, dgrads, bstats);
    model.update_running_stats(stats, bstats, net_dev.bn_counts());
    dsgd.step(dev, dparams, dgrads, 0.05f);
    CHECK(a.loss == b.loss);
    CHECK(a.correct == b.correct);
  }
  CHECK(dev.uploads - uploads_before == 3);  // the images only
  // Back to the host: identical parameters and momentum.
  dev.download(dparams.flat(), params.span());
  FlatTensors vel(model.params());
  dev.download(dsgd.velocity().flat(), vel.span());
  dev.synchronize();
  MT_CHECK_CLOSE(params.flat(), p2.flat(), 0.0);
  MT_CHECK_CLOSE(vel.flat(), sgd.velocity().flat(), 0.0);
  // Evaluation from device parameters and host running statistics.
  const StepStats e1 = net_host.evaluate(images, labels, 6, p2, s2);
  const StepStats e2 = net_dev.evaluate(images, labels, 6, dparams, stats);
  CHECK(e1.loss == e2.loss);
  CHECK(e1.correct == e2.correct);
}

TEST_CASE("Network: the next batch staged while a step runs trains exactly like one staged at its start",
          "[unit][model][device]") {
  auto cpu = make_cpu_backend(2);
  FakeDevice dev(*cpu);
  for (const char* model : {"resnet8", "resnet8-t2t"}) {
    INFO(model << " seed 21");
    const auto want = test::staged_trajectory(*cpu, *cpu, model, 8, 5, 21, false);
    for (Backend* be : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(&dev)}) {
      INFO(be->name());
      const auto got = test::staged_trajectory(*be, *cpu, model, 8, 5, 21, true);
      CHECK(got.hook_calls == 5);
      REQUIRE(got.losses.size() == want.losses.size());
      for (std::size_t i = 0; i < want.losses.size(); ++i) CHECK(got.losses[i] == want.losses[i]);
      MT_CHECK_CLOSE(got.params.flat(), want.params.flat(), 0.0);
    }
    // Distinct batches: a step that read the previous batch's images would not match this.
    CHECK(want.losses[1] != want.losses[0]);
  }
  // Every training batch went through the copy queue, each step behind one fence.
  CHECK(dev.uploads_ahead == 2 * 5);
  CHECK(dev.fences == 2 * 5);
  CHECK(dev.ahead.empty());
}

TEST_CASE("Network: recorded training steps (as CUDA graphs) train exactly like steps run op by op",
          "[unit][model][device]") {
  auto cpu = make_cpu_backend(2);
  for (const char* model : {"resnet8", "resnet8-t2t"}) {
    INFO(model << " seed 23");
    const auto want = test::staged_trajectory(*cpu, *cpu, model, 8, 6, 23, false);
    FakeDevice dev(*cpu, /*recording=*/true);
    const auto got = test::staged_trajectory(dev, *cpu, model, 8, 6, 23, true);
    REQUIRE(got.losses.size() == want.losses.size());
    for (std::size_t i = 0; i < want.losses.size(); ++i) CHECK(got.losses[i] == want.losses[i]);
    MT_CHECK_CLOSE(got.params.flat(), want.params.flat(), 0.0);
    // Two image slots: each set of buffers runs once as is, then records once and replays.
    CHECK(dev.records == 2);
    CHECK(dev.replays == 6 - 2);
  }
  SECTION("labels are checked on the host before they reach recorded work") {
    FakeDevice dev(*cpu, true);
    const Model model(parse_model("resnet8"));
    FlatTensors params(model.params()), stats(model.stats()), grads(model.params()), bstats(model.stats());
    model.init_params(params, stats, 2);
    Network net(model, dev, 4);
    Rng rng(8);
    const Tensor images = test::random_tensor({4, 3, 32, 32}, rng);
    std::vector<std::int32_t> labels{0, 9, 10, 1};
    CHECK_THROWS_AS(net.train_step(images, labels, params, grads, bstats), DataError);
    labels[2] = -1;
    CHECK_THROWS_AS(net.train_step(images, labels, params, grads, bstats), DataError);
  }
}

TEST_CASE("Network: staging misuse is an internal error, not a race", "[unit][model][device]") {
  auto cpu = make_cpu_backend(1);
  FakeDevice dev(*cpu);
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()), bstats(model.stats());
  model.init_params(params, stats, 2);
  Network net(model, dev, 4);
  Rng rng(5);
  Tensor a = test::random_tensor({4, 3, 32, 32}, rng), b = test::random_tensor({4, 3, 32, 32}, rng);
  std::vector<std::int32_t> labels{1, 2, 3, 4};
  const auto first = net.stage_images(a);
  // A second batch staged beside the running step would have to overwrite a buffer in use.
  CHECK_THROWS_AS(net.train_step(first, labels, params, grads, bstats,
                                 [&] {
                                   (void)net.stage_images(b);
                                   (void)net.stage_images(b);
                                 }),
                  Error);
  // The step that failed left no slot marked running: staging works again.
  const auto x = net.stage_images(a);
  net.train_step(x, labels, params, grads, bstats);
  // A staged batch is consumed once.
  CHECK_THROWS_AS(net.train_step(x, labels, params, grads, bstats), Error);
  // Wrong shapes and unstaged handles.
  CHECK_THROWS_AS(net.stage_images(Tensor({2, 3, 32, 32})), Error);
  CHECK_THROWS_AS(net.train_step(Network::StagedImages{}, labels, params, grads, bstats), Error);
}

TEST_CASE("device tensors refuse host-only calls; views keep the mark", "[unit][device]") {
  auto cpu = make_cpu_backend(1);
  FakeDevice dev(*cpu);
  Tensor d = dev.make_tensor({4, 16, 2, 2}, Layout::kPlain);
  CHECK(d.on_device());
  CHECK(d.view(0, {16}).on_device());
  CHECK_THROWS_AS(d.zero(), Error);
  CHECK_THROWS_AS(d.fill(1.f), Error);
  CHECK_THROWS_AS(d.clone(), Error);
  Tensor h({4, 16, 2, 2});
  CHECK_THROWS_AS(convert_layout(d, h), Error);
  CHECK_FALSE(Tensor({3}).on_device());
  CHECK_THROWS_AS(FlatTensors(Model(parse_model("resnet8")).params(), Tensor({5})), Error);
}

TEST_CASE("device choice: auto without a GPU is the CPU; local ranks pick GPUs", "[unit][device]") {
  const bool gpu = resolve_device("auto").name == "cuda";
  if (!gpu) CHECK(resolve_device("auto").note.find("no GPU") != std::string::npos);
  CHECK(resolve_device("cpu").name == "cpu");
  CHECK_THROWS_AS(resolve_device("tpu"), UsageError);
  ::unsetenv("MPI_LOCALRANKID");
  ::unsetenv("SLURM_LOCALID");
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  CHECK(local_rank() == 3);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ::setenv("SLURM_LOCALID", "2", 1);
  CHECK(local_rank() == 2);
  ::setenv("SLURM_LOCALID", "x", 1);
  CHECK(local_rank() == 0);
  ::unsetenv("SLURM_LOCALID");
  CHECK(local_rank() == 0);
}
