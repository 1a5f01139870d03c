#include "plan/cluster_sim.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "app/metrics.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"
#include "ps/wire/partition.hpp"
#include "ps/resilience/replica_pacing.hpp"

namespace mt {

namespace {

bool parse_number(const std::string& text, double& v) {
  try {
    std::size_t used = 0;
    v = std::stod(text, &used);
    return used == text.size() && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<Link> parse_links(const std::string& spec, int workers) {
  std::vector<Link> links;
  for (const auto& item : split_list(spec)) {
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
  for (const auto& item : split_list(spec)) {
    const auto bad = [&] {
      return UsageError("--virtual-joins: '" + item +
                        "' is not TYPE@step=N or TYPE@TIME (e.g. k80@step=16000, k80@2h)");
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

std::optional<Link> parse_ps_link(const std::string& spec) {
  if (spec == "none") return std::nullopt;
  Link link{Link{}.latency_seconds, kDefaultPsLinkGbit};
  if (spec.empty()) return link;
  const auto slash = spec.find('/');
  double ms = link.latency_seconds * 1000;
  if ((slash != std::string::npos && (!parse_number(spec.substr(0, slash), ms) || ms < 0)) ||
      !parse_number(spec.substr(slash == std::string::npos ? 0 : slash + 1), link.gbit_per_s) || !(link.gbit_per_s > 0))
    throw UsageError("--ps-link: '" + spec +
                     "' is not GBIT_PER_S or LATENCY_MS/GBIT_PER_S (e.g. 16, or 0.1/16; the bandwidth above 0), "
                     "or none");
  link.latency_seconds = ms / 1000;
  return link;
}

std::vector<double> shard_message_bytes(const std::string& model, int shards, double bytes_per_value) {
  const Model m(parse_model(model));
  const Partition part(m.params(), shards);
  std::vector<double> bytes;
  for (int s = 0; s < shards; ++s)
    bytes.push_back(double(part.floats(s)) * bytes_per_value);
  return bytes;
}

std::vector<double> shard_replica_bytes(const std::string& model, int shards, int state_buffers, int standbys) {
  std::vector<double> bytes;
  if (standbys <= 0) return bytes;
  for (double part : shard_message_bytes(model, shards, sizeof(float)))
    bytes.push_back(part * (1 + state_buffers) * standbys);
  return bytes;
}

int replica_state_buffers(bool dana, bool gap_aware, int data_slots) {
  return (dana ? std::max(1, data_slots) : 1) + (gap_aware ? 1 : 0);
}

ReplicaFloats replica_floats(const std::vector<double>& replica_bytes, const std::vector<double>& shard_bytes,
                             int standbys, std::size_t shard) {
  ReplicaFloats f;
  if (shard < replica_bytes.size() && standbys > 0)
    f.replica = static_cast<std::int64_t>(replica_bytes[shard] / standbys / sizeof(float));
  if (shard < shard_bytes.size()) f.reply = static_cast<std::int64_t>(shard_bytes[shard] / sizeof(float));
  return f;
}

double default_ps_update_seconds(std::int64_t params, PushPrecision precision) {
  const double per_resnet32 = precision == PushPrecision::kBf16 ? 0.00011 + 0.00009 : 0.00011;
  return per_resnet32 * double(params) / 464154.0;
}

std::map<std::string, RevocationModel> revocation_models(const std::string& name,
                                                         const std::vector<std::string>& types) {
  std::map<std::string, RevocationModel> out;
  if (name.empty()) return out;
  for (const auto& t : types)
    if (!out.count(t)) out.emplace(t, RevocationModel::load(name, t));
  return out;
}

double worker_lifetime_seconds(const std::map<std::string, RevocationModel>& lifetimes, const std::string& type,
                               std::uint64_t seed, int rank) {
  const auto it = lifetimes.find(type);
  return it == lifetimes.end() ? -1 : sampled_lifetime_seconds(it->second, seed, rank, 1.0);
}

ClusterSim::ClusterSim(SimOptions options, std::vector<SimWorker> workers, int initial, std::vector<VirtualJoin> joins)
    : opt_(std::move(options)),
      workers_(std::move(workers)),
      initial_(initial),
      joins_(std::move(joins)),
      link_rng_(opt_.seed * 0x9E3779B97F4A7C15ULL + 0x5A17) {
  MT_ASSERT(initial_ >= 0 && static_cast<std::size_t>(initial_) + joins_.size() == workers_.size(),
            "cluster simulator: one worker per initial worker and per join");
  MT_ASSERT(!opt_.ps_link || !opt_.shard_bytes.empty(), "cluster simulator: a shard link needs each shard's bytes");
  const std::size_t links = opt_.ps_link ? opt_.shard_bytes.size() : 0;
  in_free_.assign(links, 0);
  out_free_.assign(links, 0);
  in_busy_.assign(links, 0);
  out_busy_.assign(links, 0);
  replica_slice_bytes_.assign(links, 0);
  replica_slices_left_.assign(links, 0);
  replica_per_update_.assign(links, 1);
  join_at_.assign(joins_.size(), kNeverSeconds);
  for (std::size_t j = 0; j < joins_.size(); ++j)
    join_at_[j] = joins_[j].seconds >= 0 ? joins_[j].seconds : kNeverSeconds;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    SimWorker& w = workers_[i];
    MT_ASSERT(w.pacer.has_value(), "cluster simulator: every worker needs its step times");
    w.alive = w.counted = static_cast<int>(i) < initial_;  // joiners start later
  }
  active_ = initial_;
  for (int i = 0; i < initial_; ++i)
    start(static_cast<std::size_t>(i), 0);
}

void ClusterSim::next_step(SimWorker& w, double at) {
  // From `at` the parameters reach it (one message down), it computes its step, and the push
  // reaches the parameter server (one message up).
  w.last_step_seconds = w.pacer->draw_target();
  if (!opt_.ps_link) {
    w.arrival = at + w.link.seconds(opt_.message_bytes) + w.last_step_seconds + w.link.seconds(opt_.message_bytes);
    return;
  }
  // Each shard sends its part when its link is free (replies leave in the order they are made).
  w.send_at = through_shard_links(w, at, {out_free_, out_busy_}, {in_free_, in_busy_}) + w.last_step_seconds;
  w.arrival = kNeverSeconds;
}

// A message between worker `w` and every shard, begun at `at`, one direction: each shard's part
// takes its turn on that direction of the shard's link (`free`: when each is free, `busy`: its
// time carrying bytes), an exponential multiple of its mean time, the same for every part (the
// header: fair sharing); it is through once every part came through, plus the latency and the
// time by which the worker's own link is slower than the slowest shard's (a message streams at
// its path's slowest rate: alone on the links it takes the slower link's time, on average).
// Outbound, the replicas' slices queued before it go first (pace_replica). Its acknowledgements
// take their turn on the other direction (`back`), queued from `at` (not from when its turn
// comes, which may be well ahead: the other direction is not held idle until then).
double ClusterSim::through_shard_links(const SimWorker& w, double at, Direction way, Direction back) {
  double slowest = 0;
  for (std::size_t s = 0; s < way.free.size(); ++s)
    slowest = std::max(slowest, opt_.ps_link->seconds(opt_.shard_bytes[s]));
  const double excess = std::max(0.0, w.link.seconds(opt_.message_bytes) - slowest);
  const double share = link_draw_(link_rng_);
  double done = at;
  for (std::size_t s = 0; s < way.free.size(); ++s) {
    const double wire = share * opt_.ps_link->wire_seconds(opt_.shard_bytes[s]);
    way.free[s] = std::max(at, way.free[s]) + wire;
    way.busy[s] += wire;
    acknowledge(back, s, at, opt_.ps_link->ack_seconds(opt_.shard_bytes[s]));
    done = std::max(done, way.free[s] + opt_.ps_link->latency_seconds);
  }
  return done + excess;
}

// `seconds` of acknowledgements on shard s's direction `back`, from `at` or once that direction is
// free.
void ClusterSim::acknowledge(Direction back, std::size_t s, double at, double seconds) {
  back.free[s] = std::max(at, back.free[s]) + seconds;
  back.busy[s] += seconds;
}

// A push starts up at send_at: each part takes its turn on its shard's inbound link, in the order
// the pushes were sent; it has arrived once every part came through both links.
void ClusterSim::upload(SimWorker& w) {
  w.arrival = through_shard_links(w, w.send_at, {in_free_, in_busy_}, {out_free_, out_busy_});
  w.send_at = kNeverSeconds;
}

// The pushes sent no later than the next event, in the order they were sent.
void ClusterSim::settle_sends() {
  if (!opt_.ps_link) return;
  for (;;) {
    SimWorker* first = nullptr;  // the earliest send (on a tie, the first in rank order)
    for (SimWorker& w : workers_)
      if (w.alive && w.send_at < kNeverSeconds && (!first || w.send_at < first->send_at)) first = &w;
    if (!first || first->send_at > pick().at) return;
    upload(*first);
  }
}

// After an update, as the shards' standbys do (ReplicaSender::pace, due, ready): the next slices
// of the replica in flight go onto each shard's outbound link, behind the reply just made; once
// `replica_interval` updates passed since the last replica and its every slice was sent, the next
// one begins (replica_slices_per_update: spread over one update fewer than the interval, no more
// bytes after an update than its reply). A slice
// is under TCP's eager limit: its send completes once the kernel holds it, before it crosses the
// link, so the model lets the link space replicas out no further: each update carries its share
// of one, and a slow link carries fewer updates instead. Measured, that holds up to four
// workers; from five on a slow link with one shard, and past five in every shape, the standby's
// one connection does not get that share of a link the replies fill (TCP's share, not the
// sends': with 4 MB socket buffers they complete at once and the bytes pile up in the kernel), the
// sends complete late and the trainer's replicas space out (bench/README.md, "Eager messages",
// "Why the replicas space out at 5 workers", "Past five workers"): not modelled; plan's report
// says so where the link is full (saturation_line).
void ClusterSim::pace_replica() {
  if (opt_.replica_bytes.empty() || !opt_.ps_link) return;
  const auto put_slices = [&](std::size_t s) {
    const std::int64_t n = std::min(replica_per_update_[s], replica_slices_left_[s]);
    const double bytes = double(n) * replica_slice_bytes_[s];
    const double wire = opt_.ps_link->wire_seconds(bytes);
    out_free_[s] = std::max(now_, out_free_[s]) + wire;
    out_busy_[s] += wire;
    acknowledge({in_free_, in_busy_}, s, now_, opt_.ps_link->ack_seconds(bytes));
    replica_slices_left_[s] -= n;
  };
  bool gone = true;  // every slice sent (under the eager limit, each send completes at once)
  for (std::size_t s = 0; s < replica_slices_left_.size(); ++s) {
    if (replica_slices_left_[s] > 0) put_slices(s);
    gone = gone && replica_slices_left_[s] == 0;
  }
  if (replica_step_ >= 0 && (step_ - replica_step_ < opt_.replica_interval || !gone)) return;
  replica_step_ = step_;
  if (replicas_++ == 0) first_replica_step_ = step_;
  for (std::size_t s = 0; s < replica_slices_left_.size() && s < opt_.replica_bytes.size(); ++s) {
    const ReplicaFloats f = replica_floats(opt_.replica_bytes, opt_.shard_bytes, std::max(1, opt_.standbys), s);
    replica_slices_left_[s] = replica_slices(f.replica);
    replica_per_update_[s] = replica_slices_per_update(f.replica, opt_.replica_interval, f.reply);
    replica_slice_bytes_[s] = opt_.replica_bytes[s] / double(replica_slices_left_[s]);
    put_slices(s);
  }
}

double ClusterSim::ps_link_busy_seconds() const {
  double busiest = 0;
  for (std::size_t s = 0; s < in_busy_.size(); ++s)
    busiest = std::max({busiest, in_busy_[s], out_busy_[s]});
  return busiest;
}

void ClusterSim::start(std::size_t who, double at) {
  SimWorker& w = workers_[who];
  w.version = step_;
  w.begun = true;
  w.started = at;
  next_step(w, at);
  const double life = worker_lifetime_seconds(opt_.lifetimes, w.type, opt_.seed, w.rank);
  if (life >= 0) w.kill_at = std::min(w.kill_at, at + life);
}

// SIGKILL: the worker is gone, its step in flight lost, and the parameter server notices after
// --failure-timeout. A notice (TERM, USR1): it pushes the step it computes and leaves.
void ClusterSim::kill(SimWorker& w, double at, const std::string& why) {
  if (!w.alive || w.leaving) return;
  w.kill_why = why + " (" + signal_name(w.kill_signal) + ")";
  w.kill_at = kNeverSeconds;
  if (w.kill_signal != SIGKILL) {
    w.leaving = true;
    return;
  }
  w.alive = false;
  w.ended = at;
  w.arrival = w.send_at = kNeverSeconds;
  w.detect_at = at + opt_.failure_timeout;
}

ClusterSim::Event ClusterSim::pick() const {
  // The earliest of: a push arriving, a timed kill, a loss noticed, a timed join (on a tie, the
  // first in that order and in rank order).
  Event e;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const SimWorker& w = workers_[i];
    if (w.alive && w.kill_at < e.at) e = {Kind::kKill, i, w.kill_at};
    if (w.alive && w.arrival < e.at) e = {Kind::kArrive, i, w.arrival};
    if (!w.alive && w.counted && w.detect_at < e.at) e = {Kind::kDetect, i, w.detect_at};
  }
  for (std::size_t j = 0; j < join_at_.size(); ++j)
    if (join_at_[j] < e.at) e = {Kind::kJoin, static_cast<std::size_t>(initial_) + j, join_at_[j]};
  return e;
}

ClusterSim::Event ClusterSim::advance() {
  settle_sends();
  Event e = pick();
  if (e.kind == Kind::kNone) return e;
  now_ = std::max(now_, e.at);
  SimWorker& w = workers_[e.who];
  switch (e.kind) {
    case Kind::kKill: kill(w, e.at, "--revoke or its sampled lifetime at virtual time " + format_eta(e.at)); break;
    case Kind::kDetect:
      w.counted = false;
      --active_;
      ++lost_;
      break;
    case Kind::kJoin:
      join_at_[e.who - static_cast<std::size_t>(initial_)] = kNeverSeconds;
      w.alive = w.counted = true;
      ++active_;
      ++joined_;
      start(e.who, e.at);
      break;
    case Kind::kArrive: {
      // The parameter server applies pushes in arrival order.
      const double applied = std::max(e.at, ps_free_) + opt_.update_seconds;
      ps_busy_ += opt_.update_seconds;
      ps_free_ = applied;
      now_ = applied;
      break;
    }
    default: break;
  }
  return e;
}

ClusterSim::Event ClusterSim::pushed(std::size_t who, bool applied) {
  ++step_;
  SimWorker& w = workers_[who];
  if (applied) ++w.pushes;
  w.version = step_;  // the reply: its next step starts from the parameters after its push
  Event out{Kind::kNone, who, now_};
  if (w.leaving) {
    w.alive = false;
    w.ended = now_;
    w.arrival = w.send_at = kNeverSeconds;
    if (w.counted) {
      w.counted = false;
      --active_;
      ++left_;
      out.kind = Kind::kLeft;
    }
  } else {
    next_step(w, now_);
  }
  pace_replica();
  // Step-based revocations and joins fire once the global step reaches theirs.
  for (auto& x : workers_)
    if (x.alive && x.kill_step > 0 && step_ >= x.kill_step) {
      x.kill_step = -1;
      kill(x, now_, "--revoke at global step " + std::to_string(step_));
    }
  for (std::size_t j = 0; j < joins_.size(); ++j)
    if (joins_[j].step > 0 && step_ >= joins_[j].step && !workers_[static_cast<std::size_t>(initial_) + j].begun &&
        join_at_[j] == kNeverSeconds)
      join_at_[j] = now_;  // joins now: the next event
  return out;
}

double ClusterSim::billed_seconds(std::size_t who) const {
  const SimWorker& w = workers_[who];
  if (!w.begun) return 0;
  const double end = w.ended >= 0 ? w.ended : now_;
  return std::max(0.0, end - w.started);
}

}  // namespace mt
