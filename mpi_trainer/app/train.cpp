#include "app/train.hpp"
#include "app/run_setup.hpp"

#include <sched.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <ostream>
#include <sstream>
#include <filesystem>
#include <optional>
#include <thread>

#include "app/batch_ahead.hpp"
#include "app/checkpointing.hpp"
#include "app/cluster_sim.hpp"
#include "app/cost.hpp"
#include "ckpt/async_writer.hpp"
#include "ps/ps.hpp"
#include "app/device.hpp"
#include "app/emulation.hpp"
#include "app/metrics.hpp"
#include "app/plan.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"

namespace mt {

namespace {

bool on_off(const std::string& flag, const std::string& value, bool dflt) {
  if (value == "default") return dflt;
  if (value == "on") return true;
  if (value == "off") return false;
  throw UsageError(flag + " must be on, off or default, not '" + value + "'");
}


}  // namespace

Normalization parse_normalization(const std::string& value, bool t2t) {
  if (value == "default") return t2t ? Normalization::kPerImage : Normalization::kChannelStats;
  if (value == "channel") return Normalization::kChannelStats;
  if (value == "per-image") return Normalization::kPerImage;
  if (value == "none") return Normalization::kNone;
  throw UsageError("--normalize must be channel, per-image, none or default, not '" + value + "'");
}

// The whole test set through the training network in inference mode; a short last batch is
// padded (BN uses running statistics, so rows do not interact) and its padding ignored.
EvalResult evaluate_test_set(Network& net, const Dataset& test, const LoaderOptions& opts,
                    const FlatTensors& params, const FlatTensors& stats) {
  Batch batch;
  std::int64_t correct = 0;
  double loss = 0;
  const int b = net.batch();
  for (std::int64_t start = 0; start < test.count; start += b) {
    const auto count = std::min<std::int64_t>(b, test.count - start);
    fill_eval_batch(test, opts, start, count, batch);
    if (batch.images.dim(0) != b) {
      // Pad to the network's batch size.
      Tensor padded(Dims{b, 3, 32, 32});
      std::copy_n(batch.images.data(), batch.images.storage_size(), padded.data());
      batch.images = std::move(padded);
      batch.labels.resize(static_cast<std::size_t>(b), 0);
    }
    const auto st = net.evaluate(batch.images, batch.labels, static_cast<int>(count), params, stats);
    correct += st.correct;
    loss += st.loss;
  }
  return {double(correct) / double(test.count), loss / double(test.count)};
}

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// "k80,k80,p100" -> one type per worker; a single type applies to every worker. Every type must
// be priced.
std::vector<std::string> worker_types(const TrainConfig& cfg, const PriceTable& prices, int workers) {
  std::vector<std::string> types;
  if (cfg.worker_types.empty()) {
    types.assign(static_cast<std::size_t>(workers), cfg.instance_type);
  } else {
    std::stringstream ss(cfg.worker_types);
    for (std::string t; std::getline(ss, t, ',');)
      types.push_back(t);
    if (types.size() == 1) types.assign(static_cast<std::size_t>(workers), types[0]);
    if (static_cast<int>(types.size()) != workers)
      throw UsageError("--worker-types lists " + std::to_string(types.size()) + " types for " +
                       std::to_string(workers) + " workers; give one per worker, in rank order");
  }
  for (const auto& t : types)
    prices.at(t);
  prices.at(cfg.ps_type);
  if (cfg.max_workers > 0) prices.at(cfg.instance_type);  // joined workers are billed at it
  return types;
}

RunSetup prepare_run(const TrainConfig& cfg) {
  // Checkpoint flags do nothing without a directory: say so instead of silently training unsaved.
  if (cfg.ckpt_dir.empty()) {
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--ckpt-every-steps", cfg.ckpt_every_steps > 0},
                                      {"--ckpt-every-seconds", cfg.ckpt_every_seconds > 0},
                                      {"--ckpt-keep", cfg.ckpt_keep != TrainConfig{}.ckpt_keep},
                                      {"--ckpt-fail", cfg.ckpt_fail != TrainConfig{}.ckpt_fail},
                                      {"--ckpt-sync", cfg.ckpt_sync != TrainConfig{}.ckpt_sync},
                                      {"--ps-standby", cfg.ps_standby > 0}})
      if (given)
        throw UsageError(std::string(flag) + " needs --ckpt-dir (the directory the checkpoints go to); without it "
                                             "nothing is saved");
  }
  RunSetup r;
  r.spec = parse_model(cfg.model);
  r.t2t = r.spec.kind == BlockKind::kPreActivation;
  r.schedule = parse_schedule(cfg.lr_schedule, r.t2t, cfg.lr, cfg.lr_warmup_steps);
  r.nesterov = on_off("--nesterov", cfg.nesterov, r.t2t);
  r.augment = on_off("--augment", cfg.augment, true);
  r.transient = cfg.pricing == "transient";
  if (!r.transient && cfg.pricing != "on-demand")
    throw UsageError("--pricing must be on-demand or transient, not '" + cfg.pricing + "'");
  r.ps_transient = cfg.ps_pricing == "transient";
  if (!r.ps_transient && cfg.ps_pricing != "on-demand")
    throw UsageError("--ps-pricing must be on-demand or transient, not '" + cfg.ps_pricing + "'");
  // Prices and instance types are checked before any work.
  r.prices = PriceTable::load(cfg.prices);
  if (cfg.worker_types.empty()) r.prices.at(cfg.instance_type);  // else checked per worker
  r.device = resolve_device(cfg.device);
  const int cores = usable_cores();
  r.threads = cfg.threads > 0 ? cfg.threads : cores;
  if (r.threads > cores) {
    // More threads than cores only makes OpenMP's barriers wait on each other.
    std::cerr << "mpi_trainer: warning: --threads " << r.threads << " is more than the " << cores
              << " core(s) this process may use: using " << cores << '\n';
    r.threads = cores;
  }
  r.data_dir = cfg.data.empty() ? default_data_dir().string() : cfg.data;
  r.data = load_dataset(r.data_dir);
  r.loader.batch_size = cfg.batch_size;
  r.loader.augment = r.augment;
  r.loader.normalization = parse_normalization(cfg.normalize, r.t2t);
  r.loader.stats = compute_channel_stats(r.data.train);
  r.loader.seed = cfg.seed;
  parse_resume_override(cfg.resume_override);  // a bad field name is a usage error before any work
  r.job.data = dataset_identity(r.data);
  r.job.batch_size = cfg.batch_size;
  r.job.lr_schedule = r.schedule.describe();
  r.job.normalization = normalization_name(r.loader.normalization);
  if (r.loader.normalization == Normalization::kChannelStats) r.job.stats = r.loader.stats;
  r.job.labels = label_names(r.data.format);
  if (r.data.train.count < cfg.batch_size)
    throw DataError(r.data_dir + ": " + std::to_string(r.data.train.count) +
                    " training images is fewer than one batch of " + std::to_string(cfg.batch_size));
  return r;
}

TrainResult train(const TrainConfig& cfg, std::ostream& log) {
  if (!cfg.worker_types.empty())
    throw UsageError("--worker-types applies to parameter-server runs (mpirun -np 2 or more); use "
                     "--instance-type");
  if (cfg.synthetic_gradients)
    throw UsageError("--synthetic-gradients is a parameter-server benchmark mode (mpirun -np 2 or more)");
  // Notices are caught from here on: SIGTERM/SIGUSR1 (a preemption notice) and SIGINT (Ctrl-C)
  // stop training after the current step with a checkpoint; a second SIGINT ends it at once.
  install_notice_handlers();
  install_interrupt_handler();
  const auto t_setup = Clock::now();
  const RunSetup setup = prepare_run(cfg);
  check_checkpoint_dir(cfg);
  const ModelSpec& spec = setup.spec;
  const LrSchedule& schedule = setup.schedule;
  const bool nesterov = setup.nesterov, augment = setup.augment, transient = setup.transient;
  // The live prediction's revocation model (app/plan.hpp): --revocation-model, else gce when transient.
  const auto predict_models =
      revocation_models(prediction_model(cfg.revocation_model, transient), {cfg.instance_type});
  const ResolvedDevice& device = setup.device;
  const int threads = setup.threads;
  const std::string& data_dir = setup.data_dir;
  const DataSplit& data = setup.data;
  const LoaderOptions& lo = setup.loader;
  auto backend = make_backend(device, threads);

  MetricsWriter metrics(cfg.metrics);
  Model model(spec);
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()),
      batch_stats(model.stats());
  model.init_params(params, stats, cfg.seed);
  Sgd sgd(model.params(), SgdConfig{static_cast<float>(cfg.momentum),
                                    static_cast<float>(cfg.weight_decay), nesterov});
  Network net(model, *backend, cfg.batch_size);
  // A device backend keeps parameters, gradients and momentum in its memory for the whole run
  // and updates them there; the host copies (checkpoints, evaluation) are refreshed by to_host().
  const bool on_device = backend->device_resident();
  FlatTensors dparams, dgrads;
  std::optional<Sgd> dsgd;
  if (on_device) {
    dparams = FlatTensors(model.params(), backend->make_tensor(Dims{model.params().total()}, Layout::kPlain));
    dgrads = FlatTensors(model.params(), backend->make_tensor(Dims{model.params().total()}, Layout::kPlain));
    dsgd.emplace(model.params(), sgd.config(), *backend);
  }
  auto to_device = [&] {
    if (!on_device) return;
    backend->upload(params.span(), dparams.flat());
    backend->upload(sgd.velocity().span(), dsgd->velocity().flat());
    backend->synchronize();
  };
  auto to_host = [&] {
    if (!on_device) return;
    backend->download(dparams.flat(), params.span());
    backend->download(dsgd->velocity().flat(), sgd.velocity().span());
    backend->synchronize();
  };

  const std::vector<Emulation> emulated = emulations(cfg, {cfg.instance_type});
  StepPacer pacer(emulated[0], pacer_seed(cfg.seed, 0));
  const nlohmann::ordered_json config_event{
      {"event", "config"},        {"model", spec.name},
      {"parameters", model.param_count()},
      {"data", data_dir},         {"data_format", data.format},
      {"train_images", data.train.count}, {"test_images", data.test.count},
      {"train_steps", cfg.train_steps},   {"batch_size", cfg.batch_size},
      {"device", device.name},    {"backend", backend->name()}, {"threads", threads},
      {"backend_layout", layout_name(backend->activation_layout())},
      {"lr_schedule", schedule.describe()}, {"momentum", cfg.momentum},
      {"nesterov", nesterov},     {"weight_decay", cfg.weight_decay},
      {"augment", augment},       {"seed", cfg.seed},
      {"instance_type", cfg.instance_type}, {"pricing", cfg.pricing},
      {"prices", setup.prices.source()},
      {"emulation", emulation_json(cfg, emulated)},
      {"ckpt_dir", cfg.ckpt_dir},  {"resume", cfg.resume},
      {"processes", 1}};
  metrics.write(config_event);
  if (!cfg.quiet) {
    log << "mpi_trainer: " << spec.name << " (" << model.param_count() << " parameters) on "
        << data.format << " " << data_dir << " (" << data.train.count << " train / "
        << data.test.count << " test)\n"
        << "mpi_trainer: device " << device.name << " (" << device.note << "), "
        << (backend->device_resident() ? backend->name() + ", " : std::string()) << threads
        << " threads, batch " << cfg.batch_size << ", " << cfg.train_steps << " steps, lr "
        << schedule.describe() << (nesterov ? ", Nesterov" : "") << emulating_note(cfg, emulated) << ", setup "
        << std::fixed << std::setprecision(2) << since(t_setup) << " s\n";
  }


  // Resume: the newest valid checkpoint of this model, falling back past damaged ones.
  TrainProgress prev;
  std::string resumed_from;
  if (auto found = find_resume_checkpoint(cfg, model, setup.job, metrics, log)) {
    prev = restore_checkpoint(found->checkpoint, model, params, sgd.velocity(), stats);
    prev.attempts += 1;
    resumed_from = found->file.string();
    if (!cfg.quiet)
      log << "mpi_trainer: resumed from " << resumed_from << " at global step " << prev.global_step
          << " (attempt " << prev.attempts << ")\n";
    metrics.write(nlohmann::ordered_json{{"event", "resume"}, {"file", resumed_from},
                                         {"global_step", prev.global_step}, {"attempt", prev.attempts}});
  }
  to_device();
  const LoaderCursor start = start_cursors(prev, 1)[0];
  prev.worker_cursors.clear();  // this run has one data shard: its cursor is epoch/position
  BatchLoader loader(data.train, lo, start);
  std::optional<ckpt::AsyncWriter> writer;
  const std::string config_json = config_event.dump();
  if (!cfg.ckpt_dir.empty()) {
    writer.emplace(cfg.ckpt_dir, cfg.ckpt_keep);
    // The first snapshot's memory, allocated now rather than in the first checkpoint's stall.
    writer->give_spare(make_checkpoint(model, params, sgd.velocity(), stats, prev, config_json, setup.job));
  }
  auto last_ckpt = Clock::now();
  // Each step stages the next batch while the device computes: checkpoints take the cursor
  // after the last batch trained, not the loader's.
  BatchAhead ahead(loader, net);
  if (prev.global_step < cfg.train_steps) ahead.advance();
  LoaderCursor trained_cursor = start;
  // Snapshot in memory (the only stall), written on the writer's thread.
  auto checkpoint = [&](std::int64_t step, double lr, double run_seconds) {
    const auto t0 = Clock::now();
    to_host();
    TrainProgress p = prev;
    p.global_step = step;
    p.epoch = trained_cursor.epoch;
    p.position = trained_cursor.position;
    p.train_seconds = prev.train_seconds + run_seconds;
    p.cost_usd = prev.cost_usd + setup.prices.cost_usd(cfg.instance_type, transient, run_seconds);
    p.lr = lr;
    writer->submit(make_checkpoint(model, params, sgd.velocity(), stats, p, config_json, setup.job, writer->take_spare()));
    const bool durable = wait_until_durable(*writer, cfg);  // durable (or failed) before the next step
    last_ckpt = Clock::now();
    const double stall = since(t0);
    metrics.write(nlohmann::ordered_json{{"event", "checkpoint_snapshot"}, {"global_step", step},
                                         {"stall_seconds", stall}, {"durable_before_training", durable}});
  };
  // A failed write leaves the earlier checkpoints as they are and training goes on (the next
  // interval tries again) unless --ckpt-fail stop; the run then ends with exit 4.
  CheckpointTally tally;
  auto report_written = [&] {
    if (writer) tally.report(writer->take_written(), cfg, metrics, log);
  };

  TrainResult res;
  double train_seconds = 0;
  double window_loss = 0, window_seconds = 0;
  std::int64_t window_steps = 0, window_correct = 0;
  const auto log_every = std::max<std::int64_t>(1, cfg.log_every_steps);
  for (std::int64_t step = prev.global_step; step < cfg.train_steps; ++step) {
    pacer.begin();
    const float lr = static_cast<float>(schedule.lr_at(step));
    const BatchAhead::Staged batch = ahead.current();
    const StepStats st = net.train_step(batch.images, batch.labels, on_device ? dparams : params,
                                        on_device ? dgrads : grads, batch_stats,
                                        step + 1 < cfg.train_steps ? std::function<void()>([&] { ahead.advance(); })
                                                                   : nullptr);
    trained_cursor = batch.cursor;
    check_divergence(st.loss, cfg.max_loss, step + 1);
    model.update_running_stats(stats, batch_stats, net.bn_counts());
    if (on_device)
      dsgd->step(*backend, dparams, dgrads, lr);
    else
      sgd.step(*backend, params, grads, lr);
    const double dt = pacer.finish();  // an emulated device's padding included
    train_seconds += dt;
    window_seconds += dt;
    window_loss += st.loss;
    window_correct += st.correct;
    ++window_steps;
    res.global_step = step + 1;

    const bool last = step + 1 == cfg.train_steps;
    if ((step + 1) % log_every == 0 || last) {
      const double ips = double(window_steps * cfg.batch_size) / std::max(window_seconds, 1e-9);
      const double mean_loss = window_loss / double(window_steps);
      const double acc = double(window_correct) / double(window_steps * cfg.batch_size);
      const double eta = double(cfg.train_steps - step - 1) * (window_seconds / double(window_steps));
      res.final_train_loss = mean_loss;
      const LivePrediction predicted = predict_finish(
          cfg.train_steps - step - 1,
          {LiveWorker{cfg.instance_type, double(window_steps) / std::max(window_seconds, 1e-9), train_seconds}},
          predict_models, cfg.time_scale, setup.prices, transient,
          prev.cost_usd + setup.prices.cost_usd(cfg.instance_type, transient, train_seconds), 0);
      if (!cfg.quiet) {
        log << format_progress(ProgressLine{step + 1, cfg.train_steps, mean_loss, acc, lr, ips, 1, 0.0, eta})
            << format_prediction(predicted) << '\n'
            << std::flush;
      }
      metrics.write(nlohmann::ordered_json{{"event", "progress"}, {"global_step", step + 1}, {"loss", mean_loss},
                     {"train_accuracy", acc}, {"lr", lr}, {"images_per_second", ips},
                     {"active_workers", 1}, {"step_seconds", window_seconds / double(window_steps)},
                     {"elapsed_seconds", train_seconds}, {"predicted_seconds_left", prediction_seconds_json(predicted)},
                     {"predicted_cost_usd", prediction_cost_json(predicted)}});
      window_loss = window_seconds = 0;
      window_steps = window_correct = 0;
    }
    if (writer && !last &&
        ((cfg.ckpt_every_steps > 0 && (step + 1) % cfg.ckpt_every_steps == 0) ||
         (cfg.ckpt_every_seconds > 0 && since(last_ckpt) >= cfg.ckpt_every_seconds))) {
      checkpoint(step + 1, lr, train_seconds);
      report_written();
    }
    if (cfg.eval_every_steps > 0 && (step + 1) % cfg.eval_every_steps == 0 && !last) {
      const auto ev = evaluate_test_set(net, data.test, lo, on_device ? dparams : params, stats);
      if (!cfg.quiet)
        log << "eval step " << step + 1 << "  test_acc " << std::setprecision(4) << ev.accuracy
            << "  test_loss " << ev.loss << '\n';
      metrics.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", step + 1}, {"test_accuracy", ev.accuracy},
                     {"test_loss", ev.loss}});
    }
    report_written();
    if (notice_signal() || tally.stop(cfg)) break;
  }

  res.global_step = std::max(res.global_step, prev.global_step);
  const int notice = notice_signal();
  const std::string stop_reason = notice             ? signal_name(notice)
                                  : tally.stop(cfg) ? std::string("a checkpoint write failed (--ckpt-fail stop)")
                                                      : std::string();
  const auto stop_at = Clock::now();
  if (!stop_reason.empty()) {
    if (!cfg.quiet)
      log << "mpi_trainer: " << stop_reason << " at step " << res.global_step
          << (writer ? ": checkpointing now" : ": stopping (no --ckpt-dir: nothing is saved)") << '\n' << std::flush;
    metrics.write(nlohmann::ordered_json{{"event", "stop"}, {"reason", stop_reason},
                                         {"global_step", res.global_step}, {"active_workers", 1}});
  }
  if (writer && res.global_step > prev.global_step) {
    checkpoint(res.global_step, schedule.lr_at(std::max<std::int64_t>(res.global_step - 1, 0)), train_seconds);
    writer->flush();
    report_written();
    if (!stop_reason.empty() && tally.durable_step == res.global_step) {
      const double dt = since(stop_at);
      metrics.write(nlohmann::ordered_json{{"event", "stop_checkpoint_durable"}, {"global_step", res.global_step},
                                           {"seconds_after_stop", dt}});
      if (!cfg.quiet)
        log << "mpi_trainer: checkpoint of step " << res.global_step << " durable " << std::setprecision(3) << dt
            << " s after the " << stop_reason << '\n' << std::flush;
    }
  }
  if (!stop_reason.empty()) {
    // Time is short after a notice: no evaluation. Exit 75 asks a launcher to rerun (resume);
    // a user's Ctrl-C ends with 130, as an interrupted command does; a failed checkpoint is 4.
    res.exit_code = tally.failures > 0 ? kExitCheckpoint : notice == SIGINT ? kExitInterrupted : kExitRequeue;
    res.train_seconds = prev.train_seconds + train_seconds;
    res.cost_usd = prev.cost_usd + setup.prices.cost_usd(cfg.instance_type, transient, train_seconds);
    const nlohmann::ordered_json summary{
        {"event", "summary"}, {"global_step", res.global_step}, {"train_seconds", res.train_seconds},
        {"test_accuracy", nullptr}, {"cost_usd", res.cost_usd}, {"revocations", 0}, {"workers_start", 1},
        {"workers_end", 1}, {"model", spec.name}, {"instance_type", cfg.instance_type}, {"pricing", cfg.pricing},
        {"attempts", prev.attempts}, {"resumed_from_step", prev.global_step},
        {"stopped_by", stop_reason}, {"checkpoint_failures", tally.failures}, {"exit_code", res.exit_code}};
    metrics.write(summary);
    tally.summarize(cfg, log);
    if (!cfg.quiet)
      log << "stopped early (" << stop_reason << ") at step " << res.global_step << ": exit " << res.exit_code
          << (tally.failures > 0 ? ", make --ckpt-dir writable (see above), then rerun with --resume auto"
              : writer          ? ", rerun with --resume auto to continue from the checkpoint"
                                : ", nothing was saved (no --ckpt-dir)")
          << "\nsummary: " << summary.dump() << '\n' << std::flush;
    return res;
  }
  to_host();
  const auto t_eval = Clock::now();
  const auto ev = evaluate_test_set(net, data.test, lo, params, stats);
  const double eval_seconds = since(t_eval);
  res.train_seconds = prev.train_seconds + train_seconds;
  res.test_accuracy = ev.accuracy;
  res.test_loss = ev.loss;
  res.images_per_second =
      double((res.global_step - prev.global_step) * cfg.batch_size) / std::max(train_seconds, 1e-9);
  res.cost_usd = prev.cost_usd + setup.prices.cost_usd(cfg.instance_type, transient, train_seconds);
  res.data_wait_seconds = loader.wait_seconds();
  metrics.write(nlohmann::ordered_json{{"event", "eval"}, {"global_step", res.global_step}, {"test_accuracy", ev.accuracy},
                 {"test_loss", ev.loss}, {"eval_seconds", eval_seconds}});
  const nlohmann::ordered_json summary{
      {"event", "summary"},          {"global_step", res.global_step},
      {"train_seconds", res.train_seconds}, {"test_accuracy", res.test_accuracy},
      {"cost_usd", res.cost_usd},    {"revocations", 0},
      {"workers_start", 1},          {"workers_end", 1},
      {"images_per_second", res.images_per_second}, {"test_loss", res.test_loss},
      {"data_wait_seconds", res.data_wait_seconds}, {"model", spec.name},
      {"instance_type", cfg.instance_type}, {"pricing", cfg.pricing},
      {"attempts", prev.attempts},   {"resumed_from_step", prev.global_step},
      {"checkpoint_failures", tally.failures}, {"exit_code", tally.failures > 0 ? kExitCheckpoint : kExitOk}};
  metrics.write(summary);
  if (tally.failures > 0) res.exit_code = kExitCheckpoint;
  tally.summarize(cfg, log);
  if (!cfg.quiet) {
    log << "done: " << res.global_step << " steps in " << std::setprecision(1) << res.train_seconds
        << " s (" << format_eta(res.train_seconds) << "), " << res.images_per_second
        << " img/s, test accuracy " << std::setprecision(2) << 100.0 * res.test_accuracy
        << "%, cost $" << std::setprecision(4) << res.cost_usd << " (" << cfg.instance_type << ' '
        << cfg.pricing << ")\n"
        << "summary: " << summary.dump() << '\n';
  }
  return res;
}

}  // namespace mt
