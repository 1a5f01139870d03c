// Model contracts (exact parameter counts, names), whole-network agreement between the CPU
// backend and the reference backend, the committed 10-step loss trajectory, and learning.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/train.hpp"
#include "backend/backend.hpp"
#include "backend/reference/reference.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "test_trajectory.hpp"
#include "test_util.hpp"

using namespace mt;
using mt::test::trajectory;

TEST_CASE("parameter counts are exact", "[unit][model]") {
  CHECK(Model(parse_model("resnet32")).param_count() == 464154);
  const Model t2t(parse_model("resnet32-t2t"));
  CHECK(t2t.param_count() == 1857722);
  std::int64_t stats = 0;
  for (const auto& e : t2t.stats().entries()) stats += e.size;
  CHECK(stats == 4736);
  // Parameters, momentum and BN statistics in float32, as docs/architecture.md ("Models") states: 14.19 MiB.
  CHECK(double((t2t.param_count() * 2 + stats) * 4) / (1024 * 1024) == Approx(14.19).margin(0.005));
  CHECK(Model(parse_model("resnet20")).param_count() == 269722);  // 464,154 less 2 blocks per stage
  CHECK(Model(parse_model("resnet56")).param_count() == 853018);
}

TEST_CASE("parameter names are HDF5-style paths", "[unit][model]") {
  const Model m(parse_model("resnet32"));
  CHECK(m.params().find("stem.conv.weight") >= 0);
  CHECK(m.params().find("stage2.block3.conv1.weight") >= 0);
  CHECK(m.params().find("stage3.block5.bn2.beta") >= 0);
  CHECK(m.params().find("fc.bias") >= 0);
  CHECK(m.stats().find("stage1.block1.bn1.running_var") >= 0);
  const Model t(parse_model("resnet32-t2t"));
  CHECK(t.params().find("stage2.block1.shortcut.conv.weight") >= 0);
  CHECK(t.params().find("stage1.block1.bn_in.gamma") >= 0);
  CHECK(t.params().at(t.params().find("stem.conv.weight")).dims == Dims{16, 3, 7, 7});
}

TEST_CASE("bad model names are usage errors that list the choices", "[unit][model]") {
  for (const char* bad : {"resnet33", "vgg16", "resnet32-t2", "", "resnet2"}) {
    INFO(bad);
    try {
      parse_model(bad);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find("resnet32-t2t") != std::string::npos);
    }
  }
}

TEST_CASE("learning-rate schedules follow the recipes", "[unit][model]") {
  const auto step = parse_schedule("default", false, 0);
  CHECK(step.lr_at(0) == Approx(0.1));
  CHECK(step.lr_at(31999) == Approx(0.1));
  CHECK(step.lr_at(32000) == Approx(0.01));
  CHECK(step.lr_at(48000) == Approx(0.001));
  const auto cos = parse_schedule("default", true, 0);
  CHECK(cos.lr_at(0) == Approx(0.4 / 100));
  CHECK(cos.lr_at(99) == Approx(0.4 * 0.5 * (1 + std::cos(M_PI * 99 / 120000.0))));
  CHECK(cos.lr_at(60000) == Approx(0.2).margin(1e-6));
  CHECK(cos.lr_at(120000) == Approx(0.0).margin(1e-9));
  // The defaults are the recipes' at their 64,000 steps, scaled in proportion to other lengths
  // (issue 62): boundaries at half and three quarters of the run, cosine over 1.875 runs.
  const auto short_step = parse_schedule("default", false, 0, -1, 200);
  CHECK(short_step.boundaries == std::vector<std::int64_t>{100, 150});
  CHECK(short_step.lr_at(99) == Approx(0.1));
  CHECK(short_step.lr_at(100) == Approx(0.01));
  CHECK(short_step.lr_at(150) == Approx(0.001));
  CHECK(short_step.scaled);
  CHECK(short_step.flag() == "step:100,150");
  CHECK(parse_schedule("cosine", false, 0, -1, 200).decay_steps == 375);
  CHECK(parse_schedule("default", false, 0, -1, 1).boundaries == std::vector<std::int64_t>{1, 1});
  // Given boundaries or decay are the run's whatever its length.
  const auto fixed = parse_schedule("step:10,20", false, 0, -1, 200);
  CHECK(fixed.boundaries == std::vector<std::int64_t>{10, 20});
  CHECK_FALSE(fixed.scaled);
  CHECK(parse_schedule("cosine:500", false, 0, -1, 200).decay_steps == 500);
  // A checkpoint records a scaled schedule by its proportions: the same job at any length.
  CHECK(short_step.identity() == parse_schedule("step", false, 0, -1, 400).identity());
  CHECK(short_step.identity() != short_step.describe());
  CHECK(fixed.identity() == fixed.describe());
  CHECK(parse_schedule("step:10,20", false, 0.5).lr_at(15) == Approx(0.05));
  CHECK(parse_schedule("constant", false, 0.3).lr_at(100000) == Approx(0.3));
  CHECK_THROWS_AS(parse_schedule("linear", false, 0), UsageError);
  CHECK_THROWS_AS(parse_schedule("step:10,x", false, 0), UsageError);
  // --lr-warmup-steps: linear warm-up on any schedule; 0 turns cosine's own off.
  const auto warm = parse_schedule("step:10", false, 0.2, 4);
  CHECK(warm.lr_at(0) == Approx(0.05));
  CHECK(warm.lr_at(2) == Approx(0.15));
  CHECK(warm.lr_at(3) == Approx(0.2));
  CHECK(warm.lr_at(10) == Approx(0.02));
  CHECK(parse_schedule("default", false, 0).warmup_steps == 0);
  CHECK(parse_schedule("default", true, 0, 0).lr_at(0) == Approx(0.4));
}

namespace {

std::vector<double> read_golden(const std::string& file) {
  std::ifstream in(std::string(mt::test::source_dir()) + "/tests/golden/" + file);
  REQUIRE(in);
  std::vector<double> v;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    v.push_back(std::stod(line));
  }
  return v;
}

}  // namespace

TEST_CASE("fixed-seed 10-step loss trajectory matches the committed golden values",
          "[unit][model]") {
  // tests/golden/loss_trajectory_resnet8.txt says how the values were produced.
  const auto golden = read_golden("loss_trajectory_resnet8.txt");
  REQUIRE(golden.size() == 10);
  auto cpu = make_cpu_backend(2);
  const auto got = trajectory(*cpu, "resnet8", 8, 10, 7);
  for (std::size_t i = 0; i < golden.size(); ++i) {
    INFO("step " << i + 1 << " seed 7");
    CHECK(got[i] == Approx(golden[i]).epsilon(2e-3));
  }
  CHECK(got.back() < got.front());  // it learns the fixed batch
}

TEST_CASE("reference backend reproduces the golden trajectory (the golden's provenance)",
          "[unit][model][slow]") {
  const auto golden = read_golden("loss_trajectory_resnet8.txt");
  auto ref = make_reference_backend();
  const auto got = trajectory(*ref, "resnet8", 8, 10, 7);
  for (std::size_t i = 0; i < golden.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(got[i] == Approx(golden[i]).epsilon(1e-5));
  }
}

TEST_CASE("print the golden trajectory from the reference backend", "[.golden]") {
  auto ref = make_reference_backend();
  for (double v : trajectory(*ref, "resnet8", 8, 10, 7)) std::printf("golden %.9g\n", v);
}

TEST_CASE("CPU and reference backends agree on a pre-activation network", "[unit][model]") {
  auto cpu = make_cpu_backend(2);
  auto ref = make_reference_backend();
  const auto a = trajectory(*cpu, "resnet8-t2t", 4, 4, 11);
  const auto b = trajectory(*ref, "resnet8-t2t", 4, 4, 11);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << " seed 11");
    CHECK(a[i] == Approx(b[i]).epsilon(2e-3));
  }
}

TEST_CASE("training on generated CIFAR-format data learns within seconds", "[unit][model]") {
  test::TempDir dir("learn");
  write_synthetic_cifar10(dir.path(), 2048, 512, 3);
  TrainConfig cfg;
  cfg.data = dir.path().string();
  cfg.model = "resnet8";
  // 60 steps gave 58-97% over seeds 1-5 on one CPU (test accuracy is volatile that early);
  // 100 steps gave 95-100%.
  cfg.train_steps = 100;
  cfg.batch_size = 32;
  cfg.threads = 2;
  cfg.lr_schedule = "constant";
  cfg.lr = 0.05;
  cfg.augment = "off";
  cfg.quiet = true;
  cfg.device = "cpu";
  cfg.metrics = (dir.path() / "metrics.jsonl").string();
  std::ostringstream log;
  const TrainResult r = train(cfg, log);
  INFO("accuracy " << r.test_accuracy << " final loss " << r.final_train_loss);
  CHECK(r.global_step == 100);
  CHECK(r.test_accuracy > 0.8);          // chance is 0.1
  CHECK(r.final_train_loss < 1.5);       // starts near ln 10 = 2.3
  std::ifstream in(cfg.metrics);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const auto j = nlohmann::json::parse(last);
  CHECK(j["event"] == "summary");
  for (const char* key : {"global_step", "train_seconds", "test_accuracy", "cost_usd", "revocations",
                          "workers_start", "workers_end", "images_per_second"})
    CHECK(j.contains(key));
}
