// The parameter server's options (ps/ps.hpp is the face that the app includes): the update policy's
// enums, the job's shape, PsOptions. Internal headers include this instead of ps/ps.hpp.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ps/wire/precision.hpp"

namespace mt {

inline constexpr double kJoinAuthSeconds =
    10;  // shard 0 waits this long for a joiner's proof (ps/elastic/join_auth.hpp)

enum class LrScaling { kNone, kActiveWorkers, kStaleness, kSqrtStaleness, kGap };
enum class MomentumCorrection { kNone, kImplicit, kDana };
// "none" | "active-workers" | "staleness" | "sqrt-staleness" | "gap" (the app resolves "auto" first);
// "implicit" | "dana" | "none". Throw UsageError naming the flag.
LrScaling parse_lr_scaling(const std::string& text);
MomentumCorrection parse_momentum_correction(const std::string& text);
const char* to_string(LrScaling s);
const char* to_string(MomentumCorrection m);

// What keeps an asynchronous run stable (docs/user-guide.md, "Defaults that learn"), applied by
// UpdatePolicy: `start_warmup`, the rate rises linearly over the first N global steps (the
// schedule's own warm-up, if longer, stays); `spike_guard`, ps/exchange/spike_guard.hpp.
struct RateStability {
  std::int64_t start_warmup = 0;
  bool spike_guard = false;
};

// What a worker trains, as a shard checks its join: the model's size, the batch size and the push
// precision must be the job's.
struct JobShape {
  std::int64_t params = 0;
  std::int32_t batch = 0;
  PushPrecision precision = PushPrecision::kFp32;
  // "272474 parameters with --batch-size 128 and --push-precision fp32"
  std::string describe() const {
    return std::to_string(params) + " parameters with --batch-size " + std::to_string(batch) +
           " and --push-precision " + to_string(precision);
  }
};

// What the runtime is told, typed (the app translates its flags).
struct PsOptions {
  std::int64_t train_steps = 0;  // global steps in all, over every attempt
  int batch_size = 128;
  int num_ps = 1;  // shards: ranks 0..num_ps-1 of `comm`
  // The job's processes: shards first, then workers. After a takeover under ULFM: the survivors,
  // the new shard 0 (a former worker) at rank 0, the surviving shards after it; each worker (rank
  // num_ps + i) is named worker_ranks[i] in the reports (its rank in the launched job) and trains
  // data slot worker_slots[i] of `slots`, as before the takeover. Empty, 0: rank, rank - num_ps,
  // the workers.
  MPI_Comm comm = MPI_COMM_WORLD;
  std::vector<int> worker_ranks, worker_slots;
  int slots = 0;
  std::int64_t first_step = 0;  // the global step starts here at least (a takeover: never backwards)
  // A takeover's new shard 0: the survivors' push journals, the surviving shards' own parts, and its
  // replica's pushes handled per shard and slot: every part starts from its surviving shard's state
  // (else the replica's) and replays the journaled pushes that state does not hold (ps/resilience/push_journal.hpp).
  struct Replay {
    std::string log;
    std::string states;                              // the surviving shards' own parts (PartState)
    std::vector<std::vector<std::int64_t>> handled;  // ReplicaState::handled
    std::vector<std::int64_t> replica_steps;         // ReplicaState::shard_steps
  };
  std::shared_ptr<const Replay> replay;
  int self_rank = -1;  // this process's rank in the launched job, for --revoke's lines (-1: in comm)
  // ULFM, one shard, a standby: a notice (SIGTERM, SIGUSR1) hands the parameter server over to the
  // standby, which takes it over with the workers in the same job, nothing lost, instead of
  // checkpointing and stopping the job (docs/fault-model.md, "Takeover under ULFM").
  bool hand_over = false;
  // ULFM, a standby, several shards: when another shard is lost, this one takes part in its
  // takeover (ps/resilience/recovery.hpp) and goes on as a shard of the new parameter server, in the same
  // job, instead of failing with exit 10.
  bool takeover = false;
  int max_workers = 0;  // elastic joins: data slots (0: the launched workers only)
  // --replace-workers (shard 0): each dropped worker replaced by a process it spawns running
  // `replacement_program replacement_args...`, at most replacement_limit in all (ps/elastic/replacements.hpp).
  bool replace_workers = false;
  std::string replacement_program;
  std::vector<std::string> replacement_args;
  int replacement_limit = 0;
  // The update: SGD with momentum, the learning rate scaled by the policy (ps/exchange/update_policy.hpp).
  LrScaling lr_scaling = LrScaling::kStaleness;  // the trainer's defaults (app/config.hpp)
  MomentumCorrection momentum_correction = MomentumCorrection::kDana;
  double momentum = 0.9;
  bool momentum_by_workers = false;  // --momentum auto (UpdatePolicy::momentum_by_workers)
  double weight_decay = 1e-4;
  bool nesterov = false;
  std::int64_t join_warmup = 0;     // rate ramp after a join (UpdatePolicy::joined)
  RateStability stability;          // the start-up warm-up and the spike guard
  std::int64_t max_staleness = -1;  // pushes staler than this are not applied (-1: no bound)
  double max_loss = 1000;           // a push whose loss is not finite or above this: diverged (0: non-finite only)
  // The push check (ps/exchange/push_check.hpp): a push with a value that is not finite is rejected, and
  // with push_norm_limit > 0 one whose gradient norm exceeds that many times the recent median;
  // max_rejected_pushes in a row stop and drop the worker (0: never).
  double push_norm_limit = 0;
  int max_rejected_pushes = 3;
  // The values on the wire (ps/wire/precision.hpp): bf16 halves pushes and replies; the state stays fp32.
  PushPrecision push_precision = PushPrecision::kFp32;
  // Fault tolerance (docs/fault-model.md).
  double failure_timeout = 1.5;        // a worker silent this long is lost (s)
  double drain_deadline = 10;          // after a notice: workers stop within this (s)
  int ps_standby = 0;                  // standby workers each shard streams replicas to (ps/resilience/replica.hpp)
  std::int64_t replica_interval = 10;  // updates between two replicas, at least
  double replica_budget = 0.01;        // the share of a shard's time replicas may take, at most
  // Shard 0's cadence.
  std::int64_t ckpt_every_steps = 0;
  double ckpt_every_seconds = 0;
  std::int64_t eval_every_steps = 0;
  std::int64_t log_every_steps = 50;
  bool quiet = false;
  bool shm_debug = false;            // say why a worker's pushes travel as plain messages (MT_PS_SHM_DEBUG)
  bool synthetic_gradients = false;  // benchmark: workers push a fixed gradient, no compute
  std::uint64_t seed = 1;
  std::vector<std::string> worker_types;        // instance type of each launched worker, in rank order
  std::string join_type;                        // instance type of workers that join
  std::string port_file;                        // --max-workers: where shard 0 publishes its port
  std::string join_secret;                      // --max-workers: what a joiner must prove (ps/elastic/join_auth.hpp)
  double join_auth_seconds = kJoinAuthSeconds;  // how long shard 0 waits for a joiner's proof
};

// --ps-standby's number for a job of `workers` workers (train, plan and virtual runs alike): `asked`
// when >= 0, else (-1, the default) one standby with 2 or more workers and a checkpoint directory to
// write its replica into; never more than the workers.
inline int resolve_standbys(int asked, int workers, bool has_ckpt_dir) {
  return std::min(asked >= 0 ? asked : (workers >= 2 && has_ckpt_dir ? 1 : 0), workers);
}

}  // namespace mt
