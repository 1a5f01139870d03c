// The parameter server's reports of a takeover (ULFM, docs/fault-model.md, "Takeover under ULFM"
// and "Zero-loss takeover"): the new parameter server's start, its replay of the survivors'
// journaled pushes, its first step; a surviving shard following it; a handover on a notice.
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <string>
#include <utility>

#include "app/ps_report.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/resilience/notices.hpp"

namespace mt {

void PsReport::replayed(const Replayed& e) {
  if (lead()) replayed_ = e;
  if (cfg_.quiet) return;
  std::ostringstream line;
  line << "mpi_trainer: parameter-server shard " << e.shard << ": replayed " << e.replayed
       << " journaled push(es) after its start state of step " << e.replica_step << " (" << e.unacknowledged
       << " never acknowledged, " << e.not_applied << " counted but not applied, as before) in " << std::fixed
       << std::setprecision(3) << e.seconds << " s: " << e.lost << " update(s) lost; it goes on at global step "
       << e.global_step;
  log(line.str());
}

void PsReport::took_over(const Started& e) {
  const std::int64_t lost = replayed_ ? replayed_->lost : takeover_->first_step - takeover_->replica_step;
  if (!cfg_.quiet) {
    log_ << "mpi_trainer: " << takeover_->by << " took over as the parameter server at global step "
         << takeover_->first_step << " from its replica of step " << takeover_->replica_step << " ("
         << (replayed_ ? std::to_string(replayed_->replayed) + " journaled push(es) replayed, " : std::string()) << lost
         << " update(s) lost, replica written as " << takeover_->file << " in " << std::fixed << std::setprecision(3)
         << takeover_->write_seconds << " s), " << e.workers << " worker(s) go on";
    if (e.shards > 1)  // every shard starts from the replica: the survivors' parts too
      log_ << "; shard " << takeover_->lost_shard << " of " << e.shards << " was lost: this worker is shard 0 now, the "
           << e.shards - 1 << " surviving shard(s) follow as shards 1.." << e.shards - 1
           << ", every part from the replica" << (replayed_ ? " and the journals" : "");
    log_ << '\n' << std::defaultfloat << std::flush;
  }
  if (cfg_.eval_every_steps > 0) eval_.emplace(model_, setup_, cfg_.batch_size, 1);
  write_status("running", e.global_step, 0, 0);
}

void PsReport::followed(const Followed& e) {
  // From here on this process is a shard > 0: no metrics, status file or checkpoints of its own
  // (the new shard 0 writes them); a periodic checkpoint it was writing still completes.
  shard_ = e.shard;
  if (cfg_.quiet) return;
  std::string lost;
  for (const int k : e.lost_shards)
    lost += (lost.empty() ? "" : ", ") + std::to_string(k);
  log_ << "mpi_trainer: parameter-server shard " << lost << " lost: shard " << e.old_shard << " (rank " << e.rank
       << ") follows the takeover by worker rank " << e.lead_rank << " at global step " << e.global_step << " as shard "
       << e.shard << ", its part from the replica of step " << e.replica_step << '\n'
       << std::flush;
}

void PsReport::handed_over(std::int64_t global_step, int standby, int signo) {
  // Before the process leaves: its writes in flight (a periodic checkpoint) are given up, the
  // replica is newer.
  metrics_.write(nlohmann::ordered_json{{"event", "ps_handover"},
                                        {"global_step", global_step},
                                        {"to", worker_label(standby)},
                                        {"signal", signal_name(signo)},
                                        {"unix_time", unix_now()}});
  log_ << "mpi_trainer: parameter server: " << signal_name(signo) << ": handed over to its standby ("
       << worker_label(standby) << ") at global step " << global_step
       << ", which takes it over in this job; this process leaves\n"
       << std::flush;
}

void PsReport::first_step(std::int64_t global_step, double seconds_since_start) {
  if (takeover_) {
    const double seconds = unix_now() - takeover_->lost_at;
    takeover_event_ = nlohmann::ordered_json{
        {"event", "ps_takeover"},
        {"by", takeover_->by},
        {"global_step", takeover_->first_step},
        {"replica_step", takeover_->replica_step},
        {"replayed_from_step", replayed_ ? replayed_->replica_step : takeover_->replica_step},
        {"replayed", replayed_ ? replayed_->replayed : 0},
        {"replayed_unacknowledged", replayed_ ? replayed_->unacknowledged : 0},
        {"lost_updates", replayed_ ? replayed_->lost : takeover_->first_step - takeover_->replica_step},
        {"replay_seconds", replayed_ ? replayed_->seconds : 0.0},
        {"first_applied_step", global_step},
        {"seconds_to_first_step", seconds},
        {"replica_write_seconds", takeover_->write_seconds},
        {"takeovers", takeover_->takeovers},
        {"lost_shard", takeover_->lost_shard},
        {"lost_at_unix", takeover_->lost_at},
        {"unix_time", unix_now()}};
    metrics_.write(takeover_event_);
    if (!cfg_.quiet)
      log_ << "mpi_trainer: parameter server (" << takeover_->by << "): first step applied " << std::fixed
           << std::setprecision(3) << seconds << " s after the loss of the previous one\n"
           << std::defaultfloat << std::flush;
  }
  metrics_.write(nlohmann::ordered_json{{"event", "first_step"},
                                        {"global_step", global_step},
                                        {"unix_time", unix_now()},
                                        {"seconds_since_start", seconds_since_start}});
}

// The history's first line of this parameter server (app/history_log.hpp): the state it starts
// from, a checkpoint's (or 0) or, taking a lost one over, its replica's or the surviving shard's
// (the replay's start); then a takeover's replayed pushes, held until the epoch was claimed.
void PsReport::start_history(const Started& e) {
  if (push_log_.is_open()) {
    if (takeover_)
      push_log_.started(PushLog::Start::kTakeover, replayed_ ? replayed_->replica_step : takeover_->replica_step,
                        epoch_);
    else
      push_log_.started(PushLog::Start::kStart, e.global_step, epoch_);
    for (const Pushed& p : replayed_lines_)
      push_log_.pushed(p, epoch_);
  }
  replayed_lines_.clear();
  history_started_ = true;
}

// The epoch fences a parameter server that was taken for lost but lives (hung, then woken: ULFM's
// takeover of a hung PS, docs/fault-model.md "Epochs"): from the moment its successor claims the
// next epoch, its checkpoints are not published (the writer's fence, right before the rename) and
// its status is not written; its shard ends at its next poll (Shard::check_superseded).
void PsReport::claim_epoch() {
  if (cfg_.ckpt_dir.empty()) return;
  epoch_ = ckpt::claim_ps_epoch(cfg_.ckpt_dir);
  epoch_checked_ = Clock::now();
  metrics_.set_gate([this] { return !superseded(); });
  if (!writer_) return;
  writer_->set_fence([dir = std::filesystem::path(cfg_.ckpt_dir), mine = epoch_] {
    if (const std::int64_t now = ckpt::read_ps_epoch(dir); now > mine)
      throw PsSuperseded("not published: the parameter server of epoch " + std::to_string(now) +
                       " has taken this one's place (epoch " + std::to_string(mine) + ")");
  });
}

// The file is read again only after half a second without a look at it (a pause: this process
// stopped), so that the metrics' gate costs a clock read per event while it runs.
bool PsReport::superseded() {
  if (epoch_ == 0) return false;
  if (superseded_) return true;
  const auto now = Clock::now();
  if (seconds_between(std::exchange(epoch_checked_, now), now) < 0.5) return false;
  try {
    superseded_ = ckpt::read_ps_epoch(cfg_.ckpt_dir) > epoch_;
  } catch (const Error&) {
    return false;  // unreadable: not known to be superseded
  }
  return superseded_;
}

}  // namespace mt
