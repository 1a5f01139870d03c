#include "app/train_virtual.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "app/emulation.hpp"
#include "app/metrics.hpp"
#include "app/plan.hpp"
#include "app/run_setup.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "ps/ps.hpp"
#include "ps/update_policy.hpp"

namespace mt {

namespace {

// One logical worker's training state (its timing is the simulator's: ClusterSim).
struct Trainee {
  int slot = 0;
  std::unique_ptr<BatchLoader> loader;
  FlatTensors snapshot;    // the parameters of its last reply
  std::optional<Sgd> own;  // --momentum-correction dana: its own (its data slot's) momentum
  std::int64_t window_pushes = 0, window_images = 0;
  double window_staleness = 0, window_step_seconds = 0;
};

}  // namespace

TrainResult train_virtual(const TrainConfig& cfg, std::ostream& log) {
  if (cfg.virtual_workers < 1) throw UsageError("--virtual-workers must be 1 or more");
  if (!cfg.ckpt_dir.empty()) throw UsageError("--virtual-workers runs keep no checkpoints: leave out --ckpt-dir");
  if (cfg.num_ps != 1) throw UsageError("--virtual-workers runs have one parameter-server shard: leave out --num-ps");
  if (cfg.max_workers > 0) throw UsageError("--virtual-workers: joins are --virtual-joins, not --max-workers");
  if (cfg.synthetic_gradients) throw UsageError("--virtual-workers computes real gradients: no --synthetic-gradients");
  install_notice_handlers();
  install_interrupt_handler();
  const auto t_start = Clock::now();
  TrainConfig c = cfg;
  resolve_policy(c);
  // Virtual time needs device speeds: each worker's instance type unless --emulate-device says.
  if (c.emulate_device.empty() || c.emulate_device == "off") c.emulate_device = "worker-types";
  const RunSetup setup = prepare_run(c);
  const int n0 = c.virtual_workers;
  const std::vector<VirtualJoin> joins = parse_virtual_joins(c.virtual_joins);
  std::vector<std::string> types = worker_types(c, setup.prices, n0);
  for (const auto& j : joins) {
    setup.prices.at(j.type);
    types.push_back(j.type);
  }
  const int total = static_cast<int>(types.size());
  const std::vector<Emulation> emulated = emulations(c, types);
  std::vector<Link> links = parse_links(c.worker_links, n0);
  links.resize(static_cast<std::size_t>(total), links.empty() ? Link{} : links.back());
  const ModelSpec& spec = setup.spec;
  Model model(spec);
  const double update_seconds = c.ps_update_seconds >= 0 ? c.ps_update_seconds : default_ps_update_seconds(model.param_count());
  const double message_bytes = double(model.param_count()) * sizeof(float);
  UpdatePolicy policy(setup.schedule, parse_lr_scaling(c.lr_scaling), parse_momentum_correction(c.momentum_correction),
                      c.momentum, c.join_warmup, c.momentum_auto);

  // Revocations on the virtual clock: --revoke names worker ranks 1..N (rank 0 is the parameter
  // server, which is not revoked here); --revocation-model draws each worker's lifetime.
  const std::vector<RevokeEntry> revokes = parse_revoke(c.revoke);
  // The live prediction's models (app/plan.hpp): --revocation-model, else gce when transient;
  // the simulator draws lifetimes only from --revocation-model, which is then the same.
  const std::map<std::string, RevocationModel> lifetimes_by_type =
      revocation_models(prediction_model(c.revocation_model, setup.transient), types);

  auto backend = make_backend(setup.device, setup.threads);
  MetricsWriter metrics(c.metrics);
  PushLog push_log(c.push_log);
  FlatTensors params(model.params()), stats(model.stats()), grads(model.params()), batch_stats(model.stats());
  model.init_params(params, stats, c.seed);
  Sgd sgd(model.params(), SgdConfig{static_cast<float>(c.momentum), static_cast<float>(c.weight_decay), setup.nesterov});
  Network net(model, *backend, c.batch_size);
  // --lr-scaling gap: each gradient element's penalty (its running mean steps in gap_mean_step),
  // and the parameters before each update.
  std::optional<GapPenalty> gap;
  std::vector<float> gap_mean_step;
  FlatTensors before_update;
  if (policy.gap_aware()) {
    gap_mean_step.assign(params.span().size(), 0.f);
    gap.emplace(gap_mean_step);
    before_update = FlatTensors(model.params());
  }

  std::vector<SimWorker> sim_workers(static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i) {
    SimWorker& w = sim_workers[static_cast<std::size_t>(i)];
    w.rank = i + 1;
    w.type = types[static_cast<std::size_t>(i)];
    w.link = links[static_cast<std::size_t>(i)];
    w.pacer.emplace(emulated[static_cast<std::size_t>(i)], pacer_seed(c.seed, w.rank));
    for (const auto& e : revokes) {
      if (e.rank < 1 || e.rank > total)
        throw UsageError("--revoke: rank " + std::to_string(e.rank) + " is not a worker of this virtual run (ranks 1.." +
                         std::to_string(total) + "; rank 0, the parameter server, is not revoked in a virtual run)");
      if (e.ckpt_write > 0) throw UsageError("--revoke: @ckpt= needs checkpoints, which virtual runs do not write");
      if (e.rank != w.rank) continue;
      if (e.step > 0) w.kill_step = e.step;
      if (e.seconds >= 0) w.kill_at = e.seconds;
      w.kill_signal = e.signal;
    }
  }
  std::vector<Trainee> trainees(static_cast<std::size_t>(total));
  // A worker's training state once it starts: its data shard, the parameters it was sent, its
  // own momentum under dana.
  auto start_trainee = [&](std::size_t i) {
    Trainee& w = trainees[i];
    w.slot = static_cast<int>(i);
    LoaderOptions lo = setup.loader;
    lo.shard = w.slot;
    lo.num_shards = total;
    w.loader = std::make_unique<BatchLoader>(setup.data.train, lo);
    w.snapshot = FlatTensors(model.params());
    std::copy(params.span().begin(), params.span().end(), w.snapshot.span().begin());
    if (policy.per_slot_momentum())
      w.own.emplace(model.params(), SgdConfig{static_cast<float>(c.momentum), static_cast<float>(c.weight_decay), true});
  };
  SimOptions sim_options;
  sim_options.update_seconds = update_seconds;
  sim_options.message_bytes = message_bytes;
  sim_options.failure_timeout = c.failure_timeout;
  sim_options.seed = c.seed;
  if (!c.revocation_model.empty()) sim_options.lifetimes = lifetimes_by_type;
  ClusterSim sim(std::move(sim_options), std::move(sim_workers), n0, joins);
  for (int i = 0; i < n0; ++i) start_trainee(static_cast<std::size_t>(i));

  const std::string emulating = emulating_note(c, emulated);
  metrics.write(nlohmann::ordered_json{
      {"event", "config"},           {"model", spec.name},
      {"parameters", model.param_count()}, {"data", setup.data_dir},
      {"data_format", setup.data.format},  {"train_steps", c.train_steps},
      {"batch_size", c.batch_size},  {"virtual_workers", n0},
      {"virtual_joins", c.virtual_joins}, {"num_ps", 1},
      {"lr_schedule", setup.schedule.describe()}, {"momentum", c.momentum},
      {"momentum_auto", c.momentum_auto}, {"nesterov", setup.nesterov},  {"weight_decay", c.weight_decay},
      {"seed", c.seed},              {"lr_scaling", c.lr_scaling},
      {"momentum_correction", c.momentum_correction}, {"join_warmup", c.join_warmup}, {"max_staleness", c.max_staleness},
      {"worker_types", types},       {"emulation", emulation_json(c, emulated)},
      {"worker_links_seconds", [&] {
         nlohmann::ordered_json l = nlohmann::ordered_json::array();
         for (const auto& w : sim.workers()) l.push_back(w.link.seconds(message_bytes));
         return l;
       }()},
      {"ps_update_seconds", update_seconds}, {"failure_timeout", c.failure_timeout},
      {"ps_type", c.ps_type},        {"pricing", c.pricing}, {"ps_pricing", c.ps_pricing},
      {"prices", setup.prices.source()}, {"revoke", c.revoke},
      {"revocation_model", c.revocation_model}, {"evidence", "E"},
      {"processes", 1}});
  if (!c.quiet)
    log << "mpi_trainer: virtual run: " << n0 << " worker(s)"
        << (joins.empty() ? std::string() : " + " + std::to_string(joins.size()) + " joining") << " and 1 parameter server on a virtual clock, "
        << spec.name << " (" << model.param_count() << " parameters) on " << setup.data.format << ", "
        << c.train_steps << " global steps of " << c.batch_size << ", lr " << setup.schedule.describe() << ", lr scaling "
        << c.lr_scaling
        << describe_momentum(parse_momentum_correction(c.momentum_correction), c.momentum, n0,
                             policy.momentum(n0)) << emulating << "\n"
        << std::flush;

  TrainResult res;
  std::int64_t dropped = 0, window_images = 0, window_correct = 0, window_pushes = 0;
  double window_loss = 0, window_staleness = 0, window_start = 0, staleness_sum = 0, max_staleness = 0, last_lr = 0;
  std::int64_t last_eval = 0;
  const auto log_every = std::max<std::int64_t>(1, c.log_every_steps);
  // A worker no longer counted: lost (noticed after --failure-timeout) or left after a notice.
  const auto departure = [&](std::size_t who, bool lost_it, double at, const std::string& detail) {
    const SimWorker& w = sim.worker(who);
    trainees[who].loader.reset();
    metrics.write(nlohmann::ordered_json{{"event", "revocation"},     {"global_step", sim.step()},
                                         {"rank", w.rank},           {"instance_type", w.type},
                                         {"cause", lost_it ? "lost" : "notice"},
                                         {"detected_by", lost_it ? "heartbeat" : "notice"},
                                         {"detail", detail},         {"virtual_seconds", at},
                                         {"active_workers", sim.active()}, {"lr_divisor", policy.lr_divisor(sim.active())},
                                         {"momentum", policy.momentum(sim.active())}});
    if (!c.quiet)
      log << "revocation: worker rank " << w.rank << " (" << w.type << ") " << (lost_it ? "lost" : "left")
          << " at global step " << sim.step() << ", virtual time " << format_eta(at) << ": " << detail << "; "
          << sim.active() << " worker(s) remain\n"
          << std::flush;
  };
  std::string stopped_by;
  while (sim.step() < c.train_steps) {
    if (const int sig = notice_signal()) {
      stopped_by = signal_name(sig);
      break;
    }
    const ClusterSim::Event ev = sim.advance();
    if (ev.kind == ClusterSim::Kind::kNone) {
      stopped_by = "every worker revoked";
      break;
    }
    const SimWorker& sw = sim.worker(ev.who);
    Trainee& w = trainees[ev.who];
    if (ev.kind == ClusterSim::Kind::kDetect) {
      departure(ev.who, true, ev.at, sw.kill_why + ": no push or heartbeat within --failure-timeout");
      continue;
    }
    if (ev.kind == ClusterSim::Kind::kJoin) {
      policy.joined(sim.step(), sim.active() - 1, sim.active());
      start_trainee(ev.who);
      metrics.write(nlohmann::ordered_json{{"event", "join"},        {"global_step", sim.step()},
                                           {"rank", sw.rank},        {"instance_type", sw.type},
                                           {"virtual_seconds", ev.at}, {"active_workers", sim.active()},
                                           {"lr_divisor", policy.lr_divisor(sim.active())},
                                           {"momentum", policy.momentum(sim.active())}});
      if (!c.quiet)
        log << "join: worker rank " << sw.rank << " (" << sw.type << ") joined at global step " << sim.step()
            << ", virtual time " << format_eta(ev.at) << "; " << sim.active() << " worker(s)\n"
            << std::flush;
      continue;
    }
    if (ev.kind != ClusterSim::Kind::kArrive) continue;  // a kill: the loss is noticed later
    // The push arrives; the parameter server applies it in arrival order.
    const int active = sim.active();
    const std::int64_t step = sim.step();
    const Batch& batch = w.loader->next();
    const StepStats st =
        net.train_step(net.stage_images(batch.images), batch.labels, w.snapshot, grads, batch_stats, nullptr);
    const double staleness = sim.staleness(ev.who);
    const bool too_stale = c.max_staleness >= 0 && staleness > double(c.max_staleness);
    if (too_stale) {
      // Too stale: not applied, the worker gets the current parameters. It still counts as a global
      // step, as in the parameter server (where every shard must count the same pushes).
      ++dropped;
    } else {
      check_divergence(st.loss, c.max_loss, step + 1);
      const double lr = policy.lr(step, active, staleness);
      if (gap) {
        gap->penalize(grads.span(), params.span(), w.snapshot.span(), staleness);
        std::copy(params.span().begin(), params.span().end(), before_update.span().begin());
      }
      (w.own ? *w.own : sgd).step(*backend, params, grads, static_cast<float>(lr), static_cast<float>(policy.momentum(active)));
      if (gap) gap->track(before_update.span(), params.span());
      model.update_running_stats(stats, batch_stats, net.bn_counts());
      last_lr = lr;
      push_log.write(step + 1, sw.rank, sw.version, sim.applied_at());
      staleness_sum += staleness;
      max_staleness = std::max(max_staleness, staleness);
      ++w.window_pushes;
      w.window_images += c.batch_size;
      w.window_staleness += staleness;
      w.window_step_seconds += sw.last_step_seconds;
      window_loss += st.loss;
      window_staleness += staleness;
      window_correct += st.correct;
      window_images += c.batch_size;
      ++window_pushes;
    }
    // The reply: this worker's next step starts from the parameters after its push.
    std::copy(params.span().begin(), params.span().end(), w.snapshot.span().begin());
    if (sim.pushed(ev.who, !too_stale).kind == ClusterSim::Kind::kLeft)
      departure(ev.who, false, sim.applied_at(), sw.kill_why + ": a notice, its last step pushed");
    const double now = sim.now();
    const std::int64_t done_steps = sim.step();
    const bool last = done_steps == c.train_steps;
    if (window_pushes > 0 && (done_steps % log_every == 0 || last)) {
      const double dt = std::max(now - window_start, 1e-12);
      const double done = double(done_steps) / double(c.train_steps);
      const double real = since(t_start);
      const double mean_staleness = window_staleness / double(window_pushes);
      // The live prediction (app/plan.hpp): each active worker's pushes per virtual second, the
      // virtual cluster's bill so far.
      std::vector<LiveWorker> live;
      double spent = setup.prices.cost_usd(c.ps_type, setup.ps_transient, now);
      for (std::size_t i = 0; i < trainees.size(); ++i) {
        const SimWorker& x = sim.worker(i);
        if (!x.begun) continue;
        spent += setup.prices.cost_usd(x.type, setup.transient, sim.billed_seconds(i));
        if (x.alive && x.counted)
          live.push_back(LiveWorker{x.type, double(trainees[i].window_pushes) / dt, now - x.started});
      }
      const LivePrediction predicted =
          predict_finish(c.train_steps - done_steps, live, lifetimes_by_type, 1.0, setup.prices, setup.transient, spent,
                         setup.prices.cost_usd(c.ps_type, setup.ps_transient, 1.0));
      if (!c.quiet)
        log << format_progress(ProgressLine{done_steps, c.train_steps, window_loss / double(window_pushes),
                                            double(window_correct) / double(window_images), last_lr,
                                            double(window_images) / dt, sim.active(), mean_staleness,
                                            real * (1 - done) / std::max(done, 1e-9)})
            << "  vtime " << format_eta(now) << format_prediction(predicted, "vfinish") << '\n'
            << std::flush;
      nlohmann::ordered_json per = nlohmann::ordered_json::array();
      for (std::size_t i = 0; i < trainees.size(); ++i) {
        const SimWorker& x = sim.worker(i);
        Trainee& t = trainees[i];
        if (!x.begun) continue;  // not joined yet
        per.push_back(nlohmann::ordered_json{
            {"rank", x.rank},
            {"instance_type", x.type},
            {"pushes", t.window_pushes},
            {"images_per_second", double(t.window_images) / dt},
            {"mean_staleness", t.window_pushes ? t.window_staleness / double(t.window_pushes) : 0.0},
            {"step_seconds", t.window_pushes ? t.window_step_seconds / double(t.window_pushes) : 0.0},
            {"active", x.counted}});
        t.window_pushes = t.window_images = 0;
        t.window_staleness = t.window_step_seconds = 0;
      }
      metrics.write(nlohmann::ordered_json{{"event", "progress"},
                                           {"global_step", done_steps},
                                           {"loss", window_loss / double(window_pushes)},
                                           {"train_accuracy", double(window_correct) / double(window_images)},
                                           {"lr", last_lr},
                                           {"momentum", policy.momentum(sim.active())},
                                           {"images_per_second", double(window_images) / dt},
                                           {"active_workers", sim.active()},
                                           {"mean_staleness", mean_staleness},
                                           {"dropped_stale_pushes", dropped},
                                           {"virtual_seconds", now},
                                           {"elapsed_seconds", real},
                                           {"predicted_seconds_left", prediction_seconds_json(predicted)},
                                           {"predicted_cost_usd", prediction_cost_json(predicted)},
                                           {"workers", per}});
      window_loss = window_staleness = 0;
      window_images = window_correct = window_pushes = 0;
      window_start = now;
    }
    if (c.eval_every_steps > 0 && done_steps % c.eval_every_steps == 0 && !last && done_steps != last_eval) {
      last_eval = done_steps;
      const auto e = evaluate_test_set(net, setup.data.test, setup.loader, params, stats);
      if (!c.quiet)
        log << "eval step " << done_steps << "  test_acc " << std::setprecision(4) << e.accuracy << "  test_loss "
            << e.loss << "  vtime " << format_eta(now) << '\n';
      metrics.write(nlohmann::ordered_json{{"event", "eval"},
                                           {"global_step", done_steps},
                                           {"test_accuracy", e.accuracy},
                                           {"test_loss", e.loss},
                                           {"virtual_seconds", now}});
    }
  }

  // The bill of the virtual cluster: each worker from its start to its end, the PS throughout.
  const double now = sim.now();
  const std::int64_t step = sim.step();
  double cost = setup.prices.cost_usd(c.ps_type, setup.ps_transient, now);
  int workers_end = 0;
  nlohmann::ordered_json usage = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < sim.workers().size(); ++i) {
    const SimWorker& w = sim.worker(i);
    if (!w.begun) continue;  // never joined
    const double billed = sim.billed_seconds(i);
    cost += setup.prices.cost_usd(w.type, setup.transient, billed);
    workers_end += w.counted ? 1 : 0;
    usage.push_back(nlohmann::ordered_json{
        {"rank", w.rank}, {"instance_type", w.type}, {"pushes", w.pushes}, {"virtual_seconds", billed}});
  }
  res.global_step = step;
  res.train_seconds = since(t_start);
  res.cost_usd = cost;
  res.images_per_second = double(step * c.batch_size) / std::max(now, 1e-12);
  const int notice = notice_signal();
  if (notice) {
    // A notice or Ctrl-C: no evaluation (a virtual run keeps no checkpoint to continue from).
    res.exit_code = notice == SIGINT ? kExitInterrupted : kExitRequeue;
  } else {
    const auto ev = evaluate_test_set(net, setup.data.test, setup.loader, params, stats);
    res.test_accuracy = ev.accuracy;
    res.test_loss = ev.loss;
    metrics.write(nlohmann::ordered_json{{"event", "eval"},
                                         {"global_step", step},
                                         {"test_accuracy", ev.accuracy},
                                         {"test_loss", ev.loss},
                                         {"virtual_seconds", now}});
  }
  const nlohmann::ordered_json summary{
      {"event", "summary"},
      {"global_step", step},
      {"train_seconds", res.train_seconds},
      {"virtual_seconds", now},
      {"test_accuracy", notice ? nlohmann::ordered_json() : nlohmann::ordered_json(res.test_accuracy)},
      {"cost_usd", cost},
      {"revocations", sim.revocations()},
      {"workers_start", n0},
      {"workers_end", workers_end},
      {"images_per_second", res.images_per_second},
      {"test_loss", notice ? nlohmann::ordered_json() : nlohmann::ordered_json(res.test_loss)},
      {"mean_staleness", step > 0 ? staleness_sum / double(step) : 0.0},
      {"max_staleness", max_staleness},
      {"dropped_stale_pushes", dropped},
      {"num_ps", 1},
      {"model", spec.name},
      {"worker_types", types},
      {"ps_type", c.ps_type},
      {"pricing", c.pricing},
      {"ps_pricing", c.ps_pricing},
      {"lost_workers", sim.lost()},
      {"left_workers", sim.left()},
      {"joined_workers", sim.joined()},
      {"workers", usage},
      {"virtual", true},
      {"evidence", "E"},
      {"stopped_by", stopped_by.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(stopped_by)},
      {"exit_code", res.exit_code}};
  metrics.write(summary);
  if (!c.quiet) {
    if (!notice)
      log << (stopped_by.empty() ? "done: " : "stopped (" + stopped_by + "): ") << step << " global steps in virtual time " << format_eta(now) << " (" << std::fixed
          << std::setprecision(1) << now << " s; " << res.train_seconds << " s real) by " << n0 << " virtual worker(s)"
          << (sim.joined() ? " + " + std::to_string(sim.joined()) + " joined" : std::string()) << ", test accuracy "
          << std::setprecision(2) << 100.0 * res.test_accuracy << "%, cost $" << std::setprecision(4) << cost << " ("
          << c.pricing << ")\n";
    else
      log << "stopped early (" << stopped_by << ") at global step " << step << ", virtual time " << format_eta(now)
          << ": exit " << res.exit_code << " (a virtual run keeps no checkpoint)\n";
    log << "summary: " << summary.dump() << '\n' << std::flush;
  }
  return res;
}

}  // namespace mt
