// The command line as a user meets it: exit codes and messages of the real executable.
#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "test_util.hpp"

namespace {

struct Run {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Run run(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + MT_TRAINER_EXE + " " + args + " 2>&1";
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  INFO("command: " << cmd << "\noutput:\n" << r.output);
  return r;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

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
                        Case{"frobnicate", "subcommand"}}) {
    const auto r = run(c.args);
    INFO("args: " << c.args << "\noutput: " << r.output);
    CHECK(r.code == 2);
    CHECK(contains(r.output, c.says));
  }
  const auto r = run("train --train-steps 5", "MT_MODEL=resnet7");
  CHECK(r.code == 2);  // environment defaults are validated like flags
}

TEST_CASE("help documents every flag and the environment defaults", "[unit][cli]") {
  const auto r = run("train --help");
  CHECK(r.code == 0);
  for (const char* flag : {"--data", "--model", "--train-steps", "--batch-size", "--device", "--threads",
                           "--seed", "--lr-schedule", "--lr", "--metrics", "--eval-every-steps",
                           "--instance-type", "MT_TRAIN_STEPS"})
    CHECK(contains(r.output, flag));
}

TEST_CASE("data and device errors exit 3 and name the problem", "[unit][cli]") {
  auto r = run("train --data /nonexistent/mt-data --train-steps 1");
  CHECK(r.code == 3);
  CHECK(contains(r.output, "/nonexistent/mt-data"));

  mt::test::TempDir dir("cli_bad");
  std::ofstream(dir.path() / "data_batch_1.bin") << "short";
  r = run("train --train-steps 1 --data " + dir.path().string());
  CHECK(r.code == 3);

  r = run("train --device cuda --train-steps 1", "CUDA_VISIBLE_DEVICES=");
  CHECK(r.code == 3);
  CHECK(contains(r.output, "--device cuda"));
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
