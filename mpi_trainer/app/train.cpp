// One process training alone (the single-server baseline): `train`.
#include "app/train.hpp"

#include <csignal>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "app/batch_ahead.hpp"
#include "app/checkpointing.hpp"
#include "plan/cluster_sim.hpp"
#include "app/config_event.hpp"
#include "plan/cost.hpp"
#include "app/emulation.hpp"
#include "app/learning_check.hpp"
#include "app/metrics.hpp"
#include "plan/plan.hpp"
#include "app/run_setup.hpp"
#include "ckpt/async_writer.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "data/loader.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"

namespace mt {

double short_finalize_seconds() {
  if (const char* v = std::getenv("MT_SHORT_FINALIZE_SECONDS"); v && *v) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end && *end == '\0' && s > 0 && s <= 600) return s;
  }
  return kShortFinalizeSeconds;
}

namespace {

// A run of `train` in one process: the setup (model, state, device, the config event), the
// resume, the steps with their reports, checkpoints and evaluations, and the end (stopped early
// on a notice, or done with the final evaluation and summary).
class SingleRun {
 public:
  SingleRun(const TrainConfig& cfg, std::ostream& log);
  TrainResult run();

 private:
  void write_config();
  void resume();
  void step(std::int64_t step);
  void report_progress(std::int64_t step, float lr);
  // Snapshot in memory (the only stall), written on the writer's thread.
  void checkpoint(std::int64_t step, double lr, double run_seconds);
  void report_written() {
    if (writer_) tally_.report(writer_->take_written(), cfg_, metrics_, log_);
  }
  void evaluate_during(std::int64_t step);
  // Why training stopped before --train-steps (a notice, a failed checkpoint), or "".
  std::string stop_reason() const;
  void final_checkpoint(const std::string& stop_reason, Clock::time_point stop_at);
  TrainResult stopped(const std::string& stop_reason);
  TrainResult finished();
  double cost_usd(double run_seconds) const {
    return prev_.cost_usd + setup_.prices.cost_usd(cfg_.instance_type, setup_.transient, run_seconds);
  }
  // A device backend keeps parameters, gradients and momentum in its memory for the whole run
  // and updates them there; the host copies (checkpoints, evaluation) are refreshed by to_host().
  void to_device();
  void to_host();
  FlatTensors& params_on_device() { return on_device_ ? dparams_ : params_; }

  const TrainConfig& cfg_;
  std::ostream& log_;
  const Clock::time_point t_setup_;
  const RunSetup setup_;
  // The live prediction's revocation model (plan/plan.hpp): --revocation-model, else gce when transient.
  const std::map<std::string, RevocationModel> predict_models_;
  std::unique_ptr<Backend> backend_;
  MetricsWriter metrics_;
  Model model_;
  FlatTensors params_, stats_, grads_, batch_stats_;
  Sgd sgd_;
  Network net_;
  const bool on_device_;
  FlatTensors dparams_, dgrads_;
  std::optional<Sgd> dsgd_;
  const std::vector<Emulation> emulated_;
  StepPacer pacer_;
  std::string config_json_;

  TrainProgress prev_;  // what the checkpoint resumed from holds (or a first attempt's zeros)
  std::optional<BatchLoader> loader_;
  std::optional<ckpt::AsyncWriter> writer_;
  Clock::time_point last_ckpt_;
  // Each step stages the next batch while the device computes: checkpoints take the cursor
  // after the last batch trained, not the loader's.
  std::optional<BatchAhead> ahead_;
  LoaderCursor trained_cursor_;
  // A failed write leaves the earlier checkpoints as they are and training goes on (the next
  // interval tries again) unless --ckpt-fail stop; the run then ends with exit 4.
  CheckpointTally tally_;

  TrainResult res_;
  double train_seconds_ = 0;
  double window_loss_ = 0, window_seconds_ = 0;
  std::int64_t window_steps_ = 0, window_correct_ = 0;
};

std::map<std::string, RevocationModel> prediction_models(const TrainConfig& cfg, bool transient) {
  return revocation_models(prediction_model(cfg.revocation_model, transient), {cfg.instance_type});
}

// Before the setup: flags of the parameter-server runs; notices are caught from here on:
// SIGTERM/SIGUSR1 (a preemption notice) and SIGINT (Ctrl-C) stop training after the current step
// with a checkpoint; a second SIGINT ends it at once.
Clock::time_point check_flags_and_catch_notices(const TrainConfig& cfg) {
  if (!cfg.worker_types.empty())
    throw UsageError("--worker-types applies to parameter-server runs (mpirun -np 2 or more); use "
                     "--instance-type");
  if (cfg.synthetic_gradients)
    throw UsageError("--synthetic-gradients is a parameter-server benchmark mode (mpirun -np 2 or more)");
  if (cfg.push_precision != "fp32")
    throw UsageError("--push-precision " + cfg.push_precision + ": one process sends no pushes (mpirun -np 2 or "
                     "more, or --virtual-workers)");
  install_notice_handlers();
  install_interrupt_handler();
  return Clock::now();
}

RunSetup checked_setup(const TrainConfig& cfg) {
  RunSetup setup = prepare_run(cfg);
  check_checkpoint_dir(cfg);
  return setup;
}

SingleRun::SingleRun(const TrainConfig& cfg, std::ostream& log)
    : cfg_(cfg),
      log_(log),
      t_setup_(check_flags_and_catch_notices(cfg)),
      setup_(checked_setup(cfg)),
      predict_models_(prediction_models(cfg, setup_.transient)),
      backend_(make_backend(setup_.device, setup_.threads)),
      metrics_(cfg.metrics, cfg.tensorboard),
      model_(setup_.spec),
      params_(model_.params()),
      stats_(model_.stats()),
      grads_(model_.params()),
      batch_stats_(model_.stats()),
      sgd_(model_.params(), SgdConfig{static_cast<float>(cfg.momentum), static_cast<float>(cfg.weight_decay),
                                      setup_.nesterov}),
      net_(model_, *backend_, cfg.batch_size),
      on_device_(backend_->device_resident()),
      emulated_(emulations(cfg, {cfg.instance_type})),
      pacer_(emulated_[0], pacer_seed(cfg.seed, 0)) {
  model_.init_params(params_, stats_, cfg.seed);
  if (on_device_) {
    dparams_ = FlatTensors(model_.params(), backend_->make_tensor(Dims{model_.params().total()}, Layout::kPlain));
    dgrads_ = FlatTensors(model_.params(), backend_->make_tensor(Dims{model_.params().total()}, Layout::kPlain));
    dsgd_.emplace(model_.params(), sgd_.config(), *backend_);
  }
}

void SingleRun::to_device() {
  if (!on_device_) return;
  backend_->upload(params_.span(), dparams_.flat());
  backend_->upload(sgd_.velocity().span(), dsgd_->velocity().flat());
  backend_->synchronize();
}

void SingleRun::to_host() {
  if (!on_device_) return;
  backend_->download(dparams_.flat(), params_.span());
  backend_->download(dsgd_->velocity().flat(), sgd_.velocity().span());
  backend_->synchronize();
}

void SingleRun::write_config() {
  const DataSplit& data = setup_.data;
  nlohmann::ordered_json config = config_event(cfg_, setup_, model_.param_count(), emulated_);
  config["train_images"] = data.train.count;
  config["test_images"] = data.test.count;
  config["device"] = setup_.device.name;
  config["backend"] = backend_->name();
  config["threads"] = setup_.threads;
  config["backend_layout"] = layout_name(backend_->activation_layout());
  config["augment"] = setup_.augment;
  config["instance_type"] = cfg_.instance_type;
  config["ckpt_dir"] = cfg_.ckpt_dir;
  config["resume"] = cfg_.resume;
  config["processes"] = 1;
  metrics_.write(config);
  config_json_ = config.dump();
  if (cfg_.quiet) return;
  log_ << "mpi_trainer: " << setup_.spec.name << " (" << model_.param_count() << " parameters) on " << data.format
       << " " << setup_.data_dir << " (" << data.train.count << " train / " << data.test.count << " test)\n"
       << "mpi_trainer: device " << setup_.device.name << " (" << setup_.device.note << "), "
       << (backend_->device_resident() ? backend_->name() + ", " : std::string()) << setup_.threads
       << " threads, batch " << cfg_.batch_size << ", " << cfg_.train_steps << " steps, lr "
       << setup_.schedule.describe() << (setup_.nesterov ? ", Nesterov" : "") << emulating_note(cfg_, emulated_)
       << ", setup " << std::fixed << std::setprecision(2) << since(t_setup_) << " s\n";
}

// The newest valid checkpoint of this model, falling back past damaged ones; then the data
// loader from its cursor, the checkpoint writer and the first batch.
void SingleRun::resume() {
  if (auto found = find_resume_checkpoint(cfg_, model_, setup_.job, setup_.schedule, metrics_, log_)) {
    prev_ = restore_checkpoint(found->state, model_, params_, sgd_.velocity(), stats_);
    prev_.attempts += 1;
    const std::string resumed_from = found->file.string();
    if (!cfg_.quiet)
      log_ << "mpi_trainer: resumed from " << resumed_from << " at global step " << prev_.global_step << " (attempt "
           << prev_.attempts << ")\n";
    metrics_.write(nlohmann::ordered_json{{"event", "resume"}, {"file", resumed_from},
                                          {"global_step", prev_.global_step}, {"attempt", prev_.attempts}});
  }
  to_device();
  const LoaderCursor start = start_cursors(prev_, 1)[0];
  prev_.worker_cursors.clear();  // this run has one data shard: its cursor is epoch/position
  loader_.emplace(setup_.data.train, setup_.loader, start);
  if (!cfg_.ckpt_dir.empty()) {
    writer_.emplace(cfg_.ckpt_dir, cfg_.ckpt_keep);
    // The first snapshot's memory, allocated now rather than in the first checkpoint's stall.
    writer_->give_spare(make_checkpoint(model_, params_, sgd_.velocity(), stats_, prev_, config_json_, setup_.job));
  }
  last_ckpt_ = Clock::now();
  ahead_.emplace(*loader_, net_);
  if (prev_.global_step < cfg_.train_steps) ahead_->advance();
  trained_cursor_ = start;
}

void SingleRun::checkpoint(std::int64_t step, double lr, double run_seconds) {
  const auto t0 = Clock::now();
  to_host();
  TrainProgress p = prev_;
  p.global_step = step;
  p.epoch = trained_cursor_.epoch;
  p.position = trained_cursor_.position;
  p.train_seconds = prev_.train_seconds + run_seconds;
  p.cost_usd = cost_usd(run_seconds);
  p.lr = lr;
  writer_->submit(
      make_checkpoint(model_, params_, sgd_.velocity(), stats_, p, config_json_, setup_.job, writer_->take_spare()));
  const bool durable = wait_until_durable(*writer_, cfg_);  // durable (or failed) before the next step
  last_ckpt_ = Clock::now();
  const double stall = since(t0);
  metrics_.write(nlohmann::ordered_json{{"event", "checkpoint_snapshot"}, {"global_step", step},
                                        {"stall_seconds", stall}, {"durable_before_training", durable}});
}

void SingleRun::step(std::int64_t step) {
  pacer_.begin();
  const float lr = static_cast<float>(setup_.schedule.lr_at(step));
  const BatchAhead::Staged batch = ahead_->current();
  const StepStats st =
      net_.train_step(batch.images, batch.labels, params_on_device(), on_device_ ? dgrads_ : grads_, batch_stats_,
                      step + 1 < cfg_.train_steps ? std::function<void()>([&] { ahead_->advance(); }) : nullptr);
  trained_cursor_ = batch.cursor;
  check_divergence(st.loss, cfg_.max_loss, step + 1);
  model_.update_running_stats(stats_, batch_stats_, net_.bn_counts());
  if (on_device_)
    dsgd_->step(*backend_, dparams_, dgrads_, lr);
  else
    sgd_.step(*backend_, params_, grads_, lr);
  const double dt = pacer_.finish();  // an emulated device's padding included
  train_seconds_ += dt;
  window_seconds_ += dt;
  window_loss_ += st.loss;
  window_correct_ += st.correct;
  ++window_steps_;
  res_.global_step = step + 1;

  const bool last = step + 1 == cfg_.train_steps;
  if ((step + 1) % std::max<std::int64_t>(1, cfg_.log_every_steps) == 0 || last) report_progress(step, lr);
  if (writer_ && !last &&
      ((cfg_.ckpt_every_steps > 0 && (step + 1) % cfg_.ckpt_every_steps == 0) ||
       (cfg_.ckpt_every_seconds > 0 && since(last_ckpt_) >= cfg_.ckpt_every_seconds))) {
    checkpoint(step + 1, lr, train_seconds_);
    report_written();
  }
  if (cfg_.eval_every_steps > 0 && (step + 1) % cfg_.eval_every_steps == 0 && !last) evaluate_during(step);
  report_written();
}

void SingleRun::report_progress(std::int64_t step, float lr) {
  const double ips = double(window_steps_ * cfg_.batch_size) / std::max(window_seconds_, 1e-9);
  const double mean_loss = window_loss_ / double(window_steps_);
  const double acc = double(window_correct_) / double(window_steps_ * cfg_.batch_size);
  const double eta = double(cfg_.train_steps - step - 1) * (window_seconds_ / double(window_steps_));
  res_.final_train_loss = mean_loss;
  const LivePrediction predicted = predict_finish(
      cfg_.train_steps - step - 1,
      {LiveWorker{cfg_.instance_type, double(window_steps_) / std::max(window_seconds_, 1e-9), train_seconds_}},
      predict_models_, cfg_.time_scale, setup_.prices, setup_.transient, cost_usd(train_seconds_), 0);
  if (!cfg_.quiet) {
    log_ << format_progress(ProgressLine{step + 1, cfg_.train_steps, mean_loss, acc, lr, ips, 1, 0.0})
         << format_prediction(predicted) << '\n'
         << std::flush;
  }
  metrics_.write(nlohmann::ordered_json{{"event", "progress"}, {"global_step", step + 1}, {"loss", mean_loss},
                                        {"train_accuracy", acc}, {"lr", lr}, {"images_per_second", ips},
                                        {"active_workers", 1}, {"step_seconds", window_seconds_ / double(window_steps_)},
                                        {"elapsed_seconds", train_seconds_},
                                        {"eta_seconds", eta},
                                        {"predicted_seconds_left", prediction_seconds_json(predicted)},
                                        {"predicted_cost_usd", prediction_cost_json(predicted)}});
  window_loss_ = window_seconds_ = 0;
  window_steps_ = window_correct_ = 0;
}

void SingleRun::evaluate_during(std::int64_t step) {
  const auto ev = evaluate_test_set(net_, setup_.data.test, setup_.loader, params_on_device(), stats_);
  if (!cfg_.quiet)
    log_ << "eval step " << step + 1 << "  test_acc " << std::setprecision(4) << ev.accuracy << "  test_loss "
         << ev.loss << '\n';
  metrics_.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", step + 1}, {"test_accuracy", ev.accuracy},
                                        {"test_loss", ev.loss}});
}

std::string SingleRun::stop_reason() const {
  const int notice = notice_signal();
  return notice            ? signal_name(notice)
         : tally_.stop(cfg_) ? std::string("a checkpoint write failed (--ckpt-fail stop)")
                             : std::string();
}

// The last checkpoint (of a run stopped early, or done), durable before the end.
void SingleRun::final_checkpoint(const std::string& stop_reason, Clock::time_point stop_at) {
  if (!writer_ || res_.global_step <= prev_.global_step) return;
  checkpoint(res_.global_step, setup_.schedule.lr_at(std::max<std::int64_t>(res_.global_step - 1, 0)),
             train_seconds_);
  writer_->flush();
  report_written();
  if (!stop_reason.empty() && tally_.durable_step == res_.global_step) {
    const double dt = since(stop_at);
    metrics_.write(nlohmann::ordered_json{{"event", "stop_checkpoint_durable"}, {"global_step", res_.global_step},
                                          {"seconds_after_stop", dt}});
    if (!cfg_.quiet)
      log_ << "mpi_trainer: checkpoint of step " << res_.global_step << " durable " << std::setprecision(3) << dt
           << " s after the " << stop_reason << '\n'
           << std::flush;
  }
}

// Time is short after a notice: no evaluation. Exit 75 asks a launcher to rerun (resume); a
// user's Ctrl-C ends with 130, as an interrupted command does; a failed checkpoint is 4.
TrainResult SingleRun::stopped(const std::string& stop_reason) {
  res_.exit_code = tally_.failures > 0                ? kExitCheckpoint
                   : notice_signal() == SIGINT ? kExitInterrupted
                                               : kExitRequeue;
  res_.train_seconds = prev_.train_seconds + train_seconds_;
  res_.cost_usd = cost_usd(train_seconds_);
  nlohmann::ordered_json summary{
      {"event", "summary"}, {"global_step", res_.global_step}, {"train_seconds", res_.train_seconds},
      {"test_accuracy", nullptr}, {"cost_usd", res_.cost_usd}, {"revocations", 0}, {"workers_start", 1},
      {"workers_end", 1}, {"model", setup_.spec.name}, {"instance_type", cfg_.instance_type},
      {"pricing", cfg_.pricing}, {"attempts", prev_.attempts}, {"resumed_from_step", prev_.global_step},
      {"stopped_by", stop_reason}, {"checkpoint_failures", tally_.failures}, {"exit_code", res_.exit_code}};
  add_warnings(summary, "");
  metrics_.write(summary);
  tally_.summarize(cfg_, log_);
  if (!cfg_.quiet)
    log_ << "stopped early (" << stop_reason << ") at step " << res_.global_step << ": exit " << res_.exit_code
         << (tally_.failures > 0 ? ", make --ckpt-dir writable (see above), then rerun with --resume auto"
             : writer_           ? ", rerun with --resume auto to continue from the checkpoint"
                                 : ", nothing was saved (no --ckpt-dir)")
         << "\nsummary: " << summary.dump() << '\n'
         << std::flush;
  return res_;
}

TrainResult SingleRun::finished() {
  to_host();
  const auto t_eval = Clock::now();
  const auto ev = evaluate_test_set(net_, setup_.data.test, setup_.loader, params_, stats_);
  const double eval_seconds = since(t_eval);
  res_.train_seconds = prev_.train_seconds + train_seconds_;
  res_.test_accuracy = ev.accuracy;
  res_.test_loss = ev.loss;
  res_.images_per_second =
      double((res_.global_step - prev_.global_step) * cfg_.batch_size) / std::max(train_seconds_, 1e-9);
  res_.cost_usd = cost_usd(train_seconds_);
  res_.data_wait_seconds = loader_->wait_seconds();
  metrics_.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", res_.global_step},
                                        {"test_accuracy", ev.accuracy}, {"test_loss", ev.loss},
                                        {"eval_seconds", eval_seconds}});
  nlohmann::ordered_json summary{
      {"event", "summary"},          {"global_step", res_.global_step},
      {"train_seconds", res_.train_seconds}, {"test_accuracy", res_.test_accuracy},
      {"cost_usd", res_.cost_usd},    {"revocations", 0},
      {"workers_start", 1},          {"workers_end", 1},
      {"images_per_second", res_.images_per_second}, {"test_loss", res_.test_loss},
      {"data_wait_seconds", res_.data_wait_seconds}, {"model", setup_.spec.name},
      {"instance_type", cfg_.instance_type}, {"pricing", cfg_.pricing},
      {"attempts", prev_.attempts},   {"resumed_from_step", prev_.global_step},
      {"checkpoint_failures", tally_.failures}, {"exit_code", tally_.failures > 0 ? kExitCheckpoint : kExitOk}};
  add_warnings(summary, learned_nothing_warning(ev.accuracy, ev.loss, setup_.spec.classes,
                                                cfg_, 1));
  metrics_.write(summary);
  if (tally_.failures > 0) res_.exit_code = kExitCheckpoint;
  tally_.summarize(cfg_, log_);
  if (!cfg_.quiet) {
    log_ << "done: " << res_.global_step << " steps in " << std::setprecision(1) << res_.train_seconds << " s ("
         << format_eta(res_.train_seconds) << "), " << res_.images_per_second << " img/s, test accuracy "
         << std::setprecision(2) << 100.0 * res_.test_accuracy << "%, cost $" << std::setprecision(4)
         << res_.cost_usd << " (" << cfg_.instance_type << ' ' << cfg_.pricing << ")\n"
         << "summary: " << summary.dump() << '\n';
  }
  return res_;
}

TrainResult SingleRun::run() {
  write_config();
  resume();
  for (std::int64_t s = prev_.global_step; s < cfg_.train_steps; ++s) {
    step(s);
    if (notice_signal() || tally_.stop(cfg_)) break;
  }
  res_.global_step = std::max(res_.global_step, prev_.global_step);
  const std::string why = stop_reason();
  const auto stop_at = Clock::now();
  if (!why.empty()) {
    if (!cfg_.quiet)
      log_ << "mpi_trainer: " << why << " at step " << res_.global_step
           << (writer_ ? ": checkpointing now" : ": stopping (no --ckpt-dir: nothing is saved)") << '\n'
           << std::flush;
    metrics_.write(nlohmann::ordered_json{{"event", "stop"}, {"reason", why},
                                          {"global_step", res_.global_step}, {"active_workers", 1}});
  }
  final_checkpoint(why, stop_at);
  return why.empty() ? finished() : stopped(why);
}

}  // namespace

TrainResult train(const TrainConfig& cfg, std::ostream& log) { return SingleRun(cfg, log).run(); }

}  // namespace mt
