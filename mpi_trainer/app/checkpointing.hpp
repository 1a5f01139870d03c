// The bridge between the trainer's state and the checkpoint: the trainer's buffers as a
// ckpt::CheckpointState (ckpt/state.hpp, which names every array and attribute) and back, and what
// the app decides about checkpoints: which one a run resumes, whether it is of the same job, how
// a resume's data cursors continue, how long training waits for a write.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "app/metrics.hpp"
#include "optim/schedule.hpp"
#include "ckpt/async_writer.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/state.hpp"
#include "data/loader.hpp"
#include "nn/params.hpp"
#include "nn/resnet.hpp"
#include "ps/ps.hpp"

namespace mt {

// What a checkpoint records of the job that wrote it and of its input (a resume checks data,
// batch_size and lr_schedule), and where training stands: defined with the checkpoint's schema.
using ckpt::JobIdentity;
using ckpt::TrainProgress;

// A checkpoint read from `file` and decoded (the state keeps the file's arrays).
struct LoadedState {
  ckpt::CheckpointState state;
  std::filesystem::path file;
};

// The fields a resume may be told to accept when they differ (--resume-override).
inline constexpr const char* kOverridableFields[] = {"data", "batch_size", "lr_schedule"};
// Parses "data,batch_size"; throws UsageError naming the flag and the valid fields.
std::vector<std::string> parse_resume_override(const std::string& text);

// Throws CheckpointError (exit 4) when `s` (read from `file`) was written by another job: the
// first field that differs and its two values, unless `overrides` names it (then a warning on
// `log`). A checkpoint without these attributes (written before they existed) is not checked,
// and says so on `log`.
void check_same_job(const ckpt::CheckpointState& s, const std::string& file, const JobIdentity& now,
                    const std::vector<std::string>& overrides, std::ostream& log);

// Where each of `workers` data shards starts after restoring `p`: the saved cursors when the
// worker count is unchanged; otherwise every worker starts the epoch after the furthest saved
// one (the shards of a different count are different, so a mid-epoch position is meaningless;
// the rest of that epoch is skipped rather than replayed).
std::vector<LoaderCursor> start_cursors(const TrainProgress& p, int workers);

// The checkpoint to resume from, as --resume and --ckpt-dir say: auto takes the newest valid
// checkpoint of this model in the directory, falling back past damaged ones (each reported on
// `log` and as a checkpoint_skipped event); never refuses a directory that already holds
// checkpoints; a PATH is read and checked. Empty: start fresh. Throws CheckpointError.
// The checkpoint found must be of this job (check_same_job against `job`, --resume-override).
// Its data cursors are in batches of this run's size (--resume-override batch_size). `schedule`:
// this run's learning-rate schedule (RunSetup::schedule), which the checkpoint's must match.
std::optional<LoadedState> find_resume_checkpoint(const TrainConfig& cfg, const Model& model, const JobIdentity& job,
                                                  const LrSchedule& schedule, MetricsWriter& metrics,
                                                  std::ostream& log);

// A checkpoint named on the command line: a file (read and verified), or a directory (its newest
// valid checkpoint). Throws CheckpointError ("not found", damaged, none valid).
ckpt::Loaded load_named_checkpoint(const std::string& path);
// The same, decoded (ckpt::decode's errors too).
LoadedState load_named_state(const std::string& path);

// --ckpt-dir must take durable files before any work is done (a read-only or full mount would
// otherwise be found at the first checkpoint, after training). Throws DataError (exit 3).
void check_checkpoint_dir(const TrainConfig& cfg);

// --ckpt-sync auto: how long training waits for a checkpoint to be durable before it goes on with
// the write in the background: a quarter of --failure-timeout (workers take a parameter server
// silent for that long as lost), at most 1 s.
double ckpt_sync_bound(const TrainConfig& cfg);
// After a snapshot was submitted: waits as --ckpt-sync says (on: until durable or failed; auto: up
// to ckpt_sync_bound(); off: not at all). True when training waited until nothing was left to write.
bool wait_until_durable(ckpt::AsyncWriter& writer, const TrainConfig& cfg);

// What became of this run's checkpoint writes (both trainers).
struct CheckpointTally {
  int failures = 0;
  std::int64_t durable_step = -1;  // the newest checkpoint this run published
  // Reports the writer's finished writes: a `checkpoint` event for each published one; for each
  // failed one a line on `log` and a `checkpoint_failed` event (the earlier checkpoints are
  // untouched, and training goes on unless --ckpt-fail stop). Returns the published ones.
  std::vector<ckpt::Written> report(std::vector<ckpt::Written> done, const TrainConfig& cfg,
                                    MetricsWriter& metrics, std::ostream& log);
  // --ckpt-fail stop and a write failed: training stops now.
  bool stop(const TrainConfig& cfg) const { return failures > 0 && cfg.ckpt_fail == "stop"; }
  // The closing line after failures: how many, and the newest checkpoint on disk.
  void summarize(const TrainConfig& cfg, std::ostream& log) const;
};

// The trainer's state as a checkpoint's (views of these buffers, valid while they are). `extra`:
// each data slot's momentum under --momentum-correction dana (`momentum`: their mean), and the
// gap-aware penalty's mean steps under --lr-scaling gap. Throws DataError when a value is not
// finite (training diverged: such a state is never checkpointed).
ckpt::CheckpointState checkpoint_state(const Model& model, const FlatTensors& params, const FlatTensors& momentum,
                                       const FlatTensors& bn_stats, const TrainProgress& progress,
                                       const std::string& config_json, const JobIdentity& job,
                                       const ExtraOptimizerState& extra = {});
// Copies the state into a checkpoint (the in-memory snapshot): checkpoint_state, then
// ckpt::encode. `reuse`, a checkpoint made by an earlier call for the same model
// (ckpt::AsyncWriter::take_spare), is filled in place without allocating; anything else is rebuilt.
ckpt::Checkpoint make_checkpoint(const Model& model, const FlatTensors& params,
                                 const FlatTensors& momentum, const FlatTensors& bn_stats,
                                 const TrainProgress& progress, const std::string& config_json,
                                 const JobIdentity& job, ckpt::Checkpoint&& reuse = {},
                                 const ExtraOptimizerState& extra = {});

// Throws CheckpointError unless `s` holds exactly this model's arrays.
void check_compatible(const ckpt::CheckpointState& s, const Model& model);

// Puts a compatible checkpoint's state back; returns its progress.
TrainProgress restore_checkpoint(const ckpt::CheckpointState& s, const Model& model, FlatTensors& params,
                                 FlatTensors& momentum, FlatTensors& bn_stats);
// After restore_checkpoint, under dana: each data slot's momentum from the checkpoint when it
// holds one per slot for as many slots, else every slot starts from its /optimizer/momentum.
void restore_slot_momenta(const ckpt::CheckpointState& s, const FlatTensors& momentum, std::span<FlatTensors> slots);
// After restore_checkpoint, under --lr-scaling gap: the penalty's mean steps into `out`. False
// when the checkpoint holds none (written under another policy: they start afresh, from zero);
// throws CheckpointError when it records them but they are missing or misshapen (damaged).
bool restore_gap_mean_step(const ckpt::CheckpointState& s, FlatTensors& out);

// A standby's replica of the parameter server (--ps-standby, ps/resilience/replica.hpp) as a checkpoint. The
// parameter server's progress and configuration travel in each replica as this record.
// `revocations`: of this attempt so far (workers and parameter servers lost or left), carried to a
// parameter server that takes over (its summary counts the whole attempt's).
std::string replica_record_json(const TrainProgress& p, const std::string& config_json, int revocations = 0);
// The record's `revocations` (0 when it has none).
int replica_revocations(const std::string& record);
struct ReplicaWritten {
  std::filesystem::path file;
  double seconds = 0;  // from the call to durable
};
// Writes `r` into --ckpt-dir at once (synchronously, published atomically like every checkpoint):
// the optimizer state as the parameter server keeps it under --momentum-correction and
// --lr-scaling. Throws CheckpointError.
// The checkpoint's `written_by` attribute names the standby (`label`, "worker rank 1"); a
// resume says it resumed from a replica.
ReplicaWritten write_replica_checkpoint(const TrainConfig& cfg, const Model& model, const JobIdentity& job,
                                        const ReplicaState& r, const std::string& label);

}  // namespace mt
