// Helpers shared by the tests: random tensors, comparisons with tolerances, temp dirs.
#pragma once

#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "ckpt/checkpoint.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "test_paths.hpp"

namespace mt::test {

// The mpi_trainer executable run as a user runs it: its exit code, stdout and stderr together.
struct Run {
  int code = -1;
  std::string output;
};

inline Run run(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " " + trainer_exe() + " " + args + " 2>&1";
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

// The CPU backend (2 threads) the op and gradient tests share, made on first use.
inline Backend& cpu() {
  static const auto be = make_cpu_backend(2);
  return *be;
}

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Mean value analysis of a closed network: `n` workers cycling through queueing stations shared
// fairly (processor sharing; `demands`: each station's seconds per visit) and a delay each
// (`think`: its step and latencies). The seconds per global step in steady state, exact for a
// product-form network (BCMP): what the cluster simulator's shard links should reproduce.
inline double mva_seconds_per_step(int n, const std::vector<double>& demands, double think) {
  std::vector<double> queue(demands.size(), 0.0), resident(demands.size());
  double throughput = 0;
  for (int k = 1; k <= n; ++k) {
    double cycle = think;
    for (std::size_t i = 0; i < demands.size(); ++i) cycle += resident[i] = demands[i] * (1 + queue[i]);
    throughput = k / cycle;
    for (std::size_t i = 0; i < demands.size(); ++i) queue[i] = throughput * resident[i];
  }
  return 1 / throughput;
}

inline void fill_random(Tensor& t, Rng& rng, float scale = 1.0f) {
  if (t.rank() == 4 && t.layout() != Layout::kPlain) {
    for (std::int64_t n = 0; n < t.dim(0); ++n)
      for (std::int64_t c = 0; c < t.dim(1); ++c)
        for (std::int64_t h = 0; h < t.dim(2); ++h)
          for (std::int64_t w = 0; w < t.dim(3); ++w)
            t.at(n, c, h, w) = static_cast<float>(rng.normal()) * scale;
    return;
  }
  for (auto& v : t.span()) v = static_cast<float>(rng.normal()) * scale;
}

inline Tensor random_tensor(const Dims& dims, Rng& rng, float scale = 1.0f) {
  Tensor t(dims);
  fill_random(t, rng, scale);
  return t;
}

// Converts a plain tensor to `layout` (a copy).
inline Tensor in_layout(const Tensor& plain, Layout layout) {
  if (plain.rank() != 4 || layout == Layout::kPlain) return plain.clone();
  Tensor t(plain.dims(), layout);
  convert_layout(plain, t);
  return t;
}

struct Diff {
  double max_abs = 0, max_ref = 0;
  double rel() const { return max_abs / std::max(max_ref, 1e-12); }
};

// Largest absolute difference over logical elements, and the largest reference magnitude.
inline Diff compare(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims() == want.dims());
  const Tensor a = to_plain(got), b = to_plain(want);
  Diff d;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    d.max_abs = std::max(d.max_abs, double(std::fabs(a.data()[i] - b.data()[i])));
    d.max_ref = std::max(d.max_ref, double(std::fabs(b.data()[i])));
  }
  return d;
}

#define MT_CHECK_CLOSE(got, want, tol)                                                  \
  do {                                                                                  \
    const auto mt_d_ = ::mt::test::compare((got), (want));                              \
    INFO("max abs diff " << mt_d_.max_abs << ", max |ref| " << mt_d_.max_ref            \
                         << ", relative " << mt_d_.rel() << ", tolerance " << (tol));   \
    CHECK(mt_d_.rel() <= (tol));                                                        \
  } while (0)

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    Rng rng(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    path_ = std::filesystem::temp_directory_path() /
            ("mt_test_" + tag + "_" + std::to_string(rng.next() % 1000000000ull));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A small checkpoint of every kind of content (attributes of each type, two arrays).
inline ckpt::Checkpoint sample_checkpoint(std::int64_t step, const std::string& model = "resnet8") {
  ckpt::Checkpoint c;
  c.global_step = step;
  c.model = model;
  c.param_count = 7;
  c.epoch = 3;
  c.config_json = R"({"lr":0.1})";
  c.ints["data_cursor_position"] = 42;
  c.reals["train_seconds"] = 12.5;
  c.strings["note"] = "héllo";
  c.arrays.push_back({"params/stage1/block1/conv1/weight", {1, 1, 2, 2}, {1, 2, 3, float(step)}});
  c.arrays.push_back({"params/fc/bias", {3}, {-1.5f, 0.25f, 1e-7f}});
  return c;
}

}  // namespace mt::test
