#include "app/train_virtual.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include "app/emulation.hpp"
#include "app/metrics.hpp"
#include "app/run_setup.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "ps/faults.hpp"
#include "ps/update_policy.hpp"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNever = std::numeric_limits<double>::infinity();

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool parse_number(const std::string& text, double& v) {
  try {
    std::size_t used = 0;
    v = std::stod(text, &used);
    return used == text.size() && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// One logical worker.
struct Worker {
  int rank = 0;  // as in a real job with one parameter server: 1, 2, ...
  std::string type;
  Link link;
  int slot = 0;
  std::optional<StepPacer> pacer;  // its step times (draw_target: no sleeping)
  std::unique_ptr<BatchLoader> loader;
  FlatTensors snapshot;            // the parameters of its last reply
  std::optional<Sgd> own;          // --momentum-correction dana: its own (its data slot's) momentum
  std::int64_t version = 0;        // their global step
  double arrival = kNever;         // its next push reaches the parameter server
  bool begun = false;              // started (a joiner: once it joined)
  double started = 0, ended = -1;  // virtual seconds, for billing (ended < 0: still running)
  bool alive = true;               // its process runs
  bool counted = true;             // the parameter server counts it active
  bool leaving = false;            // a notice: its next push is its last
  double detect_at = kNever;       // when the parameter server notices its loss
  double kill_at = kNever;         // --revoke rank=R@T, or a lifetime of --revocation-model
  std::int64_t kill_step = -1;     // --revoke rank=R@step=N
  int kill_signal = SIGKILL;
  std::string kill_why;
  double last_step_seconds = 0;
  std::int64_t pushes = 0, window_pushes = 0, window_images = 0;
  double staleness_sum = 0, window_staleness = 0, window_step_seconds = 0;
};

}  // namespace

std::vector<Link> parse_links(const std::string& spec, int workers) {
  std::vector<Link> links;
  for (const auto& item : split(spec)) {
    const auto slash = item.find('/');
    double ms = 0, gbit = 0;
    if (slash == std::string::npos || !parse_number(item.substr(0, slash), ms) ||
        !parse_number(item.substr(slash + 1), gbit) || ms < 0 || gbit <= 0)
      throw UsageError("--worker-links: '" + item +
                       "' is not LATENCY_MS/GBIT_PER_S (e.g. 0.1/10: 0.1 ms, 10 Gbit/s; the bandwidth above 0)");
    links.push_back(Link{ms / 1000, gbit});
  }
  if (links.empty()) links.push_back(Link{});
  if (links.size() == 1) links.assign(static_cast<std::size_t>(workers), links[0]);
  if (static_cast<int>(links.size()) != workers)
    throw UsageError("--worker-links lists " + std::to_string(links.size()) + " links for " + std::to_string(workers) +
                     " workers; give one for all or one per worker, in rank order");
  return links;
}

std::vector<VirtualJoin> parse_virtual_joins(const std::string& spec) {
  std::vector<VirtualJoin> joins;
  for (const auto& item : split(spec)) {
    const auto bad = [&] {
      return UsageError("--virtual-joins: '" + item + "' is not TYPE@step=N or TYPE@TIME (e.g. k80@step=16000, k80@2h)");
    };
    const auto at = item.find('@');
    if (at == std::string::npos || at == 0) throw bad();
    VirtualJoin j;
    j.type = item.substr(0, at);
    const std::string when = item.substr(at + 1);
    if (when.rfind("step=", 0) == 0) {
      double v = 0;
      if (!parse_number(when.substr(5), v) || v < 1 || v != std::floor(v)) throw bad();
      j.step = static_cast<std::int64_t>(v);
    } else if (!parse_duration(when, j.seconds).empty()) {
      throw bad();
    }
    joins.push_back(j);
  }
  return joins;
}

double default_ps_update_seconds(std::int64_t params) { return 0.00011 * double(params) / 464154.0; }

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
                      c.momentum, c.join_warmup);

  // Revocations on the virtual clock: --revoke names worker ranks 1..N (rank 0 is the parameter
  // server, which is not revoked here); --revocation-model draws each worker's lifetime.
  const std::vector<RevokeEntry> revokes = parse_revoke(c.revoke);
  std::optional<RevocationModel> lifetimes;
  if (!c.revocation_model.empty()) lifetimes = RevocationModel::load(c.revocation_model);

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

  std::vector<Worker> workers(static_cast<std::size_t>(total));
  std::vector<double> join_at(joins.size(), kNever);
  for (std::size_t j = 0; j < joins.size(); ++j) join_at[j] = joins[j].seconds >= 0 ? joins[j].seconds : kNever;
  for (int i = 0; i < total; ++i) {
    Worker& w = workers[static_cast<std::size_t>(i)];
    w.rank = i + 1;
    w.type = types[static_cast<std::size_t>(i)];
    w.link = links[static_cast<std::size_t>(i)];
    w.slot = i;
    w.pacer.emplace(emulated[static_cast<std::size_t>(i)], pacer_seed(c.seed, w.rank));
    w.alive = w.counted = i < n0;  // joiners start later
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
  int active = n0;
  std::int64_t step = 0;
  double ps_free = 0, now = 0;
  // A worker's next push: from `at` the parameters reach it (one message down), it computes its
  // step, and the push reaches the parameter server (one message up).
  const auto next_step = [&](Worker& w, double at) {
    w.last_step_seconds = w.pacer->draw_target();
    w.arrival = at + w.link.seconds(message_bytes) + w.last_step_seconds + w.link.seconds(message_bytes);
  };
  auto start_worker = [&](Worker& w, double at) {
    LoaderOptions lo = setup.loader;
    lo.shard = w.slot;
    lo.num_shards = total;
    w.loader = std::make_unique<BatchLoader>(setup.data.train, lo);
    w.snapshot = FlatTensors(model.params());
    std::copy(params.span().begin(), params.span().end(), w.snapshot.span().begin());
    if (policy.per_slot_momentum())
      w.own.emplace(model.params(), SgdConfig{static_cast<float>(c.momentum), static_cast<float>(c.weight_decay), true});
    w.version = step;
    w.begun = true;
    w.started = at;
    next_step(w, at);
    if (lifetimes) {
      const double life = sampled_lifetime_seconds(*lifetimes, c.seed, w.rank, 1.0);
      if (life >= 0) w.kill_at = std::min(w.kill_at, at + life);
    }
  };
  for (int i = 0; i < n0; ++i) start_worker(workers[static_cast<std::size_t>(i)], 0);

  const std::string emulating = emulating_note(c, emulated);
  metrics.write(nlohmann::ordered_json{
      {"event", "config"},           {"model", spec.name},
      {"parameters", model.param_count()}, {"data", setup.data_dir},
      {"data_format", setup.data.format},  {"train_steps", c.train_steps},
      {"batch_size", c.batch_size},  {"virtual_workers", n0},
      {"virtual_joins", c.virtual_joins}, {"num_ps", 1},
      {"lr_schedule", setup.schedule.describe()}, {"momentum", c.momentum},
      {"nesterov", setup.nesterov},  {"weight_decay", c.weight_decay},
      {"seed", c.seed},              {"lr_scaling", c.lr_scaling},
      {"momentum_correction", c.momentum_correction}, {"join_warmup", c.join_warmup}, {"max_staleness", c.max_staleness},
      {"worker_types", types},       {"emulation", emulation_json(c, emulated)},
      {"worker_links_seconds", [&] {
         nlohmann::ordered_json l = nlohmann::ordered_json::array();
         for (const auto& w : workers) l.push_back(w.link.seconds(message_bytes));
         return l;
       }()},
      {"ps_update_seconds", update_seconds}, {"failure_timeout", c.failure_timeout},
      {"ps_type", c.ps_type},        {"pricing", c.pricing},
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
  std::int64_t revocations = 0, lost = 0, left = 0, joined = 0, dropped = 0, window_images = 0, window_correct = 0,
               window_pushes = 0;
  double window_loss = 0, window_staleness = 0, window_start = 0, staleness_sum = 0, max_staleness = 0, last_lr = 0;
  std::int64_t last_eval = 0;
  const auto log_every = std::max<std::int64_t>(1, c.log_every_steps);
  const auto departure = [&](Worker& w, bool lost_it, double at, const std::string& detail) {
    if (!w.counted) return;
    w.counted = false;
    --active;
    ++revocations;
    (lost_it ? lost : left) += 1;
    metrics.write(nlohmann::ordered_json{{"event", "revocation"},     {"global_step", step},
                                         {"rank", w.rank},           {"instance_type", w.type},
                                         {"cause", lost_it ? "lost" : "notice"},
                                         {"detected_by", lost_it ? "heartbeat" : "notice"},
                                         {"detail", detail},         {"virtual_seconds", at},
                                         {"active_workers", active}, {"lr_divisor", policy.lr_divisor(active)}});
    if (!c.quiet)
      log << "revocation: worker rank " << w.rank << " (" << w.type << ") " << (lost_it ? "lost" : "left")
          << " at global step " << step << ", virtual time " << format_eta(at) << ": " << detail << "; " << active
          << " worker(s) remain\n"
          << std::flush;
  };
  // SIGKILL: the worker is gone, its step in flight lost, and the parameter server notices after
  // --failure-timeout. A notice (TERM, USR1): it pushes the step it computes and leaves.
  const auto kill = [&](Worker& w, double at, const std::string& why) {
    if (!w.alive || w.leaving) return;
    w.kill_why = why + " (" + signal_name(w.kill_signal) + ")";
    w.kill_at = kNever;
    if (w.kill_signal != SIGKILL) {
      w.leaving = true;
      return;
    }
    w.alive = false;
    w.ended = at;
    w.arrival = kNever;
    w.loader.reset();
    w.detect_at = at + c.failure_timeout;
  };
  const auto join_now = [&](std::size_t j, double at) {
    Worker& w = workers[static_cast<std::size_t>(n0) + j];
    join_at[j] = kNever;
    w.alive = w.counted = true;
    ++active;
    ++joined;
    policy.joined(step, active - 1, active);
    start_worker(w, at);
    metrics.write(nlohmann::ordered_json{{"event", "join"},        {"global_step", step},
                                         {"rank", w.rank},         {"instance_type", w.type},
                                         {"virtual_seconds", at},  {"active_workers", active},
                                         {"lr_divisor", policy.lr_divisor(active)}});
    if (!c.quiet)
      log << "join: worker rank " << w.rank << " (" << w.type << ") joined at global step " << step << ", virtual time "
          << format_eta(at) << "; " << active << " worker(s)\n"
          << std::flush;
  };
  std::string stopped_by;
  while (step < c.train_steps) {
    if (const int sig = notice_signal()) {
      stopped_by = signal_name(sig);
      break;
    }
    // The next event: a push arriving, a timed kill, a loss noticed, a timed join.
    double t = kNever;
    enum class Kind { kNone, kArrive, kKill, kDetect, kJoin } kind = Kind::kNone;
    std::size_t who = 0;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      const Worker& w = workers[i];
      if (w.alive && w.kill_at < t) t = w.kill_at, kind = Kind::kKill, who = i;
      if (w.alive && w.arrival < t) t = w.arrival, kind = Kind::kArrive, who = i;
      if (!w.alive && w.counted && w.detect_at < t) t = w.detect_at, kind = Kind::kDetect, who = i;
    }
    for (std::size_t j = 0; j < join_at.size(); ++j)
      if (join_at[j] < t) t = join_at[j], kind = Kind::kJoin, who = j;
    if (kind == Kind::kNone) {
      stopped_by = "every worker revoked";
      break;
    }
    now = std::max(now, t);
    Worker& w = workers[who];
    if (kind == Kind::kKill) {
      kill(w, t, "--revoke or its sampled lifetime at virtual time " + format_eta(t));
      continue;
    }
    if (kind == Kind::kDetect) {
      departure(w, true, t, w.kill_why + ": no push or heartbeat within --failure-timeout");
      continue;
    }
    if (kind == Kind::kJoin) {
      join_now(who, t);
      continue;
    }
    // The push arrives; the parameter server applies it in arrival order.
    const double applied = std::max(t, ps_free) + update_seconds;
    ps_free = applied;
    now = applied;
    const Batch& batch = w.loader->next();
    const StepStats st =
        net.train_step(net.stage_images(batch.images), batch.labels, w.snapshot, grads, batch_stats, nullptr);
    const double staleness = double(step - w.version);
    if (c.max_staleness >= 0 && staleness > double(c.max_staleness)) {
      // Too stale: not applied, the worker gets the current parameters. It still counts as a global
      // step, as in the parameter server (where every shard must count the same pushes).
      ++dropped;
      ++step;
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
      ++step;
      push_log.write(step, w.rank, w.version, applied);
      staleness_sum += staleness;
      max_staleness = std::max(max_staleness, staleness);
      ++w.pushes;
      ++w.window_pushes;
      w.window_images += c.batch_size;
      w.window_staleness += staleness;
      w.window_step_seconds += w.last_step_seconds;
      window_loss += st.loss;
      window_staleness += staleness;
      window_correct += st.correct;
      window_images += c.batch_size;
      ++window_pushes;
    }
    // The reply: this worker's next step starts from the parameters after its push.
    std::copy(params.span().begin(), params.span().end(), w.snapshot.span().begin());
    w.version = step;
    if (w.leaving) {
      w.alive = false;
      w.ended = applied;
      w.arrival = kNever;
      w.loader.reset();
      departure(w, false, applied, w.kill_why + ": a notice, its last step pushed");
    } else {
      next_step(w, applied);
    }
    // Step-based revocations and joins fire once the global step reaches theirs.
    for (auto& x : workers)
      if (x.alive && x.kill_step > 0 && step >= x.kill_step) {
        x.kill_step = -1;
        kill(x, applied, "--revoke at global step " + std::to_string(step));
      }
    for (std::size_t j = 0; j < joins.size(); ++j)
      if (joins[j].step > 0 && step >= joins[j].step && !workers[static_cast<std::size_t>(n0) + j].begun &&
          join_at[j] == kNever)
        join_at[j] = applied;  // joins now: the next event
    const bool last = step == c.train_steps;
    if (window_pushes > 0 && (step % log_every == 0 || last)) {
      const double dt = std::max(now - window_start, 1e-12);
      const double done = double(step) / double(c.train_steps);
      const double real = seconds_since(t_start);
      const double mean_staleness = window_staleness / double(window_pushes);
      if (!c.quiet)
        log << format_progress(ProgressLine{step, c.train_steps, window_loss / double(window_pushes),
                                            double(window_correct) / double(window_images), last_lr,
                                            double(window_images) / dt, active, mean_staleness,
                                            real * (1 - done) / std::max(done, 1e-9)})
            << "  vtime " << format_eta(now) << '\n'
            << std::flush;
      nlohmann::ordered_json per = nlohmann::ordered_json::array();
      for (auto& x : workers) {
        if (!x.begun) continue;  // not joined yet
        per.push_back(nlohmann::ordered_json{
            {"rank", x.rank},
            {"instance_type", x.type},
            {"pushes", x.window_pushes},
            {"images_per_second", double(x.window_images) / dt},
            {"mean_staleness", x.window_pushes ? x.window_staleness / double(x.window_pushes) : 0.0},
            {"step_seconds", x.window_pushes ? x.window_step_seconds / double(x.window_pushes) : 0.0},
            {"active", x.counted}});
        x.window_pushes = x.window_images = 0;
        x.window_staleness = x.window_step_seconds = 0;
      }
      metrics.write(nlohmann::ordered_json{{"event", "progress"},
                                           {"global_step", step},
                                           {"loss", window_loss / double(window_pushes)},
                                           {"train_accuracy", double(window_correct) / double(window_images)},
                                           {"lr", last_lr},
                                           {"momentum", policy.momentum(active)},
                                           {"images_per_second", double(window_images) / dt},
                                           {"active_workers", active},
                                           {"mean_staleness", mean_staleness},
                                           {"dropped_stale_pushes", dropped},
                                           {"virtual_seconds", now},
                                           {"elapsed_seconds", real},
                                           {"workers", per}});
      window_loss = window_staleness = 0;
      window_images = window_correct = window_pushes = 0;
      window_start = now;
    }
    if (c.eval_every_steps > 0 && step % c.eval_every_steps == 0 && !last && step != last_eval) {
      last_eval = step;
      const auto ev = evaluate_test_set(net, setup.data.test, setup.loader, params, stats);
      if (!c.quiet)
        log << "eval step " << step << "  test_acc " << std::setprecision(4) << ev.accuracy << "  test_loss " << ev.loss
            << "  vtime " << format_eta(now) << '\n';
      metrics.write(nlohmann::ordered_json{{"event", "eval"},
                                           {"global_step", step},
                                           {"test_accuracy", ev.accuracy},
                                           {"test_loss", ev.loss},
                                           {"virtual_seconds", now}});
    }
  }

  // The bill of the virtual cluster: each worker from its start to its end, the PS throughout.
  double cost = setup.prices.cost_usd(c.ps_type, setup.transient, now);
  int workers_end = 0;
  nlohmann::ordered_json usage = nlohmann::ordered_json::array();
  for (auto& w : workers) {
    if (!w.begun) continue;  // never joined
    const double end = w.ended >= 0 ? w.ended : now;
    const double billed = std::max(0.0, end - w.started);
    cost += setup.prices.cost_usd(w.type, setup.transient, billed);
    workers_end += w.counted ? 1 : 0;
    usage.push_back(nlohmann::ordered_json{
        {"rank", w.rank}, {"instance_type", w.type}, {"pushes", w.pushes}, {"virtual_seconds", billed}});
  }
  res.global_step = step;
  res.train_seconds = seconds_since(t_start);
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
      {"revocations", revocations},
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
      {"lost_workers", lost},
      {"left_workers", left},
      {"joined_workers", joined},
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
          << (joined ? " + " + std::to_string(joined) + " joined" : std::string()) << ", test accuracy "
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
