#include "app/plan.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "app/cluster_sim.hpp"
#include "app/cost.hpp"
#include "app/emulation.hpp"
#include "app/metrics.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "ps/ps.hpp"

namespace mt {

namespace {

// A job that needs more restarts than this does not finish (the draw says so).
constexpr int kMaxRestarts = 100;

constexpr const char* kAccuracyNote =
    "  (time to the global steps: what asynchrony costs in accuracy with more workers is not in the plan; "
    "measured in bench/README.md, \"Speed-up\", and by train --virtual-workers)\n";

bool transient_pricing(const std::string& value, const char* flag) {
  if (value == "transient") return true;
  if (value == "on-demand") return false;
  throw UsageError(std::string(flag) + ": '" + value + "': use transient or on-demand");
}

// Everything a draw needs, checked once.
struct Cluster {
  std::vector<std::string> types;  // per worker: the initial ones, then one per join
  std::vector<VirtualJoin> joins;
  std::vector<Emulation> speeds;
  std::vector<Link> links;
  std::int64_t steps = 0;
  std::int64_t params = 0;
  double update_seconds = 0;  // per shard and update
  double message_bytes = 0;
  std::map<std::string, RevocationModel> lifetimes;  // the workers' types (revocation_models)
  std::optional<RevocationModel> ps_lifetime;
  PriceTable prices;
  bool workers_transient = true, ps_transient = false;
  std::string device_source;
};

Cluster prepare(const PlanConfig& c) {
  if (c.workers < 1) throw UsageError("--workers must be 1 or more");
  if (c.num_ps < 0) throw UsageError("--num-ps must be 0 (one process alone) or more");
  if (c.num_ps == 0 && c.workers != 1)
    throw UsageError("--num-ps 0 is one process training alone: it needs --workers 1");
  if (c.draws < 1) throw UsageError("--draws must be 1 or more");
  if (c.batch_size < 1) throw UsageError("--batch-size must be 1 or more");
  if (!(c.failure_timeout > 0)) throw UsageError("--failure-timeout must be above 0 seconds");
  if (c.ckpt_every_steps < 0) throw UsageError("--ckpt-every-steps must be 0 (none) or more");
  if (!(c.restart_seconds >= 0) || !std::isfinite(c.restart_seconds))
    throw UsageError("--restart-seconds must be 0 or more");
  Cluster k;
  if (c.epochs > 0) {
    if (c.train_images < 1) throw UsageError("--train-images must be 1 or more");
    k.steps = static_cast<std::int64_t>(std::ceil(c.epochs * double(c.train_images) / double(c.batch_size)));
  } else {
    k.steps = c.steps;
  }
  if (k.steps < 1) throw UsageError("--steps (or --epochs) must give 1 global step or more");
  k.workers_transient = transient_pricing(c.pricing, "--pricing");
  k.ps_transient = transient_pricing(c.ps_pricing, "--ps-pricing");
  k.prices = PriceTable::load(c.prices);
  k.prices.at(c.ps_type);
  const DeviceTable table = c.devices.empty() ? DeviceTable::shipped() : DeviceTable::from_file(c.devices);
  k.device_source = table.source();
  k.types = split_list(c.worker_types);
  if (k.types.empty()) throw UsageError("--worker-types: give one instance type for all workers, or one per worker");
  if (k.types.size() == 1) k.types.assign(static_cast<std::size_t>(c.workers), k.types[0]);
  if (static_cast<int>(k.types.size()) != c.workers)
    throw UsageError("--worker-types lists " + std::to_string(k.types.size()) + " types for " +
                     std::to_string(c.workers) + " workers; give one for all or one per worker");
  for (const auto& t : k.types) {
    k.prices.at(t);
    const DeviceSpeed& d = table.at(t);
    k.speeds.push_back(Emulation{t, d.step_seconds, d.jitter_cv, table.source()});
  }
  k.joins = parse_virtual_joins(c.joins);
  if (!k.joins.empty() && c.num_ps == 0) throw UsageError("--joins: --num-ps 0 is one process alone");
  for (const auto& j : k.joins) {
    k.prices.at(j.type);
    const DeviceSpeed& d = table.at(j.type);
    k.types.push_back(j.type);
    k.speeds.push_back(Emulation{j.type, d.step_seconds, d.jitter_cv, table.source()});
  }
  k.links = parse_links(c.worker_links, c.workers);
  k.links.resize(k.types.size(), k.links.back());
  k.params = Model(parse_model(c.model)).param_count();
  if (c.num_ps == 0) {
    // One process alone (the single-server baseline): no messages, no parameter server.
    if (!c.worker_links.empty()) throw UsageError("--worker-links: --num-ps 0 sends no messages");
    k.links.assign(1, Link{0, kNeverSeconds});
  } else {
    k.message_bytes = double(k.params) * sizeof(float);
    const double update = c.ps_update_seconds >= 0 ? c.ps_update_seconds : default_ps_update_seconds(k.params);
    k.update_seconds = update / c.num_ps;  // each shard updates its part of every push
  }
  if (c.revocation_model != "none") {
    k.lifetimes = revocation_models(c.revocation_model, k.types);
    k.ps_lifetime = RevocationModel::load(c.revocation_model, c.ps_type);
  }
  return k;
}

struct Draw {
  double seconds = 0, cost = 0, revocations = 0, restarts = 0, lost_steps = 0, ps_busy = 0, takeovers = 0;
  bool finished = true;
  // The first attempt's: each initial worker's end (its revocation, or the attempt's end) and the
  // attempt's length, for the revocation timelines (the paper's Figs. 1 and 4).
  std::vector<double> worker_ends;
  double first_attempt_seconds = 0;
};

// Attempt `attempt`'s seed of a draw: every attempt a fresh cluster, new servers, new lifetimes.
std::uint64_t attempt_seed(std::uint64_t seed, int attempt) {
  return seed * 1000003ULL + static_cast<std::uint64_t>(attempt);
}

// When the first parameter-server shard is revoked (transient shards only): the job stops then.
double first_ps_loss(const Cluster& k, const PlanConfig& c, std::uint64_t attempt_seed) {
  double end = kNeverSeconds;
  if (k.ps_transient && k.ps_lifetime)
    for (int shard = 0; shard < c.num_ps; ++shard) {
      const double life = sampled_lifetime_seconds(*k.ps_lifetime, attempt_seed, -1 - shard, 1.0);
      if (life >= 0) end = std::min(end, life);
    }
  return end;
}

int standbys(const PlanConfig& c) {
  if (c.num_ps == 0) return 0;
  return c.ps_standby >= 0 ? std::min(c.ps_standby, c.workers) : (c.workers >= 2 ? 1 : 0);
}

// One training job from step 0 to the end, through any restarts. `revocations`: draw lifetimes.
// `calm`: the job without revocations; a draw whose every server outlives it is that job (bar
// the jitter of its step times, which averages out over a run), without simulating it again.
Draw simulate(const Cluster& k, const PlanConfig& c, std::uint64_t seed, bool revocations, const Draw* calm) {
  if (calm && revocations && k.joins.empty()) {
    const std::uint64_t s = attempt_seed(seed, 0);
    bool outlived = first_ps_loss(k, c, s) > calm->seconds;
    for (int i = 0; i < c.workers && outlived && k.workers_transient; ++i) {
      const double life = worker_lifetime_seconds(k.lifetimes, k.types[static_cast<std::size_t>(i)], s, i + 1);
      outlived = life < 0 || life > calm->seconds;
    }
    if (outlived) {
      Draw d = *calm;
      d.worker_ends.assign(static_cast<std::size_t>(c.workers), calm->seconds);
      d.first_attempt_seconds = calm->seconds;
      return d;
    }
  }
  Draw d;
  std::int64_t durable = 0;  // global steps checkpointed before this attempt
  const int n = c.workers;
  for (int attempt = 0;; ++attempt) {
    if (attempt > kMaxRestarts) {
      d.finished = false;
      return d;
    }
    const std::uint64_t s = attempt_seed(seed, attempt);
    // The initial workers, those that joined at a step this attempt resumes past, then the joins to
    // come (their steps counted from the resumed one).
    const auto joined_before = [&](const VirtualJoin& j) { return j.step > 0 && j.step <= durable; };
    std::vector<std::size_t> order;
    std::vector<VirtualJoin> later;
    for (int i = 0; i < n; ++i) order.push_back(static_cast<std::size_t>(i));
    for (std::size_t j = 0; j < k.joins.size(); ++j)
      if (joined_before(k.joins[j])) order.push_back(static_cast<std::size_t>(n) + j);
    const int initial = static_cast<int>(order.size());
    for (std::size_t j = 0; j < k.joins.size(); ++j)
      if (!joined_before(k.joins[j])) {
        order.push_back(static_cast<std::size_t>(n) + j);
        VirtualJoin v = k.joins[j];
        if (v.step > 0) v.step -= durable;
        later.push_back(v);
      }
    std::vector<SimWorker> ws(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      SimWorker& w = ws[i];
      w.rank = static_cast<int>(i) + 1;
      w.type = k.types[order[i]];
      w.link = k.links[order[i]];
      w.pacer.emplace(k.speeds[order[i]], pacer_seed(s, w.rank));
    }
    SimOptions so;
    so.update_seconds = k.update_seconds;
    so.message_bytes = k.message_bytes;
    so.failure_timeout = c.num_ps == 0 ? 0 : c.failure_timeout;  // alone: its loss is the job's end
    so.seed = s;
    if (revocations && k.workers_transient) so.lifetimes = k.lifetimes;
    ClusterSim sim(std::move(so), std::move(ws), initial, std::move(later));
    const double ps_end = revocations ? first_ps_loss(k, c, s) : kNeverSeconds;
    enum class End { kDone, kPsLost, kNoWorkers } end = End::kDone;
    const std::int64_t need = k.steps - durable;
    while (sim.step() < need) {
      if (sim.next_time() > ps_end) {
        end = End::kPsLost;
        break;
      }
      const ClusterSim::Event ev = sim.advance();
      if (ev.kind == ClusterSim::Kind::kNone) {
        end = End::kNoWorkers;
        break;
      }
      if (ev.kind == ClusterSim::Kind::kArrive) sim.pushed(ev.who);
    }
    const double t = end == End::kPsLost ? ps_end : sim.now();
    for (std::size_t i = 0; i < sim.workers().size(); ++i) {
      const SimWorker& w = sim.worker(i);
      if (!w.begun) continue;  // never joined
      const double until = w.ended >= 0 ? std::min(w.ended, t) : t;
      d.cost += k.prices.cost_usd(w.type, k.workers_transient, std::max(0.0, until - w.started));
    }
    d.cost += c.num_ps * k.prices.cost_usd(c.ps_type, k.ps_transient, t);
    d.ps_busy += sim.ps_busy_seconds();
    d.revocations += double(sim.revocations()) + (end == End::kPsLost ? 1 : 0);
    if (attempt == 0) {
      d.first_attempt_seconds = t;
      for (int i = 0; i < n; ++i) {
        const SimWorker& w = sim.worker(static_cast<std::size_t>(i));
        d.worker_ends.push_back(w.ended >= 0 ? std::min(w.ended, t) : t);
      }
    }
    d.seconds += t;
    if (end == End::kDone) return d;
    // A restart: every worker gone, the parameter server checkpoints the current state first; the
    // parameter server lost (or the one process alone), what survives is its newest periodic checkpoint.
    const std::int64_t reached = durable + sim.step();
    std::int64_t kept = reached;
    if (end == End::kPsLost || c.num_ps == 0)
      kept = c.ckpt_every_steps > 0 ? std::max(durable, reached / c.ckpt_every_steps * c.ckpt_every_steps) : durable;
    bool standby_up = false;
    if (end == End::kPsLost && c.num_ps > 0 && standbys(c) > 0) {
      // The standby writes its replica when the parameter server is lost, if a worker is still up.
      for (std::size_t i = 0; i < sim.workers().size() && !standby_up; ++i) {
        const SimWorker& w = sim.worker(i);
        standby_up = w.begun && (w.ended < 0 || w.ended >= t);
      }
      if (standby_up) kept = std::max(kept, reached - std::min(reached - durable, c.replica_interval));
    }
    d.lost_steps += double(reached - kept);
    durable = kept;
    if (standby_up && c.takeover && c.num_ps == 1) {  // taken over in the job (ULFM): no restart
      d.takeovers += 1;
      d.seconds += c.takeover_seconds;
      continue;
    }
    d.restarts += 1;
    d.seconds += c.restart_seconds;
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double x = p * double(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(x));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (x - double(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

double fraction_positive(const std::vector<double>& v) {
  double n = 0;
  for (double x : v) n += x > 0 ? 1 : 0;
  return v.empty() ? 0 : n / double(v.size());
}

// The steps lost by each draw that needed a restart.
std::vector<double> lost_steps_of_restarted(const PlanResult& r) {
  std::vector<double> out;
  for (std::size_t i = 0; i < r.restarts.size(); ++i)
    if (r.restarts[i] > 0) out.push_back(r.lost_steps[i]);
  return out;
}

std::string hours(double seconds) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << seconds / 3600.0 << " h";
  return s.str();
}

std::string dollars(double usd) {
  std::ostringstream s;
  s << '$' << std::fixed << std::setprecision(2) << usd;
  return s.str();
}

std::string cluster_line(const PlanConfig& c, const Cluster& k) {
  std::ostringstream s;
  std::string types = k.types[0];
  if (std::any_of(k.types.begin(), k.types.end(), [&](const std::string& t) { return t != k.types[0]; })) {
    types.clear();
    for (const auto& t : k.types) types += (types.empty() ? "" : ",") + t;
  }
  if (c.num_ps == 0)
    s << "one " << types << " process alone (" << c.pricing << "); " << c.model << " (";
  else
    s << c.workers << " x " << types << " worker(s) (" << c.pricing << ") + " << c.num_ps << " parameter server"
      << (c.num_ps > 1 ? "s" : "") << " (" << c.ps_type << ", " << c.ps_pricing << "); " << c.model << " (";
  s
<< k.params << " parameters), " << k.steps << " global steps of " << c.batch_size;
  return s.str();
}

}  // namespace

PlanResult run_plan(const PlanConfig& c) {
  const Cluster k = prepare(c);
  PlanResult r;
  r.cluster = cluster_line(c, k);
  r.params = k.params;
  r.steps = k.steps;
  r.worker_types = k.types;
  r.prices = k.prices.source();
  r.devices = k.device_source;
  for (const auto& [type, model] : k.lifetimes) r.revocation_models[type] = model.source();
  if (k.ps_lifetime) r.revocation_models[c.ps_type] = k.ps_lifetime->source();
  const Draw ideal = simulate(k, c, c.seed, false, nullptr);
  r.ideal_seconds = ideal.seconds;
  r.ps_utilisation = ideal.seconds > 0 ? ideal.ps_busy / ideal.seconds : 0;
  // One shard is always busy when the workers' pushes per second reach 1 / (its time per update).
  double pushes_per_second = 0;
  for (std::size_t i = 0; i < k.types.size(); ++i)
    pushes_per_second += 1.0 / (k.speeds[i].step_seconds + 2 * k.links[i].seconds(k.message_bytes));
  r.ps_saturation_workers =
      k.update_seconds > 0 && c.num_ps > 0 ? double(k.types.size()) / (pushes_per_second * k.update_seconds) : kNeverSeconds;
  for (int i = 0; i < c.draws; ++i) {
    const Draw d = simulate(k, c, c.seed * 7919ULL + static_cast<std::uint64_t>(i) + 1, true, &ideal);
    if (!d.finished) {
      ++r.unfinished;
      continue;
    }
    r.seconds.push_back(d.seconds);
    r.cost_usd.push_back(d.cost);
    r.revocations.push_back(d.revocations);
    r.restarts.push_back(d.restarts);
    r.lost_steps.push_back(d.lost_steps);
    r.takeovers.push_back(d.takeovers);
    r.worker_ends.push_back(d.worker_ends);
    r.first_attempt_seconds.push_back(d.first_attempt_seconds);
  }
  return r;
}

nlohmann::ordered_json plan_json(const PlanConfig& c, const PlanResult& r) {
  const auto stats = [](const std::vector<double>& v) {
    return nlohmann::ordered_json{{"median", percentile(v, 0.5)}, {"p10", percentile(v, 0.1)},
                                  {"p90", percentile(v, 0.9)},    {"mean", mean(v)}};
  };
  nlohmann::ordered_json out{
      {"event", "plan"},
      {"evidence", "S"},
      {"model", c.model},
      {"parameters", r.params},
      {"global_steps", r.steps},
      {"batch_size", c.batch_size},
      {"workers", c.workers},
      {"worker_types", r.worker_types},
      {"pricing", c.pricing},
      {"num_ps", c.num_ps},
      {"ps_type", c.ps_type},
      {"ps_pricing", c.ps_pricing},
      {"prices", r.prices},
      {"devices", r.devices},
      {"revocation_model", c.revocation_model},
      {"revocation_models", r.revocation_models},
      {"ckpt_every_steps", c.ckpt_every_steps},
      {"ps_standby", standbys(c)},
      {"replica_interval", c.replica_interval},
      {"restart_seconds", c.restart_seconds},
      {"takeover", c.takeover},
      {"takeover_seconds", c.takeover_seconds},
      {"draws", c.draws},
      {"seed", c.seed},
      {"seconds", stats(r.seconds)},
      {"cost_usd", stats(r.cost_usd)},
      {"seconds_without_revocations", r.ideal_seconds},
      {"revocations_mean", mean(r.revocations)},
      {"probability_revoked", fraction_positive(r.revocations)},
      {"probability_restart", fraction_positive(r.restarts)},
      {"restarts_mean", mean(r.restarts)},
      {"lost_steps_mean_when_restarted", mean(lost_steps_of_restarted(r))},
      {"takeovers_mean", mean(r.takeovers)},
      {"probability_takeover", fraction_positive(r.takeovers)},
      {"ps_utilisation", r.ps_utilisation},
      {"ps_saturation_workers", r.ps_saturation_workers},
      {"unfinished_draws", r.unfinished},
      {"joins", c.joins}};
  if (c.per_draw)
    out["per_draw"] = {{"seconds", r.seconds}, {"cost_usd", r.cost_usd}, {"revocations", r.revocations},
                       {"restarts", r.restarts}, {"lost_steps", r.lost_steps}, {"takeovers", r.takeovers},
                       {"first_attempt_seconds", r.first_attempt_seconds}, {"worker_ends", r.worker_ends}};
  return out;
}

void print_plan(const PlanConfig& c, const PlanResult& r, std::ostream& out) {
  const auto row = [&](const char* name, const std::vector<double>& v, std::string (*fmt)(double)) {
    out << "  " << std::left << std::setw(10) << name << std::right << std::setw(10) << fmt(percentile(v, 0.5))
        << std::setw(10) << fmt(percentile(v, 0.1)) << std::setw(10) << fmt(percentile(v, 0.9)) << std::setw(10)
        << fmt(mean(v)) << '\n';
  };
  out << "plan: " << r.cluster << '\n'
      << "  step times: " << r.devices << " device table; prices: " << r.prices
      << "; revocations: " << c.revocation_model << "; checkpoint every " << c.ckpt_every_steps << " steps"
      << (standbys(c) > 0 ? ", standby replica every " + std::to_string(c.replica_interval) + " updates" : "")
      << ", restart " << c.restart_seconds << " s"
      << (c.takeover ? ", takeover in the job (ULFM) " + std::to_string(c.takeover_seconds).substr(0, 4) + " s" : std::string()) << "; "
      << c.draws << " draws (seed "
      << c.seed << "); evidence S (simulator)\n";
  if (r.seconds.empty()) {
    out << "  no draw finished within " << kMaxRestarts << " restarts: the servers are revoked faster than it trains\n";
    return;
  }
  out << "              median       p10       p90      mean\n";
  row("time", r.seconds, hours);
  row("cost", r.cost_usd, dollars);
  const std::vector<double> lost_when = lost_steps_of_restarted(r);
  out << std::fixed << std::setprecision(2) << "  without revocations: " << hours(r.ideal_seconds) << '\n'
      << "  revocations: " << mean(r.revocations) << " per run on average; at least one in "
      << std::setprecision(1) << 100 * fraction_positive(r.revocations) << "% of runs\n"
      << "  restarts: needed in " << 100 * fraction_positive(r.restarts) << "% of runs";
  if (!lost_when.empty())
    out << " (then " << std::setprecision(0) << mean(lost_when) << " steps lost on average, and "
        << c.restart_seconds << " s per restart)";
  out << '\n';
  if (c.takeover)
    out << std::setprecision(1) << "  takeovers (the parameter server lost, its standby up): in "
        << 100 * fraction_positive(r.takeovers) << "% of runs, " << std::setprecision(2) << mean(r.takeovers)
        << " per run on average, each at most " << c.replica_interval << " updates lost\n";
  if (c.num_ps > 0)
    out << std::setprecision(1) << "  parameter server: busy " << 100 * r.ps_utilisation
      << "% of the time without revocations; one shard saturates at about " << std::setprecision(0)
      << r.ps_saturation_workers << " workers like these" << '\n';
  if (r.unfinished > 0)
    out << "  " << r.unfinished << " of " << c.draws << " draws did not finish within " << kMaxRestarts
        << " restarts (left out above)\n";
  out << kAccuracyNote;
}

std::vector<PlanShape> search_plans(const PlanConfig& c) {
  if (c.max_workers < 1) throw UsageError("--max-workers must be 1 or more");
  const PriceTable prices = PriceTable::load(c.prices);
  const DeviceTable table = c.devices.empty() ? DeviceTable::shipped() : DeviceTable::from_file(c.devices);
  std::vector<std::string> types;  // every worker type with both a step time and a price
  for (const auto& t : table.names())
    if (t != c.ps_type && std::find(prices.types().begin(), prices.types().end(), t) != prices.types().end())
      types.push_back(t);
  if (types.empty()) throw UsageError("plan: no instance type has both a step time and a price to search");
  std::vector<int> counts;
  for (int n : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64})
    if (n <= c.max_workers) counts.push_back(n);
  if (counts.back() != c.max_workers && c.max_workers > 1) counts.push_back(c.max_workers);
  std::vector<PlanShape> out;
  for (const auto& type : types)
    for (const char* pricing : {"transient", "on-demand"})
      for (int n : counts)
        for (int ps : n == 1 ? std::vector<int>{0, 1} : std::vector<int>{1, 2}) {  // one worker: also alone
          PlanShape shape;
          shape.cfg = c;
          shape.cfg.workers = n;
          shape.cfg.worker_types = type;
          shape.cfg.pricing = pricing;
          shape.cfg.num_ps = ps;
          shape.cfg.worker_links.clear();
          shape.result = run_plan(shape.cfg);
          const auto& r = shape.result;
          shape.meets = !r.seconds.empty() && r.unfinished == 0 &&
                        (c.deadline_seconds < 0 || percentile(r.seconds, 0.9) <= c.deadline_seconds) &&
                        (c.budget_usd < 0 || percentile(r.cost_usd, 0.9) <= c.budget_usd);
          out.push_back(std::move(shape));
        }
  std::stable_sort(out.begin(), out.end(), [](const PlanShape& a, const PlanShape& b) {
    if (a.meets != b.meets) return a.meets;
    const double ca = a.result.cost_usd.empty() ? kNeverSeconds : percentile(a.result.cost_usd, 0.5);
    const double cb = b.result.cost_usd.empty() ? kNeverSeconds : percentile(b.result.cost_usd, 0.5);
    return ca < cb;
  });
  return out;
}

namespace {

std::string shape_name(const PlanConfig& c) {
  if (c.num_ps == 0) return "1 " + c.worker_types + " alone (" + c.pricing + ")";
  return std::to_string(c.workers) + " x " + c.worker_types + " (" + c.pricing + ") + " + std::to_string(c.num_ps) +
         " PS";
}

int search_command(const PlanConfig& c, std::ostream& out) {
  const std::vector<PlanShape> shapes = search_plans(c);
  const auto meeting = std::count_if(shapes.begin(), shapes.end(), [](const PlanShape& s) { return s.meets; });
  if (c.json) {
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& s : shapes) {
      nlohmann::ordered_json j = plan_json(s.cfg, s.result);
      j["meets"] = s.meets;
      all.push_back(std::move(j));
    }
    out << nlohmann::ordered_json{{"event", "plan_search"},
                                  {"deadline_seconds", c.deadline_seconds < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.deadline_seconds)},
                                  {"budget_usd", c.budget_usd < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.budget_usd)},
                                  {"meeting", meeting},
                                  {"shapes", all}}
               .dump()
        << '\n';
    return 0;
  }
  out << "plan search: " << c.model << ", " << shapes.front().result.steps << " global steps of " << c.batch_size << "; deadline "
      << (c.deadline_seconds < 0 ? std::string("none") : hours(c.deadline_seconds)) << ", budget "
      << (c.budget_usd < 0 ? std::string("none") : dollars(c.budget_usd))
      << " (both at the 90th percentile); parameter servers " << c.ps_type << " (" << c.ps_pricing << "); " << c.draws
      << " draws per shape; evidence S\n"
      << "  " << shapes.size() << " shapes tried, " << meeting << " meet both"
      << (meeting ? "; the cheapest:" : ": none does; the closest, cheapest first:") << '\n';
  out << "  " << std::left << std::setw(34) << "cluster" << std::right << std::setw(9) << "time" << std::setw(9)
      << "p90" << std::setw(9) << "cost" << std::setw(9) << "p90" << std::setw(11) << "restarts" << '\n';
  int shown = 0;
  for (const auto& s : shapes) {
    if (shown == 10 || (meeting && !s.meets)) break;
    const auto& r = s.result;
    if (r.seconds.empty()) continue;
    std::ostringstream restarts;
    restarts << std::fixed << std::setprecision(1) << 100 * fraction_positive(r.restarts) << '%';
    out << "  " << std::left << std::setw(34) << shape_name(s.cfg) << std::right << std::setw(9)
        << hours(percentile(r.seconds, 0.5)) << std::setw(9) << hours(percentile(r.seconds, 0.9)) << std::setw(9)
        << dollars(percentile(r.cost_usd, 0.5)) << std::setw(9) << dollars(percentile(r.cost_usd, 0.9))
        << std::setw(11) << restarts.str() << '\n';
    ++shown;
  }
  out << kAccuracyNote;
  return meeting ? 0 : 1;
}

}  // namespace

int plan_command(const PlanConfig& c, std::ostream& out) {
  if (c.deadline_seconds >= 0 || c.budget_usd >= 0) return search_command(c, out);
  const PlanResult r = run_plan(c);
  if (c.json)
    out << plan_json(c, r).dump() << '\n';
  else
    print_plan(c, r, out);
  return 0;
}

}  // namespace mt
