// Everything `mpi_trainer train` is told, after parsing and validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

struct TrainConfig {
  std::string data;             // empty: default_data_dir()
  std::string model = "resnet32";
  std::int64_t train_steps = 64000;
  int batch_size = 128;
  int num_ps = 1;               // parameter-server shards (ranks 0..num_ps-1) under MPI
  // auto | none | active-workers | staleness | sqrt-staleness | gap; auto (resolved after parsing, resolve_policy):
  // gap under dana, none otherwise (bench/README.md: the best measured pairs)
  std::string lr_scaling = "auto";
  std::string momentum_correction = "dana";  // dana | implicit | none (PS: momentum under asynchrony)
  std::int64_t join_warmup = 0;     // steps of rate warm-up after a worker joins (0: none)
  std::int64_t max_staleness = -1;  // PS drops pushes staler than this (-1: no bound)
  double max_loss = 1000;           // a step's loss above this (or not finite) stops the run: diverged (0: only non-finite)
  double push_norm_limit = 0;       // PS: reject a push whose gradient norm exceeds this x the recent median (0: off)
  int max_rejected_pushes = 3;      // PS: a worker whose pushes are rejected this many times in a row is dropped (0: never)
  std::string push_precision = "fp32";  // fp32 | bf16: the values of pushes and replies (ps/wire/precision.hpp)
  std::string device = "auto";  // cpu | cuda | auto
  int threads = 0;              // 0: every core
  std::uint64_t seed = 1;
  std::string lr_schedule = "default";
  double lr = 0;                // 0: the schedule's own base rate
  std::int64_t lr_warmup_steps = -1;  // -1: the schedule's own (cosine 100, others 0), at least
                                      // 50 steps per worker when asynchronous (rate_stability)
  std::string spike_guard = "on";     // on | off: the parameter server's SpikeGuard
  double momentum = 0.9;
  // --momentum auto (the command line's default): 0.9, raised by the parameter server with more
  // than 4 workers under dana + gap (UpdatePolicy::momentum_by_workers). false: as given.
  bool momentum_auto = false;
  double weight_decay = 1e-4;
  std::string nesterov = "default";     // on | off | default (model's recipe)
  std::string augment = "default";      // on | off | default (on)
  std::string normalize = "default";    // channel | per-image | none | default (model's recipe)
  std::string metrics;          // JSON Lines path, empty: none
  std::string tensorboard;      // TensorBoard event-file directory (--tensorboard), empty: none
  std::string push_log;         // CSV of every applied push (PS and virtual runs), empty: none
  std::int64_t eval_every_steps = 0;  // 0: only at the end
  std::int64_t log_every_steps = 50;
  std::string instance_type = "k80";  // every worker (or the single process)
  std::string worker_types;           // comma list, one per worker; empty: instance_type
  std::string ps_type = "ps";         // every parameter-server shard
  std::string prices;                 // price table file; empty: the paper's Table II
  std::string emulate_device;         // empty/off | a device | worker-types | a device table file
  double emulate_scale = 1;           // emulated step times multiplied by this
  // Virtual-clock runs (app/train_virtual.hpp): logical workers in one process.
  int virtual_workers = 0;            // 0: a real run
  std::string worker_links;           // "LATENCY_MS/GBIT_S" for all, or one per worker; empty: the default
  std::string ps_link;                // the shard's link, "GBIT_S" or "LATENCY_MS/GBIT_S", or none; empty: the default
  std::string virtual_joins;          // "k80@step=16000,p100@2h": workers that join on the virtual clock
  double ps_update_seconds = -1;      // the PS's time per update; < 0: from the model's size
  std::string pricing = "on-demand";  // on-demand | transient: the workers' (and a single process's)
  std::string ps_pricing = "on-demand";  // the parameter-server shards' (the paper ran its PS on demand)
  std::string ckpt_dir;               // empty: no checkpoints
  std::int64_t ckpt_every_steps = 0;  // 0: only at the end
  double ckpt_every_seconds = 0;      // 0: off
  int ckpt_keep = 3;                  // newest valid ones kept; 0: all
  std::string ckpt_fail = "continue"; // a failed write: continue (exit 4 at the end) | stop (exit 4 now)
  std::string ckpt_sync = "auto";     // training waits until each checkpoint is durable: on | off |
                                      // auto (for at most ckpt_sync_bound(); then the write overlaps)
  std::string resume = "auto";        // auto | never | PATH
  std::string resume_override;        // fields a resume accepts when they differ: data,batch_size,lr_schedule
  bool quiet = false;
  // Fault tolerance (docs/fault-model.md).
  double failure_timeout = 1.5;       // a peer silent this long is lost (s)
  double drain_deadline = 10;         // a worker's notice: push and leave within this (s)
  int ps_standby = -1;                // workers holding a replica of the PS (-1: 1 with 2+ workers, else 0)
  int replica_interval = 10;          // updates between two replicas a shard sends its standbys, at least
  double replica_budget = 0.01;       // the share of a shard's time replicas may take, at most
  std::string ps_handover = "auto";   // ULFM: a notice to the PS alone hands it over to the standby (auto|on|off)
  std::string push_journal = "on";    // ULFM, standbys: workers journal their pushes so a takeover loses none (on|off)
  std::string status_file;            // run state for launchers; empty: <ckpt-dir>/run-status.json
  std::string revoke;                 // "rank=2@30s,rank=3@step=400": real kills
  std::string revocation_model;       // empty: none; gce or a table file: sampled lifetimes
  double time_scale = 1;              // model hours per real hour (3600: an hour per second)
  int max_workers = 0;                // elastic joins: worker slots (0: the launched workers only)
  bool replace_workers = false;       // shard 0 spawns a new worker for each one it drops
  std::vector<std::string> command_args;  // the command line after the program (--replace-workers' replacements)
  std::string port_file;              // elastic joins: shard 0's port; empty: <ckpt-dir>/ps-port
  std::string join_secret;            // elastic joins: the secret file; empty: join-secret beside the port file
  bool synthetic_gradients = false;   // benchmark: workers push a fixed gradient, no compute
  std::string corrupt_push;           // "rank=2@push=30:nan": a worker spoils one of its pushes (tests)
};

// --lr-scaling auto: gap with dana, none with the other corrections (the best measured).
// The command line resolves it after parsing; the trainers again, for callers that build a
// TrainConfig themselves (bench/perf/ps_bench.cpp).
inline void resolve_policy(TrainConfig& c) {
  if (c.lr_scaling == "auto") c.lr_scaling = c.momentum_correction == "dana" ? "gap" : "none";
}

}  // namespace mt
