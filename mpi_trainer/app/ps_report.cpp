#include "app/ps_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <thread>

#include "plan/cluster_sim.hpp"
#include "app/config_event.hpp"
#include "app/device.hpp"
#include "app/emulation.hpp"
#include "app/learning_check.hpp"
#include "core/atomic_file.hpp"
#include "ps/ps.hpp"
#include "ps/exchange/update_policy.hpp"

namespace mt {

namespace {

// What the update policy now does for `active` workers, for the revocation and join lines.
std::string policy_note(const TrainConfig& c, int active, double momentum) {
  std::ostringstream s;
  if (c.lr_scaling == "active-workers" && active > 0) s << ", learning rate / " << active;
  // The momentum follows the worker count under implicit, and under dana + gap with --momentum auto
  // (the config's policy strings are resolved: train_dist).
  const MomentumCorrection correction = parse_momentum_correction(c.momentum_correction);
  const bool follows = correction == MomentumCorrection::kImplicit ||
                       momentum_follows_workers(c.momentum_auto, correction, parse_lr_scaling(c.lr_scaling));
  if (follows && active > 0) s << ", momentum " << std::setprecision(3) << momentum;
  return s.str();
}

nlohmann::ordered_json or_null(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s);
}

}  // namespace

PsReport::PsReport(const TrainConfig& cfg, const RunSetup& setup, const Model& model,
                   std::vector<std::string> worker_types, int shard, std::ostream& log)
    : cfg_(cfg),
      setup_(setup),
      model_(model),
      types_(std::move(worker_types)),
      shard_(shard),
      log_(log),
      metrics_(shard == 0 ? cfg.metrics : std::string(), shard == 0 ? cfg.tensorboard : std::string()),
      push_log_(shard == 0 ? cfg.push_log : std::string()),
      status_path_(lead() ? run_status_path(cfg) : std::string()) {
  if (lead()) {
    std::vector<std::string> types = types_;
    types.push_back(cfg.instance_type);  // a joiner's
    predict_models_ = revocation_models(prediction_model(cfg.revocation_model, setup.transient), types);
  }
}

LivePrediction PsReport::predict(const Progress& e) {
  const bool first = billed_.empty();  // the first window: every worker started with the run
  for (const auto& w : e.workers) billed_.try_emplace(w.rank, Billed{w.type, first ? 0.0 : e.elapsed_seconds, -1});
  double spent =
      prev_.cost_usd + cfg_.num_ps * setup_.prices.cost_usd(cfg_.ps_type, setup_.ps_transient, e.elapsed_seconds);
  for (const auto& [rank, b] : billed_)
    spent += setup_.prices.cost_usd(b.type, setup_.transient, std::max(0.0, (b.end >= 0 ? b.end : e.elapsed_seconds) - b.start));
  std::vector<LiveWorker> live;
  for (const auto& w : e.workers) {
    if (!w.active) continue;
    double rate = w.images_per_second / double(cfg_.batch_size);
    if (rate <= 0 && w.step_seconds > 0) rate = 1.0 / w.step_seconds;
    live.push_back(LiveWorker{w.type, rate, e.elapsed_seconds - billed_[w.rank].start});
  }
  return predict_finish(cfg_.train_steps - e.global_step, live, predict_models_, cfg_.time_scale, setup_.prices,
                        setup_.transient, spent,
                        cfg_.num_ps * setup_.prices.cost_usd(cfg_.ps_type, setup_.ps_transient, 1.0));
}

void PsReport::log(const std::string& line) { log_ << line << '\n' << std::flush; }

PsStart PsReport::restore(FlatTensors& params, std::span<FlatTensors> momenta, FlatTensors* gap_mean_step,
                          FlatTensors& bn_stats, int slots) {
  MT_ASSERT(!momenta.empty(), "a momentum buffer");
  // Under dana (a momentum per data slot) the checkpoint's /optimizer/momentum is their mean.
  const bool per_slot = momenta.size() > 1;
  std::optional<FlatTensors> mean;
  if (per_slot) mean.emplace(model_.params());
  FlatTensors& momentum = per_slot ? *mean : momenta[0];
  // A takeover starts from the replica it just wrote; a run from the newest checkpoint, if any.
  std::optional<LoadedState> found;
  if (takeover_) {
    found = load_named_state(takeover_->file);  // checked against the model as it is restored
  } else {
    found = find_resume_checkpoint(cfg_, model_, setup_.job, setup_.schedule, metrics_, log_);
  }
  if (found) {
    prev_ = restore_checkpoint(found->state, model_, params, momentum, bn_stats);
    if (per_slot) restore_slot_momenta(found->state, momentum, momenta);
    if (gap_mean_step && !restore_gap_mean_step(found->state, *gap_mean_step) && !cfg_.quiet)
      log_ << "mpi_trainer: the checkpoint holds no gap-aware mean steps (written under another --lr-scaling): "
              "they start afresh, each parameter's first updates penalized by the staleness\n";
  }
  if (found && !takeover_) {
    prev_.attempts += 1;
    const std::string& by = found->state.written_by;
    if (!cfg_.quiet)
      log_ << "mpi_trainer: resumed from " << found->file.string() << " at global step " << prev_.global_step
           << " (attempt " << prev_.attempts << ")"
           << (by.empty() ? "" : " (a standby's replica, written by " + by + ")") << "\n";
    nlohmann::ordered_json resume{{"event", "resume"},
                                  {"file", found->file.string()},
                                  {"global_step", prev_.global_step},
                                  {"attempt", prev_.attempts},
                                  {"saved_workers", prev_.worker_cursors.size()}};
    if (!by.empty()) resume["written_by"] = by;
    metrics_.write(resume);
  }
  if (!cfg_.ckpt_dir.empty()) {
    writer_.emplace(cfg_.ckpt_dir, cfg_.ckpt_keep);
    // The first snapshot's memory, allocated now rather than in the first checkpoint's stall.
    const ExtraOptimizerState extra{per_slot ? momenta : std::span<FlatTensors>(), gap_mean_step};
    writer_->give_spare(make_checkpoint(model_, params, momentum, bn_stats, prev_, config_json_, setup_.job, {}, extra));
  }
  return PsStart{prev_.global_step, start_cursors(prev_, slots)};
}

void PsReport::started(const Started& e) {
  const std::vector<Emulation> emulated = emulations(cfg_, types_);
  nlohmann::ordered_json config = config_event(cfg_, setup_, model_.param_count(), emulated);
  add_policy_fields(config, cfg_, types_);
  config["mpi"] = mpi_library_name();
  config["failure_detection"] = failure_detection();
  config["num_ps"] = e.shards;
  config["workers"] = e.workers;
  config["ckpt_dir"] = cfg_.ckpt_dir;
  config["resume"] = cfg_.resume;
  config["synthetic_gradients"] = cfg_.synthetic_gradients;
  config["processes"] = e.workers + e.shards;
  config_json_ = config.dump();
  claim_epoch();
  start_history(e);
  if (takeover_) {  // the same attempt goes on: its config event stands
    took_over(e);
    return;
  }
  metrics_.write(config);
  if (!cfg_.quiet)
    log_ << "mpi_trainer: parameter server: " << e.shards << " shard(s), " << e.workers << " worker(s), "
         << setup_.spec.name << " (" << model_.param_count() << " parameters) on " << setup_.data.format << ", "
         << cfg_.train_steps << " global steps of " << cfg_.batch_size << ", lr " << setup_.schedule.describe()
         << describe_stability(rate_stability(cfg_, static_cast<int>(types_.size())), setup_.schedule)
         << ", lr scaling " << cfg_.lr_scaling << emulating_note(cfg_, emulated)
         << describe_momentum(parse_momentum_correction(cfg_.momentum_correction), cfg_.momentum, e.workers,
                              e.momentum_applied)
         << (cfg_.push_precision == "bf16" ? ", bf16 pushes" : "") << '\n'
         << std::flush;
  if (cfg_.eval_every_steps > 0) eval_.emplace(model_, setup_, cfg_.batch_size, 1);
  write_status("running", e.global_step, 0, 0);
}

void PsReport::progress(const Progress& e) {
  const LivePrediction predicted = predict(e);
  if (!cfg_.quiet) {
    log_ << format_progress(ProgressLine{e.global_step, cfg_.train_steps, e.loss, e.train_accuracy, e.lr,
                                         e.images_per_second, e.active_workers, e.mean_staleness})
         << format_prediction(predicted) << '\n'
         << std::flush;
  }
  nlohmann::ordered_json per_worker = nlohmann::ordered_json::array();
  for (const auto& w : e.workers)
    per_worker.push_back(nlohmann::ordered_json{{"rank", w.rank},
                                                {"instance_type", w.type},
                                                {"pushes", w.pushes},
                                                {"images_per_second", w.images_per_second},
                                                {"mean_staleness", w.mean_staleness},
                                                {"step_seconds", w.step_seconds},
                                                {"active", w.active}});
  metrics_.write(nlohmann::ordered_json{{"event", "progress"},
                                        {"global_step", e.global_step},
                                        {"loss", e.loss},
                                        {"train_accuracy", e.train_accuracy},
                                        {"lr", e.lr},
                                        {"momentum", e.momentum},
                                        {"images_per_second", e.images_per_second},
                                        {"active_workers", e.active_workers},
                                        {"mean_staleness", e.mean_staleness},
                                        {"dropped_stale_pushes", e.dropped_stale_pushes},
                                        {"elapsed_seconds", e.elapsed_seconds},
                                        {"eta_seconds", e.eta_seconds < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(e.eta_seconds)},
                                        {"predicted_seconds_left", prediction_seconds_json(predicted)},
                                        {"predicted_cost_usd", prediction_cost_json(predicted)},
                                        {"workers", per_worker}});
}

void PsReport::departure(const Departure& e) {
  ++departures_;
  if (const auto it = billed_.find(e.rank); it != billed_.end()) it->second.end = e.elapsed_seconds;
  metrics_.write(nlohmann::ordered_json{
      {"event", "revocation"},
      {"global_step", e.global_step},
      {"rank", e.rank},
      {"instance_type", e.type},
      {"cause", e.lost ? "lost" : "notice"},
      {"detected_by", e.detected_by},
      {"detail", e.detail},
      {"signal", e.signo > 0 ? nlohmann::ordered_json(signal_name(e.signo)) : nlohmann::ordered_json()},
      {"silent_seconds", e.silent_seconds},
      {"unix_time", unix_now()},
      {"elapsed_seconds", e.elapsed_seconds},
      {"work_lost_steps", e.work_lost_steps},
      {"work_lost_seconds", e.work_lost_seconds},
      {"active_seconds", e.active_seconds},
      {"active_workers", e.active_workers},
      {"lr_divisor", e.lr_divisor},
      {"momentum", e.momentum}});
  if (!cfg_.quiet)
    log_ << "revocation: worker rank " << e.rank << " (" << e.type << ") " << (e.lost ? "lost" : "left")
         << " at global step " << e.global_step << ": " << e.detail
         << (e.lost && e.detected_by != "mpi" ? " (silent for " + std::to_string(e.silent_seconds).substr(0, 4) + " s)"
                                              : std::string())
         << "; "
         << e.active_workers << " worker(s) remain"
         << policy_note(cfg_, e.active_workers, e.momentum) << '\n'
         << std::flush;
}

void PsReport::join(const Join& e) {
  metrics_.write(nlohmann::ordered_json{{"event", "join"},
                                        {"global_step", e.global_step},
                                        {"rank", e.rank},
                                        {"slot", e.slot},
                                        {"instance_type", e.type},
                                        {"active_workers", e.active_workers},
                                        {"lr_divisor", e.lr_divisor},
                                        {"momentum", e.momentum},
                                        {"rejoined", e.rejoined},
                                        {"unix_time", unix_now()}});
  if (!cfg_.quiet)
    log_ << "join: worker rank " << e.rank << " (" << e.type << ") " << (e.rejoined ? "rejoined" : "joined")
         << " at global step " << e.global_step
         << " in data slot " << e.slot << "; " << e.active_workers << " worker(s)"
         << policy_note(cfg_, e.active_workers, e.momentum) << '\n'
         << std::flush;
}

void PsReport::stopping(int shard, const std::string& why, std::int64_t global_step, int active_workers) {
  if (!cfg_.quiet)
    log_ << "mpi_trainer: parameter server shard " << shard << ": " << why << " at global step " << global_step
         << (lead() ? (writer_ ? ": checkpointing now, stopping the workers"
                               : ": stopping the workers (no --ckpt-dir: nothing is saved)")
                    : ": stopping the workers")
         << '\n'
         << std::flush;
  if (!lead()) return;
  stop_at_ = Clock::now();
  stop_step_ = global_step;
  stop_reason_ = why;
  metrics_.write(nlohmann::ordered_json{{"event", "stop"},
                                        {"reason", why},
                                        {"global_step", global_step},
                                        {"unix_time", unix_now()},
                                        {"active_workers", active_workers}});
}

void PsReport::eval_skipped(std::int64_t global_step) {
  metrics_.write(nlohmann::ordered_json{
      {"event", "eval_skipped"}, {"global_step", global_step}, {"reason", "the previous evaluation is still running"}});
}

void PsReport::snapshot_taken(std::int64_t global_step, double stall_seconds, double gather_seconds, bool final) {
  nlohmann::ordered_json j{
      {"event", "checkpoint_snapshot"}, {"global_step", global_step}, {"stall_seconds", stall_seconds}};
  if (final) {
    j["final"] = true;
  } else {
    j["gather_seconds"] = gather_seconds;
    j["durable_before_training"] = durable_wait_;
  }
  metrics_.write(j);
}

double PsReport::cost(double run_seconds, const std::vector<WorkerUsage>& workers) const {
  double c = prev_.cost_usd + cfg_.num_ps * setup_.prices.cost_usd(cfg_.ps_type, setup_.ps_transient, run_seconds);
  for (const auto& w : workers)
    c += setup_.prices.cost_usd(w.type, setup_.transient, w.active_seconds);
  return c;
}

TrainProgress PsReport::progress_at(std::int64_t global_step, const std::vector<LoaderCursor>& slot_cursors,
                                    double run_seconds, double lr, const std::vector<WorkerUsage>& workers) const {
  TrainProgress p = prev_;
  p.global_step = global_step;
  p.worker_cursors.clear();
  for (const auto& c : slot_cursors)
    p.worker_cursors.push_back({c.epoch, c.position});
  // Informational for the parameter server (restores read worker_cursors): data slot 0's cursor.
  if (!slot_cursors.empty()) {
    p.epoch = slot_cursors.front().epoch;
    p.position = slot_cursors.front().position;
  }
  p.train_seconds = prev_.train_seconds + run_seconds;
  p.cost_usd = cost(run_seconds, workers);
  p.lr = lr;
  return p;
}

TrainProgress PsReport::progress_of(const Snapshot& s) const {
  return progress_at(s.global_step, s.slot_cursors, s.run_seconds, s.lr, s.workers);
}

std::string PsReport::replica_record(std::int64_t global_step, const std::vector<LoaderCursor>& slot_cursors,
                                     double run_seconds, double lr, const std::vector<WorkerUsage>& workers) {
  return replica_record_json(progress_at(global_step, slot_cursors, run_seconds, lr, workers), config_json_,
                             earlier_revocations() + departures_);
}

void PsReport::checkpoint(const Snapshot& s) {
  writer_->submit(
      make_checkpoint(model_, s.params, s.momentum, s.bn_stats, progress_of(s), config_json_, setup_.job, writer_->take_spare(),
                        s.extra));
  // --ckpt-sync: shard 0 applies no further push until the checkpoint is durable (or failed), or
  // (auto) for a bounded time.
  durable_wait_ = wait_until_durable(*writer_, cfg_);
}

void PsReport::evaluate(const Snapshot& s) { eval_->start(s.global_step, s.params, s.bn_stats); }

std::string PsReport::poll() {
  report_written();
  if (eval_) report_evals(eval_->take_done());
  return tally_.stop(cfg_) ? "a checkpoint write failed (--ckpt-fail stop)" : "";
}

int PsReport::exit_code(int runtime_code) const { return tally_.failures > 0 ? kExitCheckpoint : runtime_code; }

void PsReport::report_written() {
  if (!writer_) return;
  for (const auto& w : tally_.report(writer_->take_written(), cfg_, metrics_, log_)) {
    push_log_.checkpoint(w.global_step, epoch_);
    if (stop_at_ && !stop_durable_reported_ && w.global_step >= stop_step_) {
      // The stop's checkpoint is on disk (fsync'ed and published): the figure the cloud's grace
      // period (30 s on GCE, 2 min on EC2) must cover.
      stop_durable_reported_ = true;
      const double dt = since(*stop_at_);
      metrics_.write(nlohmann::ordered_json{{"event", "stop_checkpoint_durable"},
                                            {"global_step", w.global_step},
                                            {"seconds_after_stop", dt},
                                            {"file", w.file.string()}});
      if (!cfg_.quiet)
        log_ << "mpi_trainer: checkpoint of global step " << w.global_step << " durable " << std::fixed << std::setprecision(3) << dt
             << " s after the " << stop_reason_ << '\n'
             << std::flush;
    }
  }
}

void PsReport::report_evals(const std::vector<BackgroundEval::Done>& done) {
  for (const auto& d : done) {
    if (!cfg_.quiet)
      log_ << "eval step " << d.step << "  test_acc " << std::fixed << std::setprecision(4) << d.result.accuracy << "  test_loss "
           << d.result.loss << "  (" << std::setprecision(1) << d.seconds << " s, in the background)\n"
           << std::flush;
    metrics_.write(nlohmann::ordered_json{{"event", "eval"},
                                          {"global_step", d.step},
                                          {"test_accuracy", d.result.accuracy},
                                          {"test_loss", d.result.loss},
                                          {"eval_seconds", d.seconds},
                                          {"background", true}});
  }
}

void PsReport::write_status(const std::string& state, std::int64_t global_step, int exit_code, int revocations,
                            const std::string& error) {
  if (!lead() || superseded()) return;
  write_run_status(status_path_,
                   nlohmann::ordered_json{
                       {"state", state},
                       {"exit_code", state == "running" ? nlohmann::ordered_json() : nlohmann::ordered_json(exit_code)},
                       {"global_step", global_step},
                       {"train_steps", cfg_.train_steps},
                       {"attempt", prev_.attempts},
                       {"stopped_by", or_null(stop_reason_)},
                       {"revocations", revocations},
                       {"ps_epoch", epoch_ > 0 ? nlohmann::ordered_json(epoch_) : nlohmann::ordered_json()},
                       {"error", or_null(error)}});
}

// The runtime failed (an error, not a checkpoint write: those end through `finished`): the status
// says so with the error's code, so that a launcher retries only what a rerun can fix.
void PsReport::failed(std::int64_t global_step, int exit_code, const std::string& what) {
  // The status first: reporting may fail the same way (a full disk under --metrics).
  write_status("failed", global_step, exit_code, 0, what);
  if (writer_) writer_->flush();  // a checkpoint being written is finished, not torn
  try {
    if (writer_) report_written();
    metrics_.write(nlohmann::ordered_json{
        {"event", "error"}, {"global_step", global_step}, {"exit_code", exit_code}, {"error", what}});
  } catch (const Error&) {
  }
}

std::optional<PsEvents::Evaluated> PsReport::finished(const Finished& e) {
  const Snapshot& s = e.state;
  const double train_seconds = prev_.train_seconds + s.run_seconds;
  cost_usd_ = cost(s.run_seconds, s.workers);
  if (writer_ && s.global_step > e.start_step && s.global_step != e.last_snapshot_step) {
    const auto t = Clock::now();
    writer_->submit(
        make_checkpoint(model_, s.params, s.momentum, s.bn_stats, progress_of(s), config_json_, setup_.job, writer_->take_spare(),
                        s.extra));
    snapshot_taken(s.global_step, since(t), 0, /*final=*/true);
  }
  if (writer_) {
    writer_->flush();
    report_written();
  }
  if (eval_) report_evals(eval_->wait());

  std::optional<Evaluated> ev;
  if (!cfg_.synthetic_gradients && !e.stopped_early) {  // after a notice, time is short: no evaluation
    // The workers are gone: the whole node is the evaluator's.
    auto eval_backend =
        make_backend(setup_.device, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    Network net(model_, *eval_backend, cfg_.batch_size);
    const auto t_eval = Clock::now();
    const EvalResult r = evaluate_test_set(net, setup_.data.test, setup_.loader, s.params, s.bn_stats);
    ev = Evaluated{r.accuracy, r.loss};
    metrics_.write(nlohmann::ordered_json{{"event", "eval"},
                                          {"global_step", s.global_step},
                                          {"test_accuracy", r.accuracy},
                                          {"test_loss", r.loss},
                                          {"eval_seconds", since(t_eval)}});
  }
  nlohmann::ordered_json per_worker = nlohmann::ordered_json::array();
  for (const auto& w : s.workers)
    per_worker.push_back(nlohmann::ordered_json{
        {"rank", w.rank},
        {"instance_type", w.type},
        {"pushes", w.pushes},
        {"dropped_stale", w.dropped_stale},
        {"active_seconds", w.active_seconds},
        {"images_per_second", double(w.pushes) * cfg_.batch_size / std::max(w.active_seconds, 1e-9)},
        {"mean_staleness", w.mean_staleness},
        {"cost_usd", setup_.prices.cost_usd(w.type, setup_.transient, w.active_seconds)}});
  metrics_.write(nlohmann::ordered_json{{"event", "workers"}, {"workers", per_worker}});
  // The parameter servers lost and taken over in this attempt were revoked too, and the workers
  // their predecessors lost (the replica's record carries them).
  const int revocations = e.lost + e.left + earlier_revocations();
  nlohmann::ordered_json summary{
      {"event", "summary"},
      {"global_step", s.global_step},
      {"train_seconds", train_seconds},
      {"test_accuracy", ev ? nlohmann::ordered_json(ev->accuracy) : nlohmann::ordered_json()},
      {"cost_usd", cost_usd_},
      {"revocations", revocations},
      {"workers_start", e.workers_start},
      {"workers_end", e.workers_start + e.joined + e.rejoined - e.lost - e.left - e.retired},
      {"images_per_second", e.images_per_second},
      {"test_loss", ev ? nlohmann::ordered_json(ev->loss) : nlohmann::ordered_json()},
      {"max_staleness", e.max_staleness},
      {"dropped_stale_pushes", e.dropped_stale_pushes},
      {"rejected_pushes", e.rejected_pushes},
      {"lr_cuts", e.lr_cuts},
      {"num_ps", e.shards},
      {"model", setup_.spec.name},
      {"worker_types", types_},
      {"ps_type", cfg_.ps_type},
      {"pricing", cfg_.pricing},
      {"ps_pricing", cfg_.ps_pricing},
      {"attempts", prev_.attempts},
      {"resumed_from_step", prev_.global_step},
      {"lost_workers", e.lost},
      {"left_workers", e.left},
      {"joined_workers", e.joined},
      {"rejoined_workers", e.rejoined},
      {"retired_replacements", e.retired},
      {"shared_memory_workers", e.shm_workers},
      {"stopped_by", or_null(e.stop_reason)},
      {"checkpoint_failures", tally_.failures},
      {"exit_code", exit_code(e.exit_code)}};
  summary["ps_standby"] = e.standbys > 0 ? nlohmann::ordered_json{{"standbys", e.standbys},
                                                                  {"replicas", e.replicas},
                                                                  {"mean_interval_updates", e.replica_interval},
                                                                  {"mean_replica_seconds", e.replica_seconds}}
                                          : nlohmann::ordered_json();
  if (takeover_) {  // the parameter server lost and taken over in this attempt
    nlohmann::ordered_json t = takeover_event_.is_null() ? nlohmann::ordered_json{{"by", takeover_->by}} : takeover_event_;
    t.erase("event");
    summary["ps_takeover"] = t;
  }
  if (cfg_.synthetic_gradients) summary["synthetic_gradients"] = true;
  // Synthetic gradients learn nothing by design.
  add_warnings(summary, ev && !cfg_.synthetic_gradients
                            ? learned_nothing_warning(ev->accuracy, ev->loss, setup_.spec.classes,
                                                      cfg_, e.workers_start + e.joined)
                            : std::string());
  metrics_.write(summary);
  if (!cfg_.quiet) {
    log_ << (e.stopped_early ? "stopped: " : "done: ") << s.global_step << " global steps in " << std::fixed
         << std::setprecision(1) << train_seconds << " s by " << e.workers_start + e.joined << " worker(s) and "
         << e.shards << " PS shard(s), " << e.images_per_second << " img/s";
    if (ev) log_ << ", test accuracy " << std::setprecision(2) << 100.0 * ev->accuracy << "%";
    log_ << ", cost $" << std::setprecision(4) << cost_usd_ << " ("
         << (cfg_.pricing == cfg_.ps_pricing ? cfg_.pricing : "workers " + cfg_.pricing + ", PS " + cfg_.ps_pricing)
         << ")";
    if (revocations > 0) log_ << ", " << revocations << " revocation(s)";
    log_ << '\n';
    if (e.stopped_early)
      log_ << "stopped early (" << e.stop_reason << "): exit " << exit_code(e.exit_code)
           << (tally_.failures > 0 ? ", make --ckpt-dir writable (see above), then rerun with --resume auto"
               : writer_           ? ", rerun with --resume auto to continue from the checkpoint"
                                   : ", nothing was saved (no --ckpt-dir)")
           << '\n';
    log_ << "summary: " << summary.dump() << '\n' << std::flush;
  }
  tally_.summarize(cfg_, log_);
  // "failed": a rerun cannot help until the disk is fixed, so launchers do not retry.
  write_status(tally_.failures > 0                      ? "failed"
               : exit_code(e.exit_code) == kExitInterrupted ? "interrupted"
               : e.stopped_early                         ? "requeue"
                                                         : "done",
               s.global_step, exit_code(e.exit_code), revocations);
  return ev;
}

}  // namespace mt
