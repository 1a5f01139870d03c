// The app's side of the parameter-server runtime (ps/ps.hpp): what the job log, the metrics file,
// the status file for launchers and the checkpoint directory see of a run, and what it costs.
// One per shard; the reports and files are shard 0's.
#pragma once

#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/background_eval.hpp"
#include "app/checkpointing.hpp"
#include "app/config.hpp"
#include "app/history_log.hpp"
#include "app/metrics.hpp"
#include "plan/plan.hpp"
#include "app/run_setup.hpp"
#include "ckpt/async_writer.hpp"
#include "core/clock.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"

namespace mt {

// The status file launchers read (docs/fault-model.md, "Exit codes and the status file"):
// --status-file, else <ckpt-dir>/run-status.json, else none ("").
std::string run_status_path(const TrainConfig& cfg);
// Writes `fields` (state, exit_code, ...) plus pid, host and unix_time, replacing the file
// atomically; nothing for an empty path.
void write_run_status(const std::string& path, nlohmann::ordered_json fields);
// The state the status file at `path` says (running, done, requeue, lost, failed); "" when there
// is none or it cannot be read.
std::string read_run_state(const std::string& path);
// The status `failed` of a run that ended before training (a bad command line, a rank not
// ready): launchers do not retry 2, 3 or 4. Best effort: the error may be that the directory
// cannot take a file. train_steps 0: not known (written as null).
void write_failed_status(const TrainConfig& cfg, int exit_code, const std::string& what);

class PsReport final : public PsEvents, public SnapshotSink {
 public:
  PsReport(const TrainConfig& cfg, const RunSetup& setup, const Model& model, std::vector<std::string> worker_types,
           int shard, std::ostream& log);

  // PsEvents
  void log(const std::string& line) override;
  void started(const Started& e) override;
  void first_step(std::int64_t global_step, double seconds_since_start) override;
  void progress(const Progress& e) override;
  void departure(const Departure& e) override;
  void join(const Join& e) override;
  // The history (--push-log, app/history_log.hpp): a takeover's replayed pushes come before its
  // epoch is claimed (started), and are written after its takeover line.
  void pushed(const Pushed& e) override {
    if (!push_log_.is_open()) return;
    if (!history_started_)
      replayed_lines_.push_back(e);
    else
      push_log_.pushed(e, epoch_);
  }
  std::int64_t epoch() const override { return epoch_; }
  void handed_over(std::int64_t global_step, int standby, int signo) override;
  // The runtime's typed events worded for the job log (app/ps_messages.cpp).
  void joins_open(int max_workers, const std::string& port_file, bool ulfm) override;
  void join_refused(const JoinRefused& e) override;
  void waiting_for_joins(std::int64_t global_step) override;
  void standbys_chosen(const StandbysChosen& e) override;
  void no_handover(const NoHandover& e) override;
  void followed(const Followed& e) override;
  void stopping(int shard, const std::string& why, std::int64_t global_step, int active_workers) override;
  void eval_skipped(std::int64_t global_step) override;
  void snapshot_taken(std::int64_t global_step, double stall_seconds, double gather_seconds, bool final) override;
  std::optional<Evaluated> finished(const Finished& e) override;
  void failed(std::int64_t global_step, int exit_code, const std::string& what) override;
  bool superseded() override;  // (app/ps_takeover_report.cpp)

  // SnapshotSink
  PsStart restore(FlatTensors& params, std::span<FlatTensors> momenta, FlatTensors* gap_mean_step, FlatTensors& bn_stats,
                  int slots) override;
  bool checkpoints() const override { return writer_.has_value(); }
  bool evaluates() const override { return eval_.has_value(); }
  bool eval_busy() override { return eval_ && eval_->busy(); }
  void checkpoint(const Snapshot& s) override;
  std::string replica_record(std::int64_t global_step, const std::vector<LoaderCursor>& slot_cursors,
                             double run_seconds, double lr, const std::vector<WorkerUsage>& workers) override;
  void evaluate(const Snapshot& s) override;
  std::string poll() override;

  // This parameter server took a lost one over inside the job (ULFM, docs/fault-model.md,
  // "Takeover under ULFM"): it starts from the replica written as `file` instead of the newest
  // checkpoint, in the same attempt (no config or resume event), and reports a `ps_takeover`
  // event at its first applied step. Called before the runtime starts.
  struct TakeoverReport {
    std::string file;              // the replica, written as a checkpoint
    double write_seconds = 0;      // its write, durable
    std::string by;                // "worker rank 1"
    std::int64_t replica_step = 0;  // the replica's global step
    std::int64_t first_step = 0;    // the highest any survivor saw: the count goes on from it
    double lost_at = 0;             // unix time the loss was learned
    int takeovers = 1;              // in this attempt, this one included
    int prior_revocations = 0;      // of this attempt before the loss (the replica's record)
    int lost_shard = 0;             // the old index of the shard lost (--num-ps > 1)
  };
  void take_over(TakeoverReport t) { takeover_ = std::move(t); }
  void replayed(const Replayed& e) override;  // (app/ps_takeover_report.cpp)

  // What earlier attempts did (a resume), and the totals once finished.
  const TrainProgress& previous() const { return prev_; }
  double cost_usd() const { return cost_usd_; }
  // The job's exit code: the runtime's, or 4 when a checkpoint write failed.
  int exit_code(int runtime_code) const;

 private:
  bool lead() const { return shard_ == 0; }
  // Every shard for `run_seconds` of this attempt, each worker for its active seconds, plus
  // earlier attempts.
  double cost(double run_seconds, const std::vector<WorkerUsage>& workers) const;
  TrainProgress progress_of(const Snapshot& s) const;
  TrainProgress progress_at(std::int64_t global_step, const std::vector<LoaderCursor>& slot_cursors,
                            double run_seconds, double lr, const std::vector<WorkerUsage>& workers) const;
  void write_status(const std::string& state, std::int64_t global_step, int exit_code, int revocations,
                    const std::string& error = {});
  void report_written();
  // Shard 0 at its start (a takeover's too): the next epoch of the checkpoint directory, and the
  // checkpoint writer fenced with it (app/ps_takeover_report.cpp).
  void claim_epoch();
  void start_history(const Started& e);
  void report_evals(const std::vector<BackgroundEval::Done>& done);

  const TrainConfig& cfg_;
  const RunSetup& setup_;
  const Model& model_;
  const std::vector<std::string> types_;
  int shard_;  // changes once: a surviving shard 0 follows a takeover as another shard (followed)
  std::ostream& log_;
  MetricsWriter metrics_;
  PushLog push_log_;
  bool history_started_ = false;  // the push log's start or takeover line is written
  std::vector<Pushed> replayed_lines_;
  bool durable_wait_ = false;  // the last snapshot's write was durable before training went on
  const std::string status_path_;
  std::int64_t epoch_ = 0;  // this parameter server's epoch (claim_epoch); 0: none (no --ckpt-dir)
  Clock::time_point epoch_checked_;  // superseded()'s last read of the epoch file
  bool superseded_ = false;          // a newer epoch was seen: nothing more is written
  TrainProgress prev_;
  std::string config_json_ = "{}";
  std::optional<ckpt::AsyncWriter> writer_;
  std::optional<BackgroundEval> eval_;
  // The stop, for the moment its checkpoint is durable.
  std::optional<Clock::time_point> stop_at_;
  std::int64_t stop_step_ = -1;
  std::string stop_reason_;
  bool stop_durable_reported_ = false;
  double cost_usd_ = 0;
  CheckpointTally tally_;
  // The live prediction of the progress lines and metrics (plan/plan.hpp, predict_finish): each
  // worker's type and billed run seconds (end < 0 while it runs), and each type's revocation model.
  struct Billed {
    std::string type;
    double start = 0, end = -1;
  };
  std::map<int, Billed> billed_;
  std::map<std::string, RevocationModel> predict_models_;
  std::optional<TakeoverReport> takeover_;
  int departures_ = 0;  // workers lost or left under this parameter server
  // This attempt's revocations before this parameter server: those its predecessor counted, and
  // the predecessor itself (a takeover).
  int earlier_revocations() const { return takeover_ ? takeover_->prior_revocations + 1 : 0; }
  nlohmann::ordered_json takeover_event_;  // the ps_takeover event, for the summary
  std::optional<Replayed> replayed_;       // this (new) shard 0's replay of the journals
  void took_over(const Started& e);        // started() after a takeover
  LivePrediction predict(const Progress& e);
};

}  // namespace mt
