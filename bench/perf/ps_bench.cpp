// Parameter-server throughput against its bound, measured in one MPI job.
//
//   mpirun -np 1+W [--oversubscribe] ps_bench [--num-ps S] [--model resnet32] [--steps N]
//                                             [--push-precision fp32|bf16]
//
// 1. The bound: rank 0 and rank S time a round trip of the whole model (the worker sends the
//    gradients, rank 0 answers with the parameters, each one MPI message with our header), and
//    rank 0 times one optimizer update of the whole model. bound = 1 / (round trip + update).
//    Under bf16 the round trip's messages have the bf16 size, and the update includes what a shard
//    adds to it: decoding the push's gradient and encoding the reply (codec_ms, timed apart too).
// 2. The real parameter server (mpi_trainer's own code) with S shards and W workers pushing a
//    fixed, precomputed gradient as fast as they are answered (`--synthetic-gradients`).
// Rank 0 prints one JSON line: updates/s achieved, the bound and their ratio.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "app/config.hpp"
#include "app/train.hpp"
#include "app/train_dist.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/precision.hpp"
#include "ps/wire/protocol.hpp"
#include "nn/resnet.hpp"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-server throughput vs the round-trip + update bound"};
  TrainConfig cfg;
  cfg.model = "resnet32";
  cfg.train_steps = 2000;
  int reps = 60;
  app.add_option("--model", cfg.model)->capture_default_str();
  app.add_option("--num-ps", cfg.num_ps)->capture_default_str();
  app.add_option("--steps", cfg.train_steps, "Global steps of the throughput run")->capture_default_str();
  app.add_option("--reps", reps, "Round trips and updates timed for the bound")->capture_default_str();
  app.add_option("--data", cfg.data, "Data directory (loaded, not trained on)");
  app.add_option("--lr-scaling", cfg.lr_scaling, "The update policy's rate scaling (the trainer's flag)")
      ->capture_default_str();
  app.add_option("--momentum-correction", cfg.momentum_correction, "The update policy's momentum (the trainer's flag)")
      ->capture_default_str();
  app.add_option("--push-precision", cfg.push_precision, "The values on the wire (the trainer's flag)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  CLI11_PARSE(app, argc, argv);

  try {
    MpiSession mpi(&argc, &argv);
    const int shards = cfg.num_ps, workers = mpi.size() - shards;
    if (workers < 1) throw UsageError("needs at least one worker rank beside --num-ps");
    const Model model(parse_model(cfg.model));
    const std::int64_t p = model.param_count();
    const PushPrecision precision = parse_push_precision(cfg.push_precision);

    // 1. The bound, between rank 0 and the first worker, everyone else waiting.
    std::vector<double> rtt, upd, codec;
    std::vector<float> out(static_cast<std::size_t>(kHeaderFloats + wire_floats(precision, p)), 0.5f), in(out.size());
    if (mpi.rank() == 0 || mpi.rank() == shards) {
      const int peer = mpi.rank() == 0 ? shards : 0;
      for (int r = 0; r < reps + 5; ++r) {
        const auto t0 = Clock::now();
        if (mpi.rank() == shards) {
          MT_MPI(MPI_Send(out.data(), static_cast<int>(out.size()), MPI_FLOAT, peer, 1, MPI_COMM_WORLD));
          MT_MPI(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_FLOAT, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
          MT_MPI(MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_FLOAT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
          MT_MPI(MPI_Send(out.data(), static_cast<int>(out.size()), MPI_FLOAT, peer, 2, MPI_COMM_WORLD));
        }
        if (r >= 5) rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    }
    if (mpi.rank() == 0) {
      auto backend = make_cpu_backend(1);
      std::vector<float> w(static_cast<std::size_t>(p), 0.1f), g(w.size(), 1e-3f), v(w.size(), 0.f);
      std::vector<float> wire(static_cast<std::size_t>(wire_floats(precision, p)));
      encode_values(precision, g, wire.data());
      for (int r = 0; r < reps + 5; ++r) {
        const auto t0 = Clock::now();
        if (precision != PushPrecision::kFp32) decode_values(precision, wire.data(), g);
        const auto t1 = Clock::now();
        backend->sgd_update(w, g, v, SgdSpec{0.1f, 0.9f, 1e-4f, false});
        const auto t2 = Clock::now();
        if (precision != PushPrecision::kFp32) encode_values(precision, w, wire.data());
        const auto t3 = Clock::now();
        if (r < 5) continue;
        upd.push_back(std::chrono::duration<double>(t3 - t0).count());
        codec.push_back(std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count());
      }
    }
    // The others wait without spinning (MPI_Barrier would poll and take the two timing ranks'
    // cores on an oversubscribed node).
    MPI_Request barrier = MPI_REQUEST_NULL;
    MT_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &barrier));
    for (int done = 0;;) {
      MT_MPI(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE));
      if (done) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }

    // 2. The parameter server itself.
    cfg.synthetic_gradients = true;
    cfg.quiet = true;
    cfg.log_every_steps = cfg.train_steps;
    std::ostringstream log;
    const TrainResult r = train_distributed(cfg, mpi, log);
    if (mpi.rank() == 0) {
      const double rt = median(rtt), up = median(upd), bound = 1.0 / (rt + up);
      const double achieved = double(r.global_step) / r.train_seconds;
      std::cout << nlohmann::ordered_json{
                       {"model", cfg.model}, {"parameters", p}, {"push_precision", cfg.push_precision},
                       {"message_mb", double(p) * wire_bytes_per_value(precision) / 1e6},
                       {"num_ps", shards}, {"workers", workers}, {"round_trip_ms", rt * 1e3},
                       {"update_ms", up * 1e3}, {"codec_ms", median(codec) * 1e3},
                       {"bound_updates_per_second", bound},
                       {"updates_per_second", achieved}, {"ratio_to_bound", achieved / bound},
                       {"global_steps", r.global_step}, {"seconds", r.train_seconds}}
                       .dump()
                << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "ps_bench: " << e.what() << '\n';
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  return 0;
}
