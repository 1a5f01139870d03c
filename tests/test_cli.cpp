// The command line as a user meets it: exit codes and messages of the real executable.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "test_util.hpp"

namespace {

using mt::test::contains;
using mt::test::run;

}  // namespace

TEST_CASE("model-info prints the exact parameter counts", "[unit][cli]") {
  auto r = run("model-info --model resnet32");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "parameters: 464154\n"));
  r = run("model-info --model resnet32-t2t");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "parameters: 1857722\n"));
}

TEST_CASE("bad flags exit 2 with a helpful message", "[unit][cli]") {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const auto& c : {Case{"", "A subcommand is required"},
                        Case{"train --no-such-flag", "no-such-flag"},
                        Case{"train --train-steps 0", "--train-steps: must be greater than 0, not 0"},
                        Case{"train --lr -0.5", "--lr: must be 0 or more, not -0.5"},
                        Case{"train --eval-every-steps x", "--eval-every-steps: 'x' is not a number"},
                        Case{"train --batch-size -3", "--batch-size"},
                        Case{"train --device tpu", "--device"},
                        Case{"train --model vgg16", "unknown model 'vgg16'"},
                        Case{"train --lr-schedule linear", "unknown schedule"},
                        Case{"model-info --model resnet33", "6n+2"},
                        Case{"train --failure-timeout 0", "--failure-timeout"},
                        Case{"train --time-scale 0", "--time-scale"},
                        Case{"train --revoke rank=1@step=5", "need the parameter server"},
                        Case{"train --emulate-device tpu", "not a device of the shipped table (k80, p100, v100)"},
                        Case{"train --emulate-scale 0", "--emulate-scale: must be greater than 0"},
                        // Virtual-clock runs refuse what they cannot do, and bad link and join specs.
                        Case{"train --virtual-workers 2 --ckpt-dir /tmp/x", "keep no checkpoints"},
                        Case{"train --virtual-workers 2 --worker-links fast", "LATENCY_MS/GBIT_PER_S"},
                        Case{"train --virtual-workers 2 --worker-links 1/1,1/1,1/1", "3 links for 2 workers"},
                        Case{"train --virtual-workers 2 --virtual-joins k80", "TYPE@step=N"},
                        Case{"train --virtual-workers 2 --replace-workers", "does not simulate --replace-workers"},
                        Case{"train --virtual-workers 2 --virtual-joins tpu@step=5", "unknown instance type 'tpu'"},
                        Case{"train --virtual-workers 2 --revoke rank=5@step=3", "not a worker of this virtual run"},
                        Case{"train --virtual-workers 0", "--virtual-workers"},
                        Case{"frobnicate", "subcommand"},
                        // Issue 62: bounds, and what a mistyped flag or command most likely meant.
                        Case{"train --train-steps 99999999999999999999",
                             "--train-steps: must be at most 1000000000000 (10^12) steps, not 99999999999999999999"},
                        Case{"train --train-steps 2.5", "must be a whole number of steps, not 2.5"},
                        Case{"train --log-every-steps 0", "--log-every-steps: must be greater than 0, not 0"},
                        Case{"train --train-step 20", "unknown flag --train-step of 'train': did you mean --train-steps?"},
                        Case{"train --lr-shedule constant", "did you mean --lr-schedule?"},
                        Case{"trian", "unknown command 'trian' (did you mean 'train'?); the commands: train, join,"},
                        Case{"", "a command is needed: one of train, join, model-info"},
                        Case{"ckpt verfy x", "unknown 'ckpt' command 'verfy' (did you mean 'verify'?)"},
                        Case{"plan --steps 1e13", "--steps: must be at most 1000000000000"}}) {
    const auto r = run(c.args);
    INFO("args: " << c.args << "\noutput: " << r.output);
    CHECK(r.code == 2);
    CHECK(contains(r.output, c.says));
  }
  const auto r = run("train --train-steps 5", "MT_MODEL=resnet7");
  CHECK(r.code == 2);  // environment defaults are validated like flags
}

TEST_CASE("devices prints the emulation's device table with its sources", "[unit][cli]") {
  const auto r = run("devices");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "k80     0.220"));
  CHECK(contains(r.output, "ICAC'19 Table III: 1 V100"));
}

TEST_CASE("help documents every flag and the environment defaults", "[unit][cli]") {
  const auto r = run("train --help");
  CHECK(r.code == 0);
  for (const char* flag : {"--data", "--model", "--train-steps", "--batch-size", "--device", "--threads",
                           "--seed", "--lr-schedule", "--lr", "--metrics", "--eval-every-steps",
                           "--instance-type", "MT_TRAIN_STEPS"})
    CHECK(contains(r.output, flag));
  // The exit codes of core/error.hpp, each with its meaning, in the top-level help.
  const auto top = run("--help");
  CHECK(top.code == 0);
  for (const char* code : {"0 done", "1 internal error", "2 usage", "3 config/data error", "4 checkpoint error",
                           "10 parameter server lost", "11 a former parameter server", "75 stopped", "130 stopped"})
    CHECK(contains(top.output, code));
}

TEST_CASE("train --help: the flags in sections, basics first, wrapped to the terminal's width", "[unit][cli]") {
  // One section per concern, in the order a user needs them; no flag left in CLI11's catch-all.
  for (const char* columns : {"80", "132"}) {
    const auto r = run("train --help", std::string("COLUMNS=") + columns);
    REQUIRE(r.code == 0);
    std::size_t at = 0;
    for (const char* section : {"Basics:", "Data:", "Optimizer:", "Outputs:", "Checkpoints:", "Parameter server:",
                                "Fault tolerance:", "Elastic joins:", "Emulated devices and virtual runs:", "Cost:"}) {
      const std::size_t next = r.output.find(std::string("\n") + section, at);
      CHECK(next != std::string::npos);
      if (next != std::string::npos) at = next;
    }
    CHECK_FALSE(contains(r.output, "\nOptions:"));
    // Every line fits (an option's name column may be longer only when nothing follows it there).
    std::size_t longest = 0, start = 0;
    for (std::size_t end; (end = r.output.find('\n', start)) != std::string::npos; start = end + 1)
      longest = std::max(longest, end - start);
    CHECK(longest <= std::stoul(columns));
    // The flags stay where a user looks for them.
    const auto line_of = [&r](const char* flag) { return r.output.find(std::string("\n  ") + flag + " "); };
    CHECK(line_of("--train-steps") < r.output.find("\nData:"));
    CHECK(line_of("--ckpt-dir") > r.output.find("\nCheckpoints:"));
    CHECK(line_of("--ckpt-dir") < r.output.find("\nParameter server:"));
    CHECK(line_of("--failure-timeout") > r.output.find("\nFault tolerance:"));
    CHECK(line_of("--failure-timeout") < r.output.find("\nElastic joins:"));
  }
  // join shares train's flags and sections.
  const auto j = run("join --help", "COLUMNS=100");
  CHECK(j.code == 0);
  CHECK(contains(j.output, "\nFault tolerance:"));
}

TEST_CASE("data and device errors exit 3 and name the problem", "[unit][cli]") {
  auto r = run("train --data /nonexistent/mt-data --train-steps 1");
  CHECK(r.code == 3);
  CHECK(contains(r.output, "/nonexistent/mt-data"));

  mt::test::TempDir dir("cli_bad");
  std::ofstream(dir.path() / "data_batch_1.bin") << "short";
  r = run("train --train-steps 1 --data " + dir.path().string());
  CHECK(r.code == 3);

  r = run("train --data /etc/hostname --train-steps 1");  // a file where a directory belongs
  CHECK(r.code == 3);
  CHECK(contains(r.output, "data directory /etc/hostname is a file, not a directory"));

  r = run("train --device cuda --train-steps 1", "CUDA_VISIBLE_DEVICES=");
  CHECK(r.code == 3);
  CHECK(contains(r.output, "--device cuda"));
}

TEST_CASE("a checkpoint directory that cannot take files is refused before training, exit 3",
          "[unit][cli][fault]") {
  // Issue 17, defect 6: a read-only mount was found at the first checkpoint, after training.
  mt::test::TempDir dir("cli_ckpt_ro");
  const auto data = (dir.path() / "data").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  const std::string train = "train --model resnet8 --batch-size 32 --train-steps 4 --data " + data + " --ckpt-dir ";

  std::ofstream(dir.path() / "a-file") << "not a directory";
  auto r = run(train + (dir.path() / "a-file" / "ck").string());
  CHECK(r.code == 3);
  CHECK(contains(r.output, "--ckpt-dir: checkpoints cannot be written"));
  CHECK(contains(r.output, "cannot create the directory"));
  CHECK_FALSE(contains(r.output, "step "));

  // A read-only file system (a read-only tmpfs where mounting is allowed, as root in CI; else
  // sysfs, where no one may create files).
  const auto ro = dir.path() / "ro";
  std::filesystem::create_directories(ro);
  const bool mounted = std::system(("mount -t tmpfs -o ro,size=64k tmpfs " + ro.string() + " 2>/dev/null").c_str()) == 0;
  r = run(train + (mounted ? ro.string() : std::string("/sys/kernel")));
  if (mounted) CHECK(std::system(("umount " + ro.string()).c_str()) == 0);
  INFO("read-only directory: " << (mounted ? ro.string() : "/sys/kernel"));
  CHECK(r.code == 3);
  CHECK(contains(r.output, "cannot create a file in it"));
  CHECK_FALSE(contains(r.output, "step "));
}

TEST_CASE("a resume checks that it is the same job; --resume-override accepts a field, exit 4 otherwise",
          "[unit][cli][ckpt]") {
  // Issue 17, defect 7: a checkpoint trained at batch 8 on generated data resumed silently on
  // other data at batch 32.
  mt::test::TempDir dir("cli_same_job");
  const auto a = (dir.path() / "a").string(), b = (dir.path() / "b").string();
  REQUIRE(run("gen-data " + a + " --train 256 --test 64 --seed 1").code == 0);
  REQUIRE(run("gen-data " + b + " --train 256 --test 64 --seed 2").code == 0);
  const std::string train =
      "train --quiet --model resnet8 --ckpt-every-steps 4 --ckpt-dir " + (dir.path() / "ck").string() + " ";
  REQUIRE(run(train + "--batch-size 8 --data " + a + " --train-steps 8").code == 0);
  auto r = run(train + "--batch-size 32 --data " + a + " --train-steps 12");
  CHECK(r.code == 4);
  CHECK(contains(r.output, "is of another job: its batch_size is '8', this run's is '32'"));
  r = run(train + "--batch-size 8 --data " + b + " --train-steps 12");
  CHECK(r.code == 4);
  CHECK(contains(r.output, "its data is 'cifar10 train=256 test=64 fingerprint="));
  r = run(train + "--batch-size 8 --data " + a + " --train-steps 12 --lr-schedule cosine:12");
  CHECK(r.code == 4);
  CHECK(contains(r.output, "its lr_schedule is"));
  r = run(train + "--batch-size 8 --data " + b + " --train-steps 12 --resume-override data");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "as --resume-override asks"));
  r = run(train + "--batch-size 8 --data " + a + " --train-steps 16", "MT_RESUME_OVERRIDE=model");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "a checkpoint of another model cannot be resumed"));
  // Issue 62: fewer steps than the checkpoint's was a run that ended at once, "0.0 img/s".
  r = run(train + "--batch-size 8 --data " + b + " --train-steps 6 --resume-override data");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "--train-steps 6 ends before the checkpoint to resume"));
  CHECK(contains(r.output, "at global step 12: give --train-steps above 12 to train on from it"));
  CHECK_FALSE(contains(r.output, "img/s"));
}

TEST_CASE("the default schedule scales to --train-steps; a longer resume moves it and says so", "[unit][cli][ckpt]") {
  // Issue 62: a 200-step run kept the paper's boundaries at 32,000 and 48,000 steps.
  mt::test::TempDir dir("cli_scaled");
  const auto data = (dir.path() / "data").string(), ck = (dir.path() / "ck").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  const std::string train = "train --model resnet8 --batch-size 8 --ckpt-every-steps 4 --data " + data +
                            " --ckpt-dir " + ck + " --metrics " + (dir.path() / "m.jsonl").string() + " ";
  auto r = run(train + "--train-steps 8");
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "lr step 0.1 x0.1 at 4 6"));
  // The same job at another length: resumed, the boundaries at half and three quarters of 16.
  r = run(train + "--train-steps 16");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "resumed from"));
  CHECK(contains(r.output, "the learning-rate schedule is scaled to --train-steps 16 (the checkpoint's run had 8): "
                           "step 0.1 x0.1 at 8 12, was step 0.1 x0.1 at 4 6; --lr-schedule step:4,6 "
                           "--resume-override lr_schedule keeps the checkpoint's"));
  // Boundaries given are another job's (the checkpoint records the proportions).
  r = run(train + "--train-steps 20 --lr-schedule step:4,6");
  CHECK(r.code == 4);
  CHECK(contains(r.output, "its lr_schedule is 'step 0.1 x0.1 at 0.5 0.75 of the run'"));
  r = run(train + "--train-steps 20 --lr-schedule step:4,6 --resume-override lr_schedule");
  CHECK(r.code == 0);
}

TEST_CASE("a refused resume says why under --quiet too; settings that cannot matter are named", "[unit][cli]") {
  // Issue 62: --quiet hid the reasons a refused resume pointed to ("reasons above").
  mt::test::TempDir dir("cli_refused");
  const auto data = (dir.path() / "data").string(), ck = (dir.path() / "ck").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  const std::string train = "train --quiet --model resnet8 --batch-size 8 --data " + data + " ";
  REQUIRE(run(train + "--train-steps 4 --ckpt-dir " + ck).code == 0);
  for (const auto& f : std::filesystem::directory_iterator(ck))
    if (f.path().extension() == ".h5") std::filesystem::resize_file(f.path(), 100);  // every one damaged
  auto r = run(train + "--train-steps 8 --ckpt-dir " + ck);
  CHECK(r.code == 4);
  CHECK(contains(r.output, "checkpoints can be resumed; use another --ckpt-dir"));
  CHECK(contains(r.output, "ckpt-"));  // the reason, with the file it is about
  // One warning line each, the run goes on.
  r = run(train + "--train-steps 6 --lr-schedule step:3,10");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "warning: --lr-schedule's step boundary 10 is at or after the run's end (--train-steps 6)"));
  CHECK_FALSE(contains(r.output, "step boundary 3 "));
  r = run(train + "--train-steps 6 --lr-warmup-steps 6");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "warning: the warm-up of 6 steps (--lr-warmup-steps) lasts the whole run"));
  // Combinations that mislead: a CPU run billed as a GPU server, AWS prices with GCE's odds.
  r = run(train + "--train-steps 2 --device cpu --prices aws --pricing transient --instance-type v100");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "warning: this run trains on the CPU but bills its time as v100"));
  CHECK(contains(r.output, "warning: --prices aws with Compute Engine's revocation odds (gce, transient pricing's default)"));
  r = run(train + "--train-steps 2 --device cpu --emulate-device k80 --emulate-scale 0.01 --prices aws "
                  "--instance-type v100");
  CHECK(r.code == 0);
  CHECK_FALSE(contains(r.output, "bills its time"));
  CHECK_FALSE(contains(r.output, "revocation odds"));
}

TEST_CASE("a diverging single-process run stops with exit 3 before checkpointing its state", "[unit][cli]") {
  // Issue 17, bad input: --lr 1000 stopped only at a NaN loss (step 37), exit 1, after checkpoints
  // full of NaN were written.
  mt::test::TempDir dir("cli_diverge");
  const auto data = (dir.path() / "data").string(), ck = (dir.path() / "ck").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  auto r = run("train --model resnet8 --batch-size 16 --train-steps 200 --lr 1000 --ckpt-every-steps 2 --data " + data +
               " --ckpt-dir " + ck + " --log-every-steps 1000");
  CHECK(r.code == 3);
  CHECK(contains(r.output, "training diverged at global step "));
  CHECK(contains(r.output, "nothing of this state was checkpointed"));
  CHECK_FALSE(contains(r.output, "summary: {"));
  for (const auto& e : std::filesystem::directory_iterator(ck)) {
    if (e.path().extension() != ".h5") continue;
    const mt::ckpt::Checkpoint c = mt::ckpt::read(e.path());
    for (const auto& a : c.arrays)
      for (const float v : a.data) REQUIRE(std::isfinite(v));
  }
  // 0: only a non-finite loss stops it (the documented rule).
  r = run("train --model resnet8 --batch-size 16 --train-steps 4 --data " + data + " --max-loss 0");
  CHECK(r.code == 0);
}

TEST_CASE("ckpt-sync: training waits for each checkpoint to be durable", "[unit][cli][ckpt]") {
  // Issue 17, work lost per kill: with the write in the background, a kill in the middle of it
  // also loses the steps trained meanwhile. With --ckpt-sync (on) the pause (stall_seconds of the
  // snapshot) covers the whole write (durable_seconds); off, only the copy in memory; auto (the
  // default) waits for the write up to a quarter of --failure-timeout and says whether it did.
  mt::test::TempDir dir("cli_ckpt_sync");
  const auto data = (dir.path() / "data").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  const auto stalls = [&](const std::string& flags, const std::string& name) {
    const auto metrics = (dir.path() / (name + ".jsonl")).string();
    const auto r = run("train --model resnet8 --batch-size 16 --train-steps 12 --ckpt-every-steps 3 --data " + data +
                       " --ckpt-dir " + (dir.path() / name).string() + " --metrics " + metrics + " --quiet " + flags);
    REQUIRE(r.code == 0);
    std::map<std::int64_t, double> stall, durable;
    std::map<std::int64_t, bool> waited;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line);
      const auto step = e.value("global_step", std::int64_t{0});
      if (e["event"] == "checkpoint_snapshot") {
        stall[step] = e["stall_seconds"].get<double>();
        waited[step] = e["durable_before_training"].get<bool>();
      }
      if (e["event"] == "checkpoint") durable[step] = e["durable_seconds"].get<double>();
    }
    std::vector<std::tuple<double, double, bool>> out;  // (stall, durable, waited) of the periodic ones
    for (const auto& [step, d] : durable)
      if (stall.count(step)) out.emplace_back(stall[step], d, waited[step]);
    return out;
  };
  const auto sync = stalls("--ckpt-sync", "sync");  // alone: on
  REQUIRE(sync.size() >= 3);
  for (const auto& [stall, durable, waited] : sync) {
    CHECK(stall >= durable);
    CHECK(waited);
  }
  const auto overlap = stalls("--ckpt-sync off", "overlap");
  // While a write runs, a newer snapshot replaces one still waiting: fewer checkpoint events.
  REQUIRE(!overlap.empty());
  int shorter = 0;
  for (const auto& [stall, durable, waited] : overlap) {
    shorter += stall < durable;
    CHECK_FALSE(waited);
  }
  CHECK(shorter >= 1);
  // auto: waited until durable, or for its whole bound (1.5 s / 4) before training went on.
  const auto bounded = stalls("", "auto");
  REQUIRE(bounded.size() >= 3);
  for (const auto& [stall, durable, waited] : bounded) CHECK((waited ? stall >= durable : stall >= 0.375));
}

TEST_CASE("environment defaults: the command line wins unread, an error names the variable", "[unit][cli]") {
  // Issue 17, bad input: MT_TRAIN_STEPS=abc failed even with --train-steps given, and the message
  // named the flag; model-info ignored MT_MODEL.
  mt::test::TempDir dir("cli_env");
  const auto data = (dir.path() / "data").string();
  REQUIRE(run("gen-data " + data + " --train 64 --test 16").code == 0);
  const std::string train = "train --quiet --model resnet8 --batch-size 8 --data " + data;
  auto r = run(train + " --train-steps 2", "MT_TRAIN_STEPS=abc");
  CHECK(r.code == 0);
  r = run(train, "MT_TRAIN_STEPS=abc");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "MT_TRAIN_STEPS (the environment default of --train-steps): 'abc' is not a number"));
  r = run(train + " --train-steps=abc");
  CHECK(r.code == 2);
  CHECK(contains(r.output, "--train-steps: 'abc' is not a number"));
  r = run("model-info", "MT_MODEL=resnet8");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "model: resnet8\n"));
}

TEST_CASE("eval: a checkpoint's test accuracy and loss, as training measured them", "[unit][cli][ckpt]") {
  mt::test::TempDir dir("cli_eval");
  const auto data = (dir.path() / "data").string(), ck = (dir.path() / "ck").string();
  const auto metrics = (dir.path() / "m.jsonl").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 100").code == 0);
  REQUIRE(run("train --quiet --model resnet8 --batch-size 16 --train-steps 20 --data " + data + " --ckpt-dir " + ck +
              " --metrics " + metrics)
              .code == 0);
  std::ifstream in(metrics);
  std::string line, summary;
  while (std::getline(in, line))
    if (contains(line, "\"event\":\"summary\"")) summary = line;
  const auto s = nlohmann::json::parse(summary);
  // A directory means its newest valid checkpoint: the final state.
  auto r = run("eval --json --ckpt " + ck + " --data " + data);
  REQUIRE(r.code == 0);
  const auto e = nlohmann::json::parse(r.output);
  CHECK(e["global_step"] == 20);
  CHECK(e["test_images"] == 100);
  CHECK(e["trained_on_this_data"] == true);
  CHECK(e["normalization_from_checkpoint"] == true);
  CHECK(e["test_accuracy"].get<double>() == Approx(s["test_accuracy"].get<double>()));
  CHECK(e["test_loss"].get<double>() == Approx(s["test_loss"].get<double>()).epsilon(1e-5));
  r = run("eval --ckpt " + ck + " --data " + data);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "(resnet8, global step 20): test accuracy "));
  r = run("eval --ckpt " + (dir.path() / "nope.h5").string() + " --data " + data);
  CHECK(r.code == 4);
  CHECK(contains(r.output, "nope.h5: not found"));
}

TEST_CASE("ckpt verify: a missing path is 'not found', a dangling LATEST is flagged", "[unit][cli][ckpt]") {
  // Issue 17, defect 9.
  auto r = run("ckpt verify /nonexistent/mt-ckpt.h5");
  CHECK(r.code == 4);
  CHECK(contains(r.output, "/nonexistent/mt-ckpt.h5: not found"));
  CHECK_FALSE(contains(r.output, "damaged"));

  mt::test::TempDir dir("cli_latest");
  const auto data = (dir.path() / "data").string(), ck = (dir.path() / "ck").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  REQUIRE(run("train --model resnet8 --batch-size 32 --train-steps 2 --ckpt-every-steps 1 --data " + data +
              " --ckpt-dir " + ck).code == 0);
  r = run("ckpt verify " + ck);
  CHECK(r.code == 0);
  CHECK_FALSE(contains(r.output, "dangling"));
  std::filesystem::remove(dir.path() / "ck" / "ckpt-0000000002.h5");
  r = run("ckpt verify " + ck);
  CHECK(r.code == 4);
  CHECK(contains(r.output, "ok: "));  // step 1 is still fine
  CHECK(contains(r.output, "dangling: "));
  CHECK(contains(r.output, "names ckpt-0000000002.h5, which does not exist"));
}

TEST_CASE("flags that would be ignored are refused or named (issue 17, bad input)", "[unit][cli]") {
  mt::test::TempDir dir("cli_ignored");
  const auto data = (dir.path() / "data").string();
  REQUIRE(run("gen-data " + data + " --train 256 --test 64").code == 0);
  const std::string train = "train --model resnet8 --batch-size 32 --train-steps 2 --data " + data;
  // Checkpoint flags without --ckpt-dir would save nothing: exit 2 before any work.
  for (const std::string flag : {"--ckpt-every-steps 5", "--ckpt-every-seconds 60", "--ckpt-keep 1", "--ckpt-fail stop"}) {
    auto r = run(train + " " + flag);
    CHECK(r.code == 2);
    CHECK(contains(r.output, flag.substr(0, flag.find(' ')) + " needs --ckpt-dir"));
    CHECK_FALSE(contains(r.output, "step "));
  }
  auto r = run(train + " --ckpt-every-steps 5", "MT_CKPT_DIR=" + (dir.path() / "ck").string());
  CHECK(r.code == 0);  // the directory from the environment counts
  // More threads than cores: capped, with a warning.
  r = run(train + " --threads 4096");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "--threads 4096 is more than the"));
  // --num-ps in a single process: said, not silently ignored.
  r = run(train + " --num-ps 2");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "--num-ps 2 applies to parameter-server runs"));
  r = run(train + " --replace-workers");
  CHECK(r.code == 0);
  CHECK(contains(r.output, "--replace-workers applies to parameter-server runs"));
}

TEST_CASE("gen-data then train end to end: progress lines and the summary", "[unit][cli]") {
  mt::test::TempDir dir("cli_e2e");
  const auto data = (dir.path() / "data").string();
  auto r = run("gen-data " + data + " --train 512 --test 256");
  REQUIRE(r.code == 0);
  const auto metrics = (dir.path() / "m.jsonl").string();
  r = run("train --model resnet8 --batch-size 32 --train-steps 6 --log-every-steps 3 --threads 2 "
          "--data " + data + " --metrics " + metrics);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "step 3/6"));
  CHECK(contains(r.output, "step 6/6"));
  CHECK(contains(r.output, "summary: {"));
  std::ifstream in(metrics);
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) last = line, ++lines;
  CHECK(lines >= 4);  // config, 2 progress, eval, summary
  CHECK(contains(last, "\"event\":\"summary\""));
}
