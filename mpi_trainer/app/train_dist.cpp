#include "app/train_dist.hpp"

#include <time.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <ostream>
#include <vector>

#include "app/cost.hpp"
#include "app/metrics.hpp"
#include "app/run_setup.hpp"
#include "core/error.hpp"
#include "dist/mpi_env.hpp"
#include "dist/partition.hpp"
#include "dist/protocol.hpp"
#include "nn/resnet.hpp"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagFinal = 13;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void nap_microseconds(long us) {
  timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

// A message buffer of header + `payload` floats.
struct Buffer {
  std::vector<float> data;
  explicit Buffer(std::int64_t payload = 0) : data(static_cast<std::size_t>(kHeaderFloats + payload)) {}
  MsgView view() { return MsgView{data.data()}; }
  int count() const { return static_cast<int>(data.size()); }
};

// Sends `buf` (header + `payload` floats) without blocking.
void isend(Buffer& buf, std::int64_t payload, int dest, int tag, MPI_Request* req) {
  MT_MPI(MPI_Isend(buf.data.data(), static_cast<int>(kHeaderFloats + payload), MPI_FLOAT, dest, tag,
                   MPI_COMM_WORLD, req));
}

// ------------------------------------------------------------------------------- PS shard

struct WorkerState {
  int rank = 0;
  Buffer recv, send;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  bool done = false;
  bool joined = false;
  std::int64_t pushes = 0;
  Clock::time_point joined_at{};
  double active_seconds = 0;
};

TrainResult run_shard(const TrainConfig& cfg, const RunSetup& setup, MpiSession& mpi, std::ostream& log) {
  const int shards = cfg.num_ps, shard = mpi.rank(), workers = mpi.size() - shards;
  const Model model(setup.spec);
  const Partition part(model.params(), shards);
  const std::int64_t mine = part.floats(shard);
  const std::int64_t stats_floats = shard == 0 ? model.stats().total() : 0;
  MetricsWriter metrics(shard == 0 ? cfg.metrics : std::string());
  auto backend = make_backend(setup.device, 1);  // the optimizer update: one thread is plenty

  // This shard's parameters and momentum, packed; shard 0 also owns the BN statistics.
  FlatTensors full(model.params()), stats(model.stats()), batch_stats(model.stats());
  model.init_params(full, stats, cfg.seed);
  std::vector<float> params(static_cast<std::size_t>(mine)), velocity(params.size(), 0.f);
  part.pack(shard, full, params);
  const auto runs = part.runs(shard);
  const auto counts = model.bn_counts(cfg.batch_size);

  if (shard == 0) {
    metrics.write(nlohmann::ordered_json{
        {"event", "config"}, {"model", setup.spec.name}, {"parameters", model.param_count()},
        {"data", setup.data_dir}, {"data_format", setup.data.format}, {"train_steps", cfg.train_steps},
        {"batch_size", cfg.batch_size}, {"num_ps", shards}, {"workers", workers},
        {"lr_schedule", setup.schedule.describe()}, {"momentum", cfg.momentum},
        {"nesterov", setup.nesterov}, {"weight_decay", cfg.weight_decay}, {"seed", cfg.seed},
        {"lr_scaling", cfg.lr_scaling},
        {"instance_type", cfg.instance_type}, {"pricing", cfg.pricing}, {"processes", mpi.size()}});
    if (!cfg.quiet)
      log << "mpi_trainer: parameter server: " << shards << " shard(s), " << workers << " worker(s), "
          << setup.spec.name << " (" << model.param_count() << " parameters) on " << setup.data.format
          << ", " << cfg.train_steps << " global steps of " << cfg.batch_size << ", lr "
          << setup.schedule.describe() << '\n' << std::flush;
  }

  std::vector<WorkerState> ws(static_cast<std::size_t>(workers));
  const std::int64_t push_payload = mine + stats_floats;
  for (int w = 0; w < workers; ++w) {
    auto& s = ws[static_cast<std::size_t>(w)];
    s.rank = shards + w;
    s.recv = Buffer(push_payload);
    s.send = Buffer(mine);
    MT_MPI(MPI_Irecv(s.recv.data.data(), s.recv.count(), MPI_FLOAT, s.rank, kTagToPs, MPI_COMM_WORLD, &s.rreq));
  }

  std::int64_t step = 0;
  const auto t0 = Clock::now();
  auto window_start = t0;
  double window_loss = 0, window_staleness = 0;
  std::int64_t window_pushes = 0, window_correct = 0, window_images = 0;
  std::int64_t total_images = 0;
  double max_staleness = 0;
  const auto log_every = std::max<std::int64_t>(1, cfg.log_every_steps);
  std::vector<MPI_Request> rreqs(ws.size());
  std::vector<int> ready(ws.size());

  auto reply = [&](WorkerState& s, MsgKind kind) {
    // The worker has the previous reply (it sent again), so this send is done or nearly.
    MT_MPI(MPI_Wait(&s.sreq, MPI_STATUS_IGNORE));
    MsgHeader& h = s.send.view().header();
    h = MsgHeader{};
    h.kind = kind;
    h.step = step;
    h.model_version = step;
    h.payload = kind == MsgKind::kParams ? mine : 0;
    if (kind == MsgKind::kParams) std::copy(params.begin(), params.end(), s.send.view().payload());
    isend(s.send, h.payload, s.rank, kTagToWorker, &s.sreq);
  };

  int active = workers;
  long nap_us = 20;  // idle back-off: frequent polls steal the workers' cores
  while (active > 0) {
    for (std::size_t i = 0; i < ws.size(); ++i) rreqs[i] = ws[i].rreq;
    int n = 0;
    MT_MPI(MPI_Testsome(static_cast<int>(rreqs.size()), rreqs.data(), &n, ready.data(), MPI_STATUSES_IGNORE));
    for (std::size_t i = 0; i < ws.size(); ++i) ws[i].rreq = rreqs[i];
    if (n == MPI_UNDEFINED) break;
    if (n == 0) {
      nap_microseconds(nap_us);
      nap_us = std::min<long>(nap_us * 2, 1000);
      continue;
    }
    nap_us = 20;
    for (int k = 0; k < n; ++k) {
      WorkerState& s = ws[static_cast<std::size_t>(ready[k])];
      MsgHeader& h = s.recv.view().header();
      if (const auto bad = check_header(h, push_payload); !bad.empty())
        throw Error(kExitInternal, "parameter server: malformed message from rank " + std::to_string(s.rank) + ": " + bad);
      if (h.kind == MsgKind::kJoin) {
        s.joined = true;
        s.joined_at = Clock::now();
        reply(s, MsgKind::kParams);
      } else if (h.kind == MsgKind::kPush) {
        if (step >= cfg.train_steps) {
          reply(s, MsgKind::kStop);
          s.done = true;
          s.active_seconds = since(s.joined_at);
          --active;
          continue;  // no new receive
        }
        const float* g = s.recv.view().payload();
        const double staleness = double(step - h.model_version);
        double lr = setup.schedule.lr_at(step);
        if (cfg.lr_scaling == "active-workers")
          lr /= std::max(1, active);
        else if (cfg.lr_scaling == "staleness")
          lr /= 1.0 + staleness;
        for (const auto& r : runs) {
          const auto o = static_cast<std::size_t>(r.offset), len = static_cast<std::size_t>(r.length);
          backend->sgd_update(std::span<float>(params).subspan(o, len), std::span<const float>(g + o, len),
                              std::span<float>(velocity).subspan(o, len),
                              SgdSpec{static_cast<float>(lr), static_cast<float>(cfg.momentum),
                                      r.decay ? static_cast<float>(cfg.weight_decay) : 0.f, setup.nesterov});
        }
        if (shard == 0) {
          std::copy(g + mine, g + mine + stats_floats, batch_stats.flat().data());
          model.update_running_stats(stats, batch_stats, counts);
        }
        ++step;
        ++s.pushes;
        window_loss += h.loss;
        window_correct += h.correct;
        window_images += h.batch;
        total_images += h.batch;
        window_staleness += staleness;
        max_staleness = std::max(max_staleness, staleness);
        ++window_pushes;
        reply(s, MsgKind::kParams);
        if (shard == 0 && (step % log_every == 0 || step == cfg.train_steps)) {
          const double dt = since(window_start), ips = double(window_images) / std::max(dt, 1e-9);
          const double mean_loss = window_loss / double(window_pushes);
          if (!cfg.quiet)
            log << "step " << step << "/" << cfg.train_steps << "  loss " << std::fixed << std::setprecision(4)
                << mean_loss << "  lr " << lr << "  img/s " << std::setprecision(1) << ips << "  workers "
                << active << "  staleness " << window_staleness / double(window_pushes) << '\n' << std::flush;
          metrics.write(nlohmann::ordered_json{
              {"event", "progress"}, {"global_step", step}, {"loss", mean_loss},
              {"train_accuracy", double(window_correct) / double(std::max<std::int64_t>(window_images, 1))},
              {"lr", lr}, {"images_per_second", ips}, {"active_workers", active},
              {"mean_staleness", window_staleness / double(window_pushes)}, {"elapsed_seconds", since(t0)}});
          window_start = Clock::now();
          window_loss = window_staleness = 0;
          window_pushes = window_correct = window_images = 0;
        }
      } else if (h.kind == MsgKind::kStop) {
        // Another shard ended training for this worker first; it sends no more pushes.
        s.done = true;
        s.active_seconds = since(s.joined_at);
        --active;
        continue;
      } else {
        throw Error(kExitInternal, "parameter server: unexpected message kind from rank " + std::to_string(s.rank));
      }
      MT_MPI(MPI_Irecv(s.recv.data.data(), s.recv.count(), MPI_FLOAT, s.rank, kTagToPs, MPI_COMM_WORLD, &s.rreq));
    }
  }
  for (auto& s : ws) MT_MPI(MPI_Wait(&s.sreq, MPI_STATUS_IGNORE));
  const double train_seconds = since(t0);

  TrainResult res;
  res.global_step = step;
  res.train_seconds = train_seconds;
  res.images_per_second = double(total_images) / std::max(train_seconds, 1e-9);
  // Shards > 0 hand their final parameters to shard 0, which evaluates and reports.
  if (shard != 0) {
    MT_MPI(MPI_Send(params.data(), static_cast<int>(params.size()), MPI_FLOAT, 0, kTagFinal, MPI_COMM_WORLD));
    return res;
  }
  part.unpack(0, params, full);
  for (int s = 1; s < shards; ++s) {
    std::vector<float> other(static_cast<std::size_t>(part.floats(s)));
    MT_MPI(MPI_Recv(other.data(), static_cast<int>(other.size()), MPI_FLOAT, s, kTagFinal, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    part.unpack(s, other, full);
  }
  auto eval_backend = make_backend(setup.device, setup.threads);
  Network net(model, *eval_backend, cfg.batch_size);
  const auto t_eval = Clock::now();
  const EvalResult ev = evaluate_test_set(net, setup.data.test, setup.loader, full, stats);
  res.test_accuracy = ev.accuracy;
  res.test_loss = ev.loss;
  // Cost: every PS shard for the whole run, each worker for the seconds it was in the job.
  res.cost_usd = shards * cost_usd("ps", setup.transient, train_seconds);
  for (const auto& s : ws) res.cost_usd += cost_usd(cfg.instance_type, setup.transient, s.active_seconds);
  metrics.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", step}, {"test_accuracy", ev.accuracy},
                                       {"test_loss", ev.loss}, {"eval_seconds", since(t_eval)}});
  const nlohmann::ordered_json summary{
      {"event", "summary"}, {"global_step", step}, {"train_seconds", train_seconds},
      {"test_accuracy", ev.accuracy}, {"cost_usd", res.cost_usd}, {"revocations", 0},
      {"workers_start", workers}, {"workers_end", workers}, {"images_per_second", res.images_per_second},
      {"test_loss", ev.loss}, {"max_staleness", max_staleness}, {"num_ps", shards},
      {"model", setup.spec.name}, {"instance_type", cfg.instance_type}, {"pricing", cfg.pricing}};
  metrics.write(summary);
  if (!cfg.quiet)
    log << "done: " << step << " global steps in " << std::setprecision(1) << train_seconds << " s by "
        << workers << " worker(s), " << res.images_per_second << " img/s, test accuracy "
        << std::setprecision(2) << 100.0 * ev.accuracy << "%, cost $" << std::setprecision(4) << res.cost_usd
        << '\n' << "summary: " << summary.dump() << '\n' << std::flush;
  return res;
}

// ------------------------------------------------------------------------------- worker

TrainResult run_worker(const TrainConfig& cfg, const RunSetup& setup, MpiSession& mpi) {
  const int shards = cfg.num_ps, workers = mpi.size() - shards, index = mpi.rank() - shards;
  const Model model(setup.spec);
  const Partition part(model.params(), shards);
  auto backend = make_backend(setup.device, setup.threads);
  FlatTensors params(model.params()), grads(model.params()), stats(model.stats()), batch_stats(model.stats());
  Network net(model, *backend, cfg.batch_size);
  LoaderOptions lo = setup.loader;
  lo.shard = index;
  lo.num_shards = workers;
  // Each worker sees its own part of every epoch, in its own order.
  BatchLoader loader(setup.data.train, lo);

  std::vector<Buffer> send, recv;
  for (int s = 0; s < shards; ++s) {
    send.emplace_back(part.floats(s) + (s == 0 ? model.stats().total() : 0));
    recv.emplace_back(part.floats(s));
  }
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(2 * shards), MPI_REQUEST_NULL);
  std::vector<std::int64_t> version(static_cast<std::size_t>(shards), 0);

  // One exchange with every shard: send what is in `send`, receive the replies into `recv` and
  // the parameters. Returns false when a shard said stop.
  auto round_trip = [&](MsgKind kind) {
    for (int s = 0; s < shards; ++s) {
      auto& r = recv[static_cast<std::size_t>(s)];
      MT_MPI(MPI_Irecv(r.data.data(), r.count(), MPI_FLOAT, s, kTagToWorker, MPI_COMM_WORLD, &reqs[static_cast<std::size_t>(2 * s)]));
      auto& b = send[static_cast<std::size_t>(s)];
      const std::int64_t payload = kind == MsgKind::kPush ? b.view().header().payload : 0;
      isend(b, payload, s, kTagToPs, &reqs[static_cast<std::size_t>(2 * s + 1)]);
    }
    MT_MPI(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
    bool stop = false;
    for (int s = 0; s < shards; ++s) {
      auto v = recv[static_cast<std::size_t>(s)].view();
      if (const auto bad = check_header(v.header(), part.floats(s)); !bad.empty())
        throw Error(kExitInternal, "worker: malformed reply from shard " + std::to_string(s) + ": " + bad);
      stop = stop || v.header().kind == MsgKind::kStop;
    }
    if (stop) {
      // Shards count their own steps and may disagree on which push is the last: those that
      // still expect pushes from this worker are told it leaves.
      for (int s = 0; s < shards; ++s) {
        if (recv[static_cast<std::size_t>(s)].view().header().kind == MsgKind::kStop) continue;
        Buffer& b = send[static_cast<std::size_t>(s)];
        b.view().header() = MsgHeader{};
        b.view().header().kind = MsgKind::kStop;
        MT_MPI(MPI_Send(b.data.data(), static_cast<int>(kHeaderFloats), MPI_FLOAT, s, kTagToPs, MPI_COMM_WORLD));
      }
      return false;
    }
    for (int s = 0; s < shards; ++s) {
      auto v = recv[static_cast<std::size_t>(s)].view();
      part.unpack(s, std::span<const float>(v.payload(), static_cast<std::size_t>(part.floats(s))), params);
      version[static_cast<std::size_t>(s)] = v.header().model_version;
    }
    return true;
  };

  for (auto& b : send) b.view().header() = MsgHeader{};
  TrainResult res;
  if (!round_trip(MsgKind::kJoin)) return res;
  for (;;) {
    const Batch& batch = loader.next();
    const StepStats st = net.train_step(batch.images, batch.labels, params, grads, batch_stats);
    const LoaderCursor cur = loader.cursor();
    for (int s = 0; s < shards; ++s) {
      auto v = send[static_cast<std::size_t>(s)].view();
      MsgHeader& h = v.header();
      h = MsgHeader{};
      h.kind = MsgKind::kPush;
      h.model_version = version[static_cast<std::size_t>(s)];
      h.payload = part.floats(s) + (s == 0 ? model.stats().total() : 0);
      h.cursor_epoch = cur.epoch;
      h.cursor_position = cur.position;
      h.loss = st.loss;
      h.correct = st.correct;
      h.batch = cfg.batch_size;
      part.pack(s, grads, std::span<float>(v.payload(), static_cast<std::size_t>(part.floats(s))));
      if (s == 0)
        std::copy(batch_stats.flat().data(), batch_stats.flat().data() + model.stats().total(),
                  v.payload() + part.floats(0));
    }
    ++res.global_step;
    if (!round_trip(MsgKind::kPush)) break;
  }
  return res;
}

}  // namespace

TrainResult train_distributed(const TrainConfig& cfg, MpiSession& mpi, std::ostream& log) {
  if (cfg.num_ps < 1 || cfg.num_ps >= mpi.size())
    throw UsageError("--num-ps " + std::to_string(cfg.num_ps) + " leaves no worker among " +
                     std::to_string(mpi.size()) + " processes; use 1.." + std::to_string(mpi.size() - 1));
  if (!cfg.ckpt_dir.empty())
    throw UsageError("--ckpt-dir is not supported with the parameter server yet; train in one process "
                     "to checkpoint");
  TrainConfig c = cfg;
  if (c.threads == 0) {
    // Share the node's cores among the ranks on it instead of oversubscribing them.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    // A PS shard on the node keeps one core: its wake-ups would stall the workers' OpenMP
    // barriers otherwise (measured: 1 worker on 2 cores beside the PS, 2 threads 170 img/s,
    // 1 thread 289 img/s).
    const int ps_here = ranks_here > c.num_ps ? c.num_ps : 0;
    const int workers_here = std::max(1, ranks_here - ps_here);
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    c.threads = std::max(1, (cores - ps_here) / workers_here);
  }
  const RunSetup setup = prepare_run(c);
  if (mpi.rank() < c.num_ps) return run_shard(c, setup, mpi, log);
  return run_worker(c, setup, mpi);
}

}  // namespace mt
