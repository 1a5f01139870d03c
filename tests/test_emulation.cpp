// Device speed emulation (--emulate-device, --emulate-scale): the shipped table, table files, which
// device each process emulates, and the pacing of a step to its device's time.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "app/emulation.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace mt;

TEST_CASE("the shipped device table: the paper's step times, with sources", "[unit][emulation]") {
  const DeviceTable t = DeviceTable::shipped();
  CHECK(t.names() == std::vector<std::string>{"k80", "p100", "v100"});
  CHECK(t.at("k80").step_seconds == Approx(3.91 * 3600 / 64000).epsilon(0.01));
  CHECK(t.at("p100").step_seconds == Approx(1.50 * 3600 / 64000).epsilon(0.01));
  CHECK(t.at("v100").step_seconds == Approx(1.23 * 3600 / 64000).epsilon(0.01));
  const std::string text = DeviceTable::shipped_text();
  CHECK(text.find("ICAC'19 Table I") != std::string::npos);
  CHECK(text.find("assumption") != std::string::npos);  // the jitter is said to be one
  CHECK_THROWS_WITH(t.at("tpu"), Catch::Contains("no device 'tpu'") && Catch::Contains("k80, p100, v100"));
}

TEST_CASE("device table files: parsed, and bad lines named", "[unit][emulation]") {
  test::TempDir dir("emu_table");
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir.path() / name).string();
    std::ofstream(path) << text;
    return path;
  };
  const DeviceTable t = DeviceTable::from_file(write("ok.txt", "name step jitter\n# mine\nt4, 0.15, 0.1\na100 0.03\n"));
  CHECK(t.names() == std::vector<std::string>{"a100", "t4"});
  CHECK(t.at("t4").step_seconds == 0.15);
  CHECK(t.at("t4").jitter_cv == 0.1);
  CHECK(t.at("a100").jitter_cv == 0);
  CHECK_THROWS_WITH(DeviceTable::from_file(write("b1.txt", "t4 fast\n")), Catch::Contains("line 1") && Catch::Contains("'fast'"));
  CHECK_THROWS_WITH(DeviceTable::from_file(write("b2.txt", "\nt4 0\n")), Catch::Contains("line 2") && Catch::Contains("above 0"));
  CHECK_THROWS_WITH(DeviceTable::from_file(write("b3.txt", "t4 1\nt4 2\n")), Catch::Contains("listed twice"));
  CHECK_THROWS_WITH(DeviceTable::from_file(write("b4.txt", "# nothing\n")), Catch::Contains("no devices"));
  CHECK_THROWS_AS(DeviceTable::from_file((dir.path() / "missing.txt").string()), DataError);
}

TEST_CASE("which device each process emulates", "[unit][emulation]") {
  TrainConfig cfg;
  const std::vector<std::string> types{"k80", "p100", "v100"};
  CHECK_FALSE(emulations(cfg, types)[0].on());  // off by default
  CHECK(describe(emulations(cfg, types)).empty());
  cfg.emulate_device = "p100";
  cfg.emulate_scale = 0.5;
  auto e = emulations(cfg, types);
  for (const auto& x : e) {
    CHECK(x.device == "p100");
    CHECK(x.step_seconds == Approx(0.042));
  }
  CHECK(describe(e) == "p100");
  cfg.emulate_device = "worker-types";
  e = emulations(cfg, types);
  CHECK(describe(e) == "k80,p100,v100");
  CHECK(e[2].step_seconds == Approx(0.0345));
  test::TempDir dir("emu_which");
  const std::string one = (dir.path() / "one.txt").string();
  std::ofstream(one) << "t4 0.2 0\n";
  cfg.emulate_device = one;
  e = emulations(cfg, types);
  CHECK(describe(e) == "t4");  // a table of one device: every worker
  CHECK(e[0].step_seconds == Approx(0.1));
  const std::string two = (dir.path() / "two.txt").string();
  std::ofstream(two) << "k80 0.3\np100 0.1\n";
  cfg.emulate_device = two;
  CHECK_THROWS_WITH(emulations(cfg, types), Catch::Contains("no device 'v100'") && Catch::Contains(two));
  cfg.emulate_device = "tpu";
  CHECK_THROWS_WITH(emulations(cfg, types), Catch::Contains("'tpu'") && Catch::Contains("worker-types"));
  cfg.emulate_device = "k80";
  cfg.emulate_scale = 0;
  CHECK_THROWS_AS(emulations(cfg, types), UsageError);
}

TEST_CASE("a paced step takes its emulated time when the real compute is faster", "[unit][emulation]") {
  // 40 steps of 20 ms with 2 ms of work each: never shorter than asked, and no more than the
  // sleep's wake-up later. (The 5% bound is checked where nothing else runs beside it:
  // tests/test_emulation_mpi.sh, serial; here other tests share the cores, under the sanitizers
  // too, and a wake-up can come a few ms late.)
  Emulation e{"k80", 0.020, 0, "shipped"};
  StepPacer pacer(e, 1);
  double total = 0;
  for (int i = 0; i < 40; ++i) {
    pacer.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const double s = pacer.finish();
    CHECK(s >= 0.020);
    total += s;
  }
  CHECK(total / 40 < 0.020 * 1.5);
  CHECK(pacer.steps() == 40);
  CHECK(pacer.slower_than_target() == 0);
  // Real compute slower than the device: not shortened, and counted.
  StepPacer slow(Emulation{"v100", 0.001, 0, "shipped"}, 1);
  slow.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(slow.finish() >= 0.005);
  CHECK(slow.slower_than_target() == 1);
  // Off: nothing added.
  StepPacer off(Emulation{}, 1);
  off.begin();
  CHECK(off.finish() < 0.005);
  CHECK(off.steps() == 0);
}

TEST_CASE("emulated jitter: mean 1, the table's spread, the same per seed", "[unit][emulation]") {
  const auto sample = [](std::uint64_t seed) {
    StepPacer p(Emulation{"x", 0.2, 0.1, "test"}, seed);
    std::vector<double> t;
    for (int i = 0; i < 4000; ++i) t.push_back(p.draw_target());
    return t;
  };
  const auto a = sample(pacer_seed(1, 2));
  double mean = 0, var = 0;
  for (double x : a) mean += x / double(a.size());
  for (double x : a) var += (x - mean) * (x - mean) / double(a.size());
  CHECK(mean == Approx(0.2).epsilon(0.01));
  CHECK(std::sqrt(var) / mean == Approx(0.1).epsilon(0.1));
  CHECK(sample(pacer_seed(1, 2)) == a);  // deterministic per seed
  CHECK(sample(pacer_seed(1, 3)) != a);  // each process its own
  StepPacer flat(Emulation{"x", 0.2, 0, "test"}, 1);
  CHECK(flat.draw_target() == 0.2);
}
