#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "app/emulation.hpp"
#include "app/metrics.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "plan/accuracy_table.hpp"
#include "plan/cluster_sim.hpp"
#include "plan/cost.hpp"
#include "plan/plan_format.hpp"
#include "ps/ps.hpp"
#include "ps/resilience/replica_pacing.hpp"

namespace mt {

using namespace plan_format;

namespace {

// A job that needs more restarts than this does not finish (the draw says so).
constexpr int kMaxRestarts = 100;
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
  std::optional<Link> ps_link;                       // each shard's (none: not modelled)
  std::vector<double> shard_bytes;                   // each shard's part of a message
  std::vector<double> replica_bytes;                 // each shard's replica for its standbys
  std::int64_t replica_age = 0;                      // replica_age(): what a restart from it loses at most
  std::map<std::string, RevocationModel> lifetimes;  // the workers' types (revocation_models)
  std::optional<RevocationModel> ps_lifetime;
  PriceTable prices;
  bool workers_transient = true, ps_transient = false;
  std::string device_source;
};

// The standbys train would pick (a planned run keeps checkpoints).
int standbys(const PlanConfig& c) { return c.num_ps == 0 ? 0 : resolve_standbys(c.ps_standby, c.workers, true); }

// The most updates the standby's newest whole replica can be behind (replica_age_at_most: shard
// 0's, the largest part; its slices follow the first for most of an interval).
std::int64_t replica_age(const PlanConfig& c, const Cluster& k) {
  const ReplicaFloats f = replica_floats(k.replica_bytes, k.shard_bytes, standbys(c), 0);
  return replica_age_at_most(f.replica, c.replica_interval, f.reply);
}

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
  if (!(c.notice_seconds >= 0) || !std::isfinite(c.notice_seconds))
    throw UsageError("--notice-seconds must be 0 or more");
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
  if (c.num_ps > 0) k.prices.per_hour(c.ps_type, k.ps_transient);
  const DeviceTable table = c.devices.empty() ? DeviceTable::shipped() : DeviceTable::from_file(c.devices);
  k.device_source = table.source();
  k.types = split_list(c.worker_types);
  if (k.types.empty()) throw UsageError("--worker-types: give one instance type for all workers, or one per worker");
  if (k.types.size() == 1) k.types.assign(static_cast<std::size_t>(c.workers), k.types[0]);
  if (static_cast<int>(k.types.size()) != c.workers)
    throw UsageError("--worker-types lists " + std::to_string(k.types.size()) + " types for " +
                     std::to_string(c.workers) + " workers; give one for all or one per worker");
  for (const auto& t : k.types) {
    k.prices.per_hour(t, k.workers_transient);
    const DeviceSpeed& d = table.at(t);
    k.speeds.push_back(Emulation{t, d.step_seconds, d.jitter_cv, table.source()});
  }
  k.joins = parse_virtual_joins(c.joins);
  if (!k.joins.empty() && c.num_ps == 0) throw UsageError("--joins: --num-ps 0 is one process alone");
  for (const auto& j : k.joins) {
    k.prices.per_hour(j.type, k.workers_transient);
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
    const PushPrecision precision = parse_push_precision(c.push_precision);
    const double value_bytes = wire_bytes_per_value(precision);
    k.message_bytes = double(k.params) * value_bytes;
    const double update =
        c.ps_update_seconds >= 0 ? c.ps_update_seconds : default_ps_update_seconds(k.params, precision);
    k.update_seconds = update / c.num_ps;  // each shard updates its part of every push
    k.ps_link = parse_ps_link(c.ps_link);
    k.shard_bytes = shard_message_bytes(c.model, c.num_ps, value_bytes);
    // train's defaults: dana's momentum per data slot (one per worker, joiners too), gap-aware.
    const int data_slots = c.workers + static_cast<int>(k.joins.size());
    k.replica_bytes =
        shard_replica_bytes(c.model, c.num_ps, replica_state_buffers(true, true, data_slots), standbys(c));
  }
  k.replica_age = replica_age(c, k);
  if (c.revocation_model != "none") {
    k.lifetimes = revocation_models(c.revocation_model, k.types);
    k.ps_lifetime = RevocationModel::load(c.revocation_model, c.ps_type);
  }
  return k;
}

struct Draw {
  double seconds = 0, cost = 0, revocations = 0, restarts = 0, lost_steps = 0, ps_busy = 0, takeovers = 0;
  double ps_link_busy = 0;
  // The first attempt's updates between two standby replicas, on average (0: fewer than two).
  double replica_interval = 0;
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
    for (int i = 0; i < n; ++i)
      order.push_back(static_cast<std::size_t>(i));
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
      // Warned a step ahead: it pushes the step it computes and leaves (ps/exchange/worker_agent).
      if (c.num_ps > 0 && c.notice_seconds >= k.speeds[order[i]].step_seconds) w.kill_signal = SIGTERM;
    }
    SimOptions so;
    so.update_seconds = k.update_seconds;
    so.message_bytes = k.message_bytes;
    so.ps_link = k.ps_link;
    so.shard_bytes = k.shard_bytes;
    so.replica_bytes = k.replica_bytes;
    so.replica_interval = c.replica_interval;
    so.standbys = standbys(c);
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
    if (c.num_ps > 0) d.cost += c.num_ps * k.prices.cost_usd(c.ps_type, k.ps_transient, t);
    d.ps_busy += sim.ps_busy_seconds();
    d.ps_link_busy += sim.ps_link_busy_seconds();
    d.revocations += double(sim.revocations()) + (end == End::kPsLost ? 1 : 0);
    if (attempt == 0) {
      d.first_attempt_seconds = t;
      d.replica_interval = sim.replica_interval();
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
    // Lost without a warning long enough to checkpoint first: back to the newest periodic one.
    if ((end == End::kPsLost || c.num_ps == 0) && c.notice_seconds < kNoticeCheckpointSeconds)
      kept = c.ckpt_every_steps > 0 ? std::max(durable, reached / c.ckpt_every_steps * c.ckpt_every_steps) : durable;
    bool standby_up = false;
    if (end == End::kPsLost && c.num_ps > 0 && standbys(c) > 0) {
      // The standby writes its replica when the parameter server is lost, if a worker is still up.
      for (std::size_t i = 0; i < sim.workers().size() && !standby_up; ++i) {
        const SimWorker& w = sim.worker(i);
        standby_up = w.begun && (w.ended < 0 || w.ended >= t);
      }
      if (standby_up) kept = std::max(kept, reached - std::min(reached - durable, k.replica_age));
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

// The steps lost by each draw that needed a restart.
std::vector<double> lost_steps_of_restarted(const PlanResult& r) {
  std::vector<double> out;
  for (std::size_t i = 0; i < r.restarts.size(); ++i)
    if (r.restarts[i] > 0) out.push_back(r.lost_steps[i]);
  return out;
}

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The measured cost of asynchrony for this shape (plan/accuracy_table), or null.
nlohmann::ordered_json accuracy_json(const PlanConfig& c, const PlanResult& r) {
  if (!c.joins.empty() || c.num_ps == 0) return nullptr;
  const auto m = accuracy_for(c.model, plan_epochs(r.steps, c.batch_size, c.train_images), c.workers);
  if (!m) return nullptr;
  return {{"delta_points", m->delta_points},
          {"sd_points", m->sd_points},
          {"seeds", m->seeds},
          {"one_worker_percent", m->one_worker_percent},
          {"data", m->data},
          {"evidence", "E"},
          {"source", "bench/README.md, Speed-up (plan/accuracy_measured.csv)"}};
}

nlohmann::ordered_json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

// A link's rate as people write it: "8 Gbit/s", "2.5 Gbit/s", "50 Mbit/s" (below 1 Gbit/s).
std::string link_rate(double gbit) {
  std::ostringstream s;
  // Six digits: no exponent up to 999,999 Gbit/s, and 0.05 * 1000's rounding error not shown.
  s << std::setprecision(6) << (gbit < 1 ? gbit * 1000 : gbit) << (gbit < 1 ? " Mbit/s" : " Gbit/s");
  return s.str();
}

// "  parameter server: busy 12.3% of the time (its link 4.5%) without revocations; ..."
std::string saturation_line(const PlanConfig& c, const PlanResult& r) {
  const auto count = [](double n) {
    std::ostringstream s;
    if (std::isfinite(n))
      s << "about " << std::fixed << std::setprecision(n < 10 ? 1 : 0) << n;
    else
      s << "no number of";
    return s.str();
  };
  const std::string shards = c.num_ps > 1 ? std::to_string(c.num_ps) + " shards" : "one shard";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << "  parameter server: busy " << 100 * r.ps_utilisation << "% of the time";
  if (r.ps_link_gbit > 0)
    s << ", its link (" << link_rate(r.ps_link_gbit) << " each way per shard"
      << (c.push_precision == "bf16" ? ", bf16 pushes" : "") << ") " << std::setprecision(1)
      << 100 * r.ps_link_utilisation << "%";
  // What the standby's replicas take of it, where it is much (--replica-interval trades it; a
  // replica larger than the interval's replies is spread further: replica_slices_per_update).
  if (r.ps_link_replica_share >= 0.05)
    s << " (" << std::setprecision(0) << 100 * r.ps_link_replica_share
      << "% of its bytes the standby replicas', one every " << r.replica_interval << " updates)";
  s << ", without revocations\n  " << shards << " saturate" << (c.num_ps > 1 ? "" : "s") << " at "
    << count(r.ps_saturation_workers) << " workers like these";
  if (std::isfinite(r.ps_saturation_workers)) {
    if (r.ps_limit == "link")
      s << ": the link first (the updates at " << count(r.ps_compute_saturation_workers) << ")";
    else
      s << ": updates first"
        << (r.ps_link_gbit > 0 ? " (the link at " + count(r.ps_link_saturation_workers) + ")" : std::string());
  }
  s << '\n';
  // On a full link the replicas' share is TCP's to give, not the trainer's: the standby's one
  // connection gets less beside the workers' replies, measured, and this model does not know how
  // much (ClusterSim::pace_replica; bench/README.md, "Why the replicas space out at 5 workers").
  if (r.ps_link_replica_share >= 0.05 && r.ps_link_utilisation >= 0.95)
    s << "  the link is full: TCP can give the standby's one connection less than that share beside the\n"
         "  workers' replies, and then the replicas space out (the standby's replica ages) while steps/s\n"
         "  exceed this estimate (measured on Linux links of 25-200 Mbit/s, one shard, 5 workers: a replica\n"
         "  every 12-16 updates where plan says 10, up to 20% more steps/s; bench/README.md, \"plan\n"
         "  against a real link\")\n";
  // Near the limit, more workers add little: say what moves it.
  if (double(r.worker_types.size()) >= 0.75 * r.ps_saturation_workers)
    s << "  near or past that limit more workers add little: "
      << (r.ps_limit == "link"
              ? std::string("more shards split each message (--num-ps), or a faster link (--ps-link)") +
                    (c.push_precision == "bf16" ? "" : ", or half the bytes (--push-precision bf16)")
              : std::string("more shards split each update (--num-ps)") +
                    (c.push_precision == "bf16" ? ", or fp32 pushes (bf16 adds coding to each update)" : ""))
      << '\n';
  return s.str();
}

std::string cluster_line(const PlanConfig& c, const Cluster& k) {
  std::ostringstream s;
  std::string types = k.types[0];
  if (std::any_of(k.types.begin(), k.types.end(), [&](const std::string& t) { return t != k.types[0]; })) {
    types.clear();
    for (const auto& t : k.types)
      types += (types.empty() ? "" : ",") + t;
  }
  if (c.num_ps == 0)
    s << "one " << types << " process alone (" << c.pricing << "); " << c.model << " (";
  else
    s << c.workers << " x " << types << " worker(s) (" << c.pricing << ") + " << c.num_ps << " parameter server"
      << (c.num_ps > 1 ? "s" : "") << " (" << c.ps_type << ", " << c.ps_pricing << "); " << c.model << " (";
  s << k.params << " parameters), " << k.steps << " global steps of " << c.batch_size;
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
  for (const auto& [type, model] : k.lifetimes)
    r.revocation_models[type] = model.source();
  if (k.ps_lifetime) r.revocation_models[c.ps_type] = k.ps_lifetime->source();
  const Draw ideal = simulate(k, c, c.seed, false, nullptr);
  r.ideal_seconds = ideal.seconds;
  r.ps_utilisation = ideal.seconds > 0 ? ideal.ps_busy / ideal.seconds : 0;
  r.ps_link_utilisation = ideal.seconds > 0 ? ideal.ps_link_busy / ideal.seconds : 0;
  r.ps_link_gbit = k.ps_link ? k.ps_link->gbit_per_s : 0;
  r.replica_interval = ideal.replica_interval;
  r.replica_age = k.replica_age;
  // The parameter servers are always busy when the workers' pushes per second reach 1 / (a
  // shard's time per update), or 1 / (the busiest shard link's time per update in its busier
  // direction: outbound, the reply and a standby replica's share, as the run without revocations
  // had them); with each worker's exchange unhindered: its
  // step, and each way its message through its own link and the shard's link at once (the slower).
  double shard_message = 0;  // the busiest shard link's seconds per message
  for (const double bytes : k.shard_bytes)
    if (k.ps_link) shard_message = std::max(shard_message, k.ps_link->wire_seconds(bytes));
  const double shard_update = k.ps_link && k.steps > 0 ? ideal.ps_link_busy / double(k.steps) : 0;
  if (k.ps_link) r.ps_link_update_bytes = shard_update / k.ps_link->wire_seconds(1);
  if (r.replica_interval > 0 && r.ps_link_update_bytes > 0) {
    double replica = 0;  // the largest shard's replica bytes per update
    for (const double bytes : k.replica_bytes)
      replica = std::max(replica, bytes / r.replica_interval);
    r.ps_link_replica_share = std::min(1.0, replica / r.ps_link_update_bytes);
  }
  double pushes_per_second = 0;
  for (std::size_t i = 0; i < k.types.size(); ++i) {
    double one_way = k.links[i].seconds(k.message_bytes);
    if (k.ps_link) one_way = std::max(one_way, shard_message + k.ps_link->latency_seconds);
    pushes_per_second += 1.0 / (k.speeds[i].step_seconds + 2 * one_way);
  }
  const double workers = double(k.types.size());
  r.ps_compute_saturation_workers =
      k.update_seconds > 0 && c.num_ps > 0 ? workers / (pushes_per_second * k.update_seconds) : kNeverSeconds;
  r.ps_link_saturation_workers = kNeverSeconds;
  if (k.ps_link) r.ps_link_saturation_workers = workers / (pushes_per_second * shard_update);
  r.ps_saturation_workers = std::min(r.ps_compute_saturation_workers, r.ps_link_saturation_workers);
  r.ps_limit = r.ps_link_saturation_workers < r.ps_compute_saturation_workers ? "link" : "compute";
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
    return nlohmann::ordered_json{
        {"median", percentile(v, 0.5)}, {"p10", percentile(v, 0.1)}, {"p90", percentile(v, 0.9)}, {"mean", mean(v)}};
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
      {"notice_seconds", c.notice_seconds},
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
      {"ps_link_gbit", r.ps_link_gbit > 0 ? nlohmann::ordered_json(r.ps_link_gbit) : nlohmann::ordered_json()},
      {"push_precision", c.push_precision},
      {"ps_utilisation", r.ps_utilisation},
      {"ps_link_utilisation", r.ps_link_utilisation},
      {"ps_saturation_workers", finite_or_null(r.ps_saturation_workers)},
      {"ps_compute_saturation_workers", finite_or_null(r.ps_compute_saturation_workers)},
      {"ps_link_saturation_workers", finite_or_null(r.ps_link_saturation_workers)},
      {"ps_link_update_bytes", r.ps_link_update_bytes},
      {"ps_link_replica_share", r.ps_link_replica_share},
      {"replica_interval_updates", r.replica_interval > 0 ? nlohmann::ordered_json(r.replica_interval)
                                                          : nlohmann::ordered_json()},
      {"ps_limit", c.num_ps > 0 ? nlohmann::ordered_json(r.ps_limit) : nlohmann::ordered_json()},
      {"unfinished_draws", r.unfinished},
      {"accuracy", accuracy_json(c, r)},
      {"joins", c.joins}};
  if (c.per_draw)
    out["per_draw"] = {{"seconds", r.seconds},
                       {"cost_usd", r.cost_usd},
                       {"revocations", r.revocations},
                       {"restarts", r.restarts},
                       {"lost_steps", r.lost_steps},
                       {"takeovers", r.takeovers},
                       {"first_attempt_seconds", r.first_attempt_seconds},
                       {"worker_ends", r.worker_ends}};
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
      << (c.notice_seconds > 0 ? ", notice " + number_text(c.notice_seconds) + " s" : std::string())
      << (c.takeover ? ", takeover in the job (ULFM) " + std::to_string(c.takeover_seconds).substr(0, 4) + " s"
                     : std::string())
      << "; " << c.draws << " draws (seed " << c.seed << "); evidence S (simulator)\n";
  // A model that differs by type (AWS's bands) says which lifetimes each type got.
  if (c.revocation_model.rfind("aws-advisor", 0) == 0)
    for (const auto& m : r.revocation_models.items())
      out << "  lifetimes: " << m.value().get<std::string>() << '\n';
  if (r.seconds.empty()) {
    out << "  no draw finished within " << kMaxRestarts << " restarts: the servers are revoked faster than it trains\n";
    return;
  }
  out << "              median       p10       p90      mean\n";
  row("time", r.seconds, hours);
  row("cost", r.cost_usd, dollars);
  const std::vector<double> lost_when = lost_steps_of_restarted(r);
  out << std::fixed << std::setprecision(2) << "  without revocations: " << hours(r.ideal_seconds) << '\n'
      << "  revocations: " << mean(r.revocations) << " per run on average; at least one in " << std::setprecision(1)
      << 100 * fraction_positive(r.revocations) << "% of runs\n"
      << "  restarts: needed in " << 100 * fraction_positive(r.restarts) << "% of runs";
  if (!lost_when.empty())
    out << " (then " << std::setprecision(0) << mean(lost_when) << " steps lost on average, and " << c.restart_seconds
        << " s per restart)";
  out << '\n';
  if (c.takeover)
    out << std::setprecision(1) << "  takeovers (the parameter server lost, its standby up): in "
        << 100 * fraction_positive(r.takeovers) << "% of runs, " << std::setprecision(2) << mean(r.takeovers)
        << " per run on average, each at most " << r.replica_age << " updates lost\n";
  if (c.num_ps > 0) out << saturation_line(c, r);
  if (r.unfinished > 0)
    out << "  " << r.unfinished << " of " << c.draws << " draws did not finish within " << kMaxRestarts
        << " restarts (left out above)\n";
  if (!c.joins.empty())
    out << "  accuracy: not measured for clusters that grow (--joins); bench/README.md, \"Speed-up\", has the "
           "paper's Fig. 5 schedule\n";
  else
    out << accuracy_line(c.model, plan_epochs(r.steps, c.batch_size, c.train_images), c.num_ps == 0 ? 1 : c.workers);
}

int plan_command(const PlanConfig& c, std::ostream& out) {
  if (c.deadline_seconds >= 0 || c.budget_usd >= 0 || c.target_accuracy > 0) return plan_search_command(c, out);
  const PlanResult r = run_plan(c);
  if (c.json)
    out << plan_json(c, r).dump() << '\n';
  else
    print_plan(c, r, out);
  return 0;
}

}  // namespace mt
