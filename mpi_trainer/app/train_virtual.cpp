// Virtual workers on a virtual clock (`train --virtual-workers`, app/train_virtual.hpp).
#include "app/train_virtual.hpp"

#include <algorithm>
#include <csignal>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "plan/cluster_sim.hpp"
#include "app/config_event.hpp"
#include "app/emulation.hpp"
#include "app/learning_check.hpp"
#include "app/history_log.hpp"
#include "app/metrics.hpp"
#include "plan/plan.hpp"
#include "app/run_setup.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "optim/optimizer.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"
#include "ps/exchange/update_policy.hpp"

namespace mt {

namespace {

// One logical worker's training state (its timing is the simulator's: ClusterSim).
struct Trainee {
  int slot = 0;
  std::unique_ptr<BatchLoader> loader;
  FlatTensors snapshot;    // the parameters of its last reply, in the parameter server's fp32
  FlatTensors received;    // --push-precision bf16: the same as the worker receives them, rounded
  std::optional<Sgd> own;  // --momentum-correction dana: its own (its data slot's) momentum
  std::int64_t window_pushes = 0, window_images = 0;
  double window_staleness = 0, window_step_seconds = 0;
};

// The flags a virtual run refuses; then notices are caught (a notice or Ctrl-C stops the run).
Clock::time_point check_flags_and_catch_notices(const TrainConfig& cfg) {
  if (cfg.virtual_workers < 1) throw UsageError("--virtual-workers must be 1 or more");
  if (!cfg.ckpt_dir.empty()) throw UsageError("--virtual-workers runs keep no checkpoints: leave out --ckpt-dir");
  if (cfg.num_ps != 1) throw UsageError("--virtual-workers runs have one parameter-server shard: leave out --num-ps");
  if (cfg.max_workers > 0) throw UsageError("--virtual-workers: joins are --virtual-joins, not --max-workers");
  if (cfg.replace_workers)
    throw UsageError("--virtual-workers does not simulate --replace-workers (replacements are real processes): "
                     "give the joins it would make as --virtual-joins");
  if (cfg.synthetic_gradients) throw UsageError("--virtual-workers computes real gradients: no --synthetic-gradients");
  install_notice_handlers();
  install_interrupt_handler();
  return Clock::now();
}

TrainConfig resolved(const TrainConfig& cfg) {
  TrainConfig c = cfg;
  resolve_policy(c);
  // Virtual time needs device speeds: each worker's instance type unless --emulate-device says.
  if (c.emulate_device.empty() || c.emulate_device == "off") c.emulate_device = "worker-types";
  return c;
}

// Every worker's instance type: the launched ones', then each join's (every one priced).
std::vector<std::string> all_types(const TrainConfig& c, const RunSetup& setup, const std::vector<VirtualJoin>& joins) {
  std::vector<std::string> types = worker_types(c, setup.prices, c.virtual_workers);
  for (const auto& j : joins) {
    setup.prices.per_hour(j.type, setup.transient);
    types.push_back(j.type);
  }
  return types;
}

// A run of virtual workers: real gradients applied in the order a simulated cluster (ClusterSim:
// device speeds, links, the parameter server's update time, revocations and joins on a virtual
// clock) delivers their pushes. One process; the same update policy as the parameter server.
class VirtualRun {
 public:
  VirtualRun(const TrainConfig& cfg, std::ostream& log);
  TrainResult run();

 private:
  std::vector<SimWorker> sim_workers() const;
  ClusterSim make_sim();
  // A worker's training state once it starts: its data shard, the parameters it was sent, its
  // own momentum under dana.
  void start_trainee(std::size_t i);
  void sent(Trainee& w);  // a reply: the parameters `w` computes its next step on
  void write_config();
  // A worker no longer counted: lost (noticed after --failure-timeout) or left after a notice.
  void departure(std::size_t who, bool lost_it, double at, const std::string& detail);
  void joined(const ClusterSim::Event& ev);
  // The push arrives; the parameter server applies it in arrival order.
  void arrived(const ClusterSim::Event& ev);
  void report_progress();
  void evaluate_during();
  TrainResult finish(const std::string& stopped_by);

  const Clock::time_point t_start_;
  const TrainConfig c_;
  std::ostream& log_;
  const RunSetup setup_;
  const int n0_;
  const std::vector<VirtualJoin> joins_;
  const std::vector<std::string> types_;
  const int total_;
  const std::vector<Emulation> emulated_;
  const std::vector<Link> links_;
  Model model_;
  const PushPrecision precision_;  // --push-precision: gradients and replies rounded as on the wire
  const double update_seconds_, message_bytes_;
  UpdatePolicy policy_;
  // Revocations on the virtual clock: --revoke names worker ranks 1..N (rank 0 is the parameter
  // server, which is not revoked here); --revocation-model draws each worker's lifetime.
  const std::vector<RevokeEntry> revokes_;
  // The live prediction's models (plan/plan.hpp): --revocation-model, else gce when transient;
  // the simulator draws lifetimes only from --revocation-model, which is then the same.
  const std::map<std::string, RevocationModel> lifetimes_by_type_;
  std::unique_ptr<Backend> backend_;
  MetricsWriter metrics_;
  PushLog push_log_;
  FlatTensors params_, stats_, grads_, batch_stats_;
  Sgd sgd_;
  Network net_;
  // --lr-scaling gap: each gradient element's penalty (its running mean steps in gap_mean_step_),
  // and the parameters before each update.
  std::optional<GapPenalty> gap_;
  std::vector<float> gap_mean_step_;
  FlatTensors before_update_;
  std::vector<Trainee> trainees_;
  ClusterSim sim_;

  TrainResult res_;
  std::int64_t dropped_ = 0, window_images_ = 0, window_correct_ = 0, window_pushes_ = 0;
  double window_loss_ = 0, window_staleness_ = 0, window_start_ = 0, staleness_sum_ = 0, max_staleness_ = 0,
         last_lr_ = 0;
  std::int64_t last_eval_ = 0;
};

VirtualRun::VirtualRun(const TrainConfig& cfg, std::ostream& log)
    : t_start_(check_flags_and_catch_notices(cfg)),
      c_(resolved(cfg)),
      log_(log),
      setup_(prepare_run(c_)),
      n0_(c_.virtual_workers),
      joins_(parse_virtual_joins(c_.virtual_joins)),
      types_(all_types(c_, setup_, joins_)),
      total_(static_cast<int>(types_.size())),
      emulated_(emulations(c_, types_)),
      links_([this] {
        std::vector<Link> links = parse_links(c_.worker_links, n0_);
        links.resize(static_cast<std::size_t>(total_), links.empty() ? Link{} : links.back());
        return links;
      }()),
      model_(setup_.spec),
      precision_(parse_push_precision(c_.push_precision)),
      update_seconds_(c_.ps_update_seconds >= 0 ? c_.ps_update_seconds
                                                : default_ps_update_seconds(model_.param_count(), precision_)),
      message_bytes_(double(model_.param_count()) * wire_bytes_per_value(precision_)),
      policy_(setup_.schedule, parse_lr_scaling(c_.lr_scaling), parse_momentum_correction(c_.momentum_correction),
              c_.momentum, c_.join_warmup, c_.momentum_auto),
      revokes_(parse_revoke(c_.revoke)),
      lifetimes_by_type_(revocation_models(prediction_model(c_.revocation_model, setup_.transient), types_)),
      backend_(make_backend(setup_.device, setup_.threads)),
      metrics_(c_.metrics, c_.tensorboard),
      push_log_(c_.push_log),
      params_(model_.params()),
      stats_(model_.stats()),
      grads_(model_.params()),
      batch_stats_(model_.stats()),
      sgd_(model_.params(), SgdConfig{static_cast<float>(c_.momentum), static_cast<float>(c_.weight_decay),
                                      setup_.nesterov}),
      net_(model_, *backend_, c_.batch_size),
      trainees_(static_cast<std::size_t>(total_)),
      sim_(make_sim()) {
  model_.init_params(params_, stats_, c_.seed);
  policy_.stabilize(rate_stability(c_, n0_));
  if (policy_.gap_aware()) {
    gap_mean_step_.assign(params_.span().size(), 0.f);
    gap_.emplace(gap_mean_step_);
    before_update_ = FlatTensors(model_.params());
  }
  for (int i = 0; i < n0_; ++i)
    start_trainee(static_cast<std::size_t>(i));
}

std::vector<SimWorker> VirtualRun::sim_workers() const {
  std::vector<SimWorker> sim_workers(static_cast<std::size_t>(total_));
  for (int i = 0; i < total_; ++i) {
    SimWorker& w = sim_workers[static_cast<std::size_t>(i)];
    w.rank = i + 1;
    w.type = types_[static_cast<std::size_t>(i)];
    w.link = links_[static_cast<std::size_t>(i)];
    w.pacer.emplace(emulated_[static_cast<std::size_t>(i)], pacer_seed(c_.seed, w.rank));
    for (const auto& e : revokes_) {
      if (e.rank < 1 || e.rank > total_)
        throw UsageError("--revoke: rank " + std::to_string(e.rank) + " is not a worker of this virtual run (ranks 1.." +
                         std::to_string(total_) + "; rank 0, the parameter server, is not revoked in a virtual run)");
      if (e.ckpt_write > 0) throw UsageError("--revoke: @ckpt= needs checkpoints, which virtual runs do not write");
      if (e.rank != w.rank) continue;
      if (e.step > 0) w.kill_step = e.step;
      if (e.seconds >= 0) w.kill_at = e.seconds;
      w.kill_signal = e.signal;
    }
  }
  return sim_workers;
}

ClusterSim VirtualRun::make_sim() {
  SimOptions sim_options;
  sim_options.update_seconds = update_seconds_;
  sim_options.message_bytes = message_bytes_;
  sim_options.ps_link = parse_ps_link(c_.ps_link);
  sim_options.shard_bytes = {message_bytes_};
  // The standby's replicas cross the parameter server's link too, as train picks them for the real
  // run (which would keep checkpoints).
  const int standbys = resolve_standbys(c_.ps_standby, n0_, true);
  sim_options.replica_bytes = shard_replica_bytes(
      c_.model, 1,
      replica_state_buffers(parse_momentum_correction(c_.momentum_correction) == MomentumCorrection::kDana,
                            policy_.gap_aware(), total_),
      standbys);
  sim_options.replica_interval = c_.replica_interval;
  sim_options.standbys = standbys;
  sim_options.failure_timeout = c_.failure_timeout;
  sim_options.seed = c_.seed;
  if (!c_.revocation_model.empty()) sim_options.lifetimes = lifetimes_by_type_;
  return ClusterSim(std::move(sim_options), sim_workers(), n0_, joins_);
}

void VirtualRun::sent(Trainee& w) {
  std::copy(params_.span().begin(), params_.span().end(), w.snapshot.span().begin());
  if (precision_ == PushPrecision::kFp32) return;
  std::copy(params_.span().begin(), params_.span().end(), w.received.span().begin());
  round_to_wire(precision_, w.received.span());
}

void VirtualRun::start_trainee(std::size_t i) {
  Trainee& w = trainees_[i];
  w.slot = static_cast<int>(i);
  LoaderOptions lo = setup_.loader;
  lo.shard = w.slot;
  lo.num_shards = total_;
  w.loader = std::make_unique<BatchLoader>(setup_.data.train, lo);
  w.snapshot = FlatTensors(model_.params());
  if (precision_ != PushPrecision::kFp32) w.received = FlatTensors(model_.params());
  sent(w);
  if (policy_.per_slot_momentum())
    w.own.emplace(model_.params(), SgdConfig{static_cast<float>(c_.momentum), static_cast<float>(c_.weight_decay), true});
}

void VirtualRun::write_config() {
  nlohmann::ordered_json config = config_event(c_, setup_, model_.param_count(), emulated_);
  add_policy_fields(config, c_, types_);
  config["virtual_workers"] = n0_;
  config["virtual_joins"] = c_.virtual_joins;
  config["num_ps"] = 1;
  config["worker_links_seconds"] = nlohmann::ordered_json::array();
  for (const auto& w : sim_.workers())
    config["worker_links_seconds"].push_back(w.link.seconds(message_bytes_));
  config["ps_update_seconds"] = update_seconds_;
  if (const auto link = parse_ps_link(c_.ps_link))
    config["ps_link_gbit"] = link->gbit_per_s;
  else
    config["ps_link_gbit"] = nullptr;
  config["failure_timeout"] = c_.failure_timeout;
  config["revoke"] = c_.revoke;
  config["revocation_model"] = c_.revocation_model;
  config["evidence"] = "E";
  config["processes"] = 1;
  metrics_.write(config);
  if (!c_.quiet)
    log_ << "mpi_trainer: virtual run: " << n0_ << " worker(s)"
         << (joins_.empty() ? std::string() : " + " + std::to_string(joins_.size()) + " joining")
         << " and 1 parameter server on a virtual clock, " << setup_.spec.name << " (" << model_.param_count()
         << " parameters) on " << setup_.data.format << ", " << c_.train_steps << " global steps of " << c_.batch_size
         << ", lr " << setup_.schedule.describe() << describe_stability(rate_stability(c_, n0_), setup_.schedule)
         << ", lr scaling " << c_.lr_scaling
         << describe_momentum(parse_momentum_correction(c_.momentum_correction), c_.momentum, n0_,
                              policy_.momentum(n0_))
         << (precision_ == PushPrecision::kBf16 ? ", bf16 pushes" : "") << emulating_note(c_, emulated_) << "\n"
         << std::flush;
}

void VirtualRun::departure(std::size_t who, bool lost_it, double at, const std::string& detail) {
  const SimWorker& w = sim_.worker(who);
  trainees_[who].loader.reset();
  metrics_.write(nlohmann::ordered_json{{"event", "revocation"},     {"global_step", sim_.step()},
                                        {"rank", w.rank},           {"instance_type", w.type},
                                        {"cause", lost_it ? "lost" : "notice"},
                                        {"detected_by", lost_it ? "heartbeat" : "notice"},
                                        {"detail", detail},         {"virtual_seconds", at},
                                        {"active_workers", sim_.active()}, {"lr_divisor", policy_.lr_divisor(sim_.active())},
                                        {"momentum", policy_.momentum(sim_.active())}});
  if (!c_.quiet)
    log_ << "revocation: worker rank " << w.rank << " (" << w.type << ") " << (lost_it ? "lost" : "left")
         << " at global step " << sim_.step() << ", virtual time " << format_eta(at) << ": " << detail << "; "
         << sim_.active() << " worker(s) remain\n"
         << std::flush;
}

void VirtualRun::joined(const ClusterSim::Event& ev) {
  const SimWorker& sw = sim_.worker(ev.who);
  policy_.joined(sim_.step(), sim_.active() - 1, sim_.active());
  start_trainee(ev.who);
  metrics_.write(nlohmann::ordered_json{{"event", "join"},        {"global_step", sim_.step()},
                                        {"rank", sw.rank},        {"instance_type", sw.type},
                                        {"virtual_seconds", ev.at}, {"active_workers", sim_.active()},
                                        {"lr_divisor", policy_.lr_divisor(sim_.active())},
                                        {"momentum", policy_.momentum(sim_.active())}});
  if (!c_.quiet)
    log_ << "join: worker rank " << sw.rank << " (" << sw.type << ") joined at global step " << sim_.step()
         << ", virtual time " << format_eta(ev.at) << "; " << sim_.active() << " worker(s)\n"
         << std::flush;
}

void VirtualRun::arrived(const ClusterSim::Event& ev) {
  const SimWorker& sw = sim_.worker(ev.who);
  Trainee& w = trainees_[ev.who];
  const int active = sim_.active();
  const std::int64_t step = sim_.step();
  const Batch& batch = w.loader->next();
  const StepStats st = net_.train_step(net_.stage_images(batch.images), batch.labels,
                                       precision_ == PushPrecision::kFp32 ? w.snapshot : w.received, grads_, batch_stats_, nullptr);
  round_to_wire(precision_, grads_.span());  // the push as the parameter server decodes it
  const double staleness = sim_.staleness(ev.who);
  const bool too_stale = c_.max_staleness >= 0 && staleness > double(c_.max_staleness);
  if (too_stale) {
    // Too stale: not applied, the worker gets the current parameters. It still counts as a global
    // step, as in the parameter server (where every shard must count the same pushes).
    ++dropped_;
  } else {
    check_divergence(st.loss, c_.max_loss, step + 1);
    if (policy_.observe_loss(step, st.loss, active)) log_ << describe_cut(step + 1, policy_.guard().last_cut()) << '\n';
    const double lr = policy_.lr(step, active, staleness);
    if (gap_) {
      gap_->penalize(grads_.span(), params_.span(), w.snapshot.span(), staleness);
      std::copy(params_.span().begin(), params_.span().end(), before_update_.span().begin());
    }
    (w.own ? *w.own : sgd_).step(*backend_, params_, grads_, static_cast<float>(lr),
                                 static_cast<float>(policy_.momentum(active)));
    if (gap_) gap_->track(before_update_.span(), params_.span());
    model_.update_running_stats(stats_, batch_stats_, net_.bn_counts());
    last_lr_ = lr;
    push_log_.write(step + 1, sw.rank, sw.version, sim_.applied_at());
    staleness_sum_ += staleness;
    max_staleness_ = std::max(max_staleness_, staleness);
    ++w.window_pushes;
    w.window_images += c_.batch_size;
    w.window_staleness += staleness;
    w.window_step_seconds += sw.last_step_seconds;
    window_loss_ += st.loss;
    window_staleness_ += staleness;
    window_correct_ += st.correct;
    window_images_ += c_.batch_size;
    ++window_pushes_;
  }
  // The reply: this worker's next step starts from the parameters after its push.
  sent(w);
  if (sim_.pushed(ev.who, !too_stale).kind == ClusterSim::Kind::kLeft)
    departure(ev.who, false, sim_.applied_at(), sw.kill_why + ": a notice, its last step pushed");
  const std::int64_t done_steps = sim_.step();
  const bool last = done_steps == c_.train_steps;
  if (window_pushes_ > 0 && (done_steps % std::max<std::int64_t>(1, c_.log_every_steps) == 0 || last))
    report_progress();
  if (c_.eval_every_steps > 0 && done_steps % c_.eval_every_steps == 0 && !last && done_steps != last_eval_)
    evaluate_during();
}

void VirtualRun::report_progress() {
  const double now = sim_.now();
  const std::int64_t done_steps = sim_.step();
  const double dt = std::max(now - window_start_, 1e-12);
  const double done = double(done_steps) / double(c_.train_steps);
  const double real = since(t_start_);
  const double mean_staleness = window_staleness_ / double(window_pushes_);
  // The live prediction (plan/plan.hpp): each active worker's pushes per virtual second, the
  // virtual cluster's bill so far.
  std::vector<LiveWorker> live;
  double spent = setup_.prices.cost_usd(c_.ps_type, setup_.ps_transient, now);
  for (std::size_t i = 0; i < trainees_.size(); ++i) {
    const SimWorker& x = sim_.worker(i);
    if (!x.begun) continue;
    spent += setup_.prices.cost_usd(x.type, setup_.transient, sim_.billed_seconds(i));
    if (x.alive && x.counted) live.push_back(LiveWorker{x.type, double(trainees_[i].window_pushes) / dt, now - x.started});
  }
  const LivePrediction predicted =
      predict_finish(c_.train_steps - done_steps, live, lifetimes_by_type_, 1.0, setup_.prices, setup_.transient, spent,
                     setup_.prices.cost_usd(c_.ps_type, setup_.ps_transient, 1.0));
  const double real_left = real * (1 - done) / std::max(done, 1e-9);  // of this process, in real time
  if (!c_.quiet)
    log_ << format_progress(ProgressLine{done_steps, c_.train_steps, window_loss_ / double(window_pushes_),
                                         double(window_correct_) / double(window_images_), last_lr_,
                                         double(window_images_) / dt, sim_.active(), mean_staleness})
         << "  vtime " << format_eta(now) << format_prediction(predicted, "vfinish")
         << "  (simulation: " << format_eta(real_left) << " left)\n"
         << std::flush;
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < trainees_.size(); ++i) {
    const SimWorker& x = sim_.worker(i);
    Trainee& t = trainees_[i];
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
  metrics_.write(nlohmann::ordered_json{{"event", "progress"},
                                        {"global_step", done_steps},
                                        {"loss", window_loss_ / double(window_pushes_)},
                                        {"train_accuracy", double(window_correct_) / double(window_images_)},
                                        {"lr", last_lr_},
                                        {"momentum", policy_.momentum(sim_.active())},
                                        {"images_per_second", double(window_images_) / dt},
                                        {"active_workers", sim_.active()},
                                        {"mean_staleness", mean_staleness},
                                        {"dropped_stale_pushes", dropped_},
                                        {"virtual_seconds", now},
                                        {"elapsed_seconds", real},
                                        {"eta_seconds", real_left},
                                        {"predicted_seconds_left", prediction_seconds_json(predicted)},
                                        {"predicted_cost_usd", prediction_cost_json(predicted)},
                                        {"workers", per}});
  window_loss_ = window_staleness_ = 0;
  window_images_ = window_correct_ = window_pushes_ = 0;
  window_start_ = now;
}

void VirtualRun::evaluate_during() {
  const double now = sim_.now();
  const std::int64_t done_steps = sim_.step();
  last_eval_ = done_steps;
  const auto e = evaluate_test_set(net_, setup_.data.test, setup_.loader, params_, stats_);
  if (!c_.quiet)
    log_ << "eval step " << done_steps << "  test_acc " << std::setprecision(4) << e.accuracy << "  test_loss "
         << e.loss << "  vtime " << format_eta(now) << '\n';
  metrics_.write(nlohmann::ordered_json{{"event", "eval"},
                                        {"global_step", done_steps},
                                        {"test_accuracy", e.accuracy},
                                        {"test_loss", e.loss},
                                        {"virtual_seconds", now}});
}

TrainResult VirtualRun::finish(const std::string& stopped_by) {
  // The bill of the virtual cluster: each worker from its start to its end, the PS throughout.
  const double now = sim_.now();
  const std::int64_t step = sim_.step();
  double cost = setup_.prices.cost_usd(c_.ps_type, setup_.ps_transient, now);
  int workers_end = 0;
  nlohmann::ordered_json usage = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < sim_.workers().size(); ++i) {
    const SimWorker& w = sim_.worker(i);
    if (!w.begun) continue;  // never joined
    const double billed = sim_.billed_seconds(i);
    cost += setup_.prices.cost_usd(w.type, setup_.transient, billed);
    workers_end += w.counted ? 1 : 0;
    usage.push_back(nlohmann::ordered_json{
        {"rank", w.rank}, {"instance_type", w.type}, {"pushes", w.pushes}, {"virtual_seconds", billed}});
  }
  res_.global_step = step;
  res_.train_seconds = since(t_start_);
  res_.cost_usd = cost;
  res_.images_per_second = double(step * c_.batch_size) / std::max(now, 1e-12);
  const int notice = notice_signal();
  if (notice) {
    // A notice or Ctrl-C: no evaluation (a virtual run keeps no checkpoint to continue from).
    res_.exit_code = notice == SIGINT ? kExitInterrupted : kExitRequeue;
  } else {
    const auto ev = evaluate_test_set(net_, setup_.data.test, setup_.loader, params_, stats_);
    res_.test_accuracy = ev.accuracy;
    res_.test_loss = ev.loss;
    metrics_.write(nlohmann::ordered_json{{"event", "eval"},
                                         {"global_step", step},
                                         {"test_accuracy", ev.accuracy},
                                         {"test_loss", ev.loss},
                                         {"virtual_seconds", now}});
  }
  nlohmann::ordered_json summary{
      {"event", "summary"},
      {"global_step", step},
      {"train_seconds", res_.train_seconds},
      {"virtual_seconds", now},
      {"test_accuracy", notice ? nlohmann::ordered_json() : nlohmann::ordered_json(res_.test_accuracy)},
      {"cost_usd", cost},
      {"revocations", sim_.revocations()},
      {"workers_start", n0_},
      {"workers_end", workers_end},
      {"images_per_second", res_.images_per_second},
      {"test_loss", notice ? nlohmann::ordered_json() : nlohmann::ordered_json(res_.test_loss)},
      {"mean_staleness", step > 0 ? staleness_sum_ / double(step) : 0.0},
      {"max_staleness", max_staleness_},
      {"dropped_stale_pushes", dropped_},
      {"lr_cuts", policy_.guard().cuts()},
      {"num_ps", 1},
      {"model", setup_.spec.name},
      {"worker_types", types_},
      {"ps_type", c_.ps_type},
      {"pricing", c_.pricing},
      {"ps_pricing", c_.ps_pricing},
      {"lost_workers", sim_.lost()},
      {"left_workers", sim_.left()},
      {"joined_workers", sim_.joined()},
      {"workers", usage},
      {"virtual", true},
      {"evidence", "E"},
      {"stopped_by", stopped_by.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(stopped_by)},
      {"exit_code", res_.exit_code}};
  add_warnings(summary, notice ? std::string()
                               : learned_nothing_warning(res_.test_accuracy, res_.test_loss,
                                                         setup_.spec.classes, c_, n0_));
  metrics_.write(summary);
  if (!c_.quiet) {
    if (!notice)
      log_ << (stopped_by.empty() ? "done: " : "stopped (" + stopped_by + "): ") << step << " global steps in virtual time " << format_eta(now) << " (" << std::fixed
          << std::setprecision(1) << now << " s; " << res_.train_seconds << " s real) by " << n0_ << " virtual worker(s)"
          << (sim_.joined() ? " + " + std::to_string(sim_.joined()) + " joined" : std::string()) << ", test accuracy "
          << std::setprecision(2) << 100.0 * res_.test_accuracy << "%, cost $" << std::setprecision(4) << cost << " ("
          << c_.pricing << ")\n";
    else
      log_ << "stopped early (" << stopped_by << ") at global step " << step << ", virtual time " << format_eta(now)
          << ": exit " << res_.exit_code << " (a virtual run keeps no checkpoint)\n";
    log_ << "summary: " << summary.dump() << '\n' << std::flush;
  }
  return res_;
}

TrainResult VirtualRun::run() {
  write_config();
  std::string stopped_by;
  while (sim_.step() < c_.train_steps) {
    if (const int sig = notice_signal()) {
      stopped_by = signal_name(sig);
      break;
    }
    const ClusterSim::Event ev = sim_.advance();
    if (ev.kind == ClusterSim::Kind::kNone) {
      stopped_by = "every worker revoked";
      break;
    }
    if (ev.kind == ClusterSim::Kind::kDetect)
      departure(ev.who, true, ev.at, sim_.worker(ev.who).kill_why + ": no push or heartbeat within --failure-timeout");
    else if (ev.kind == ClusterSim::Kind::kJoin)
      joined(ev);
    else if (ev.kind == ClusterSim::Kind::kArrive)
      arrived(ev);
    // else a kill: the loss is noticed later
  }
  return finish(stopped_by);
}

}  // namespace

TrainResult train_virtual(const TrainConfig& cfg, std::ostream& log) { return VirtualRun(cfg, log).run(); }

}  // namespace mt
