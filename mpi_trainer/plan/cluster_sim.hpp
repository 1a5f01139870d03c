// The virtual clock of a parameter-server cluster: one simulator, two uses. A virtual-clock run
// (`train --virtual-workers`, app/train_virtual) computes a real gradient at each push it reports;
// `mpi_trainer plan` (plan/plan) runs it alone, many times, to predict time, cost and risk.
//
// What it models: each worker's step time (its device's, with that device's jitter, deterministic
// per seed and rank: StepPacer's draws), its link both ways (one message of the model down, one
// up), each parameter-server shard's own link (its NIC, full duplex, shared by every worker: every
// push comes in through it and every reply and standby replica goes out through it, a shard
// carrying its part of each message), the parameter server's time per update, served first come
// first served; revocations at a time, at a global step or at a lifetime drawn from a revocation
// model, as a SIGKILL (the step in flight is lost, the parameter server notices after
// --failure-timeout) or as a notice (the worker pushes the step it computes, then leaves); workers
// joining at a time or a global step; and each worker's billed time. It does not model the
// parameter server's own loss: plan does, around it (restarts from the newest checkpoint).
//
// A shard's link is shared the way TCP flows share a bottleneck: fairly among the messages on it
// at once (processor sharing), not one after the other. The simulator keeps each direction first
// come first served but draws each message's time on it from an exponential distribution with the
// message's mean (one draw for all its shards' parts): a closed network of such stations has the
// same throughput as one of processor-sharing stations with any time distribution (the BCMP
// theorem), and no lockstep. Measured on namespace nodes at 25 Mbit/s (bench/perf/link_plan.sh):
// deterministic first come first served, which let 3 workers' messages interleave perfectly,
// predicted 52% more steps/s than the link gave; this model is within a few percent.
#pragma once

#include <csignal>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "app/emulation.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"

namespace mt {

inline constexpr double kNeverSeconds = std::numeric_limits<double>::infinity();

// The non-empty items of a comma-separated list.
std::vector<std::string> split_list(const std::string& s);

// One worker's network link: a message of B bytes takes latency + B * 8 / (gbit_per_s * 1e9).
// The payload bytes of TCP over Ethernet at an MTU of 1500 against the bytes the link carries:
// 1,448 of every 1,514-byte frame (IPv4 and TCP headers with timestamps, the Ethernet header;
// what a link's byte counters and a token bucket count). With the acknowledgements below, within
// 1-3% of the bytes measured on the wire per global step (bench/perf/link_plan.sh; the rest:
// heartbeats, MPI's headers, segments sent again).
inline constexpr double kTcpFraming = 1514.0 / 1448.0;
// TCP's acknowledgements of a message, on the link's other direction, as bytes per payload byte:
// one 66-byte frame (the same headers, no payload) for every two full segments, as a receiver
// acknowledges a stream (RFC 1122's delayed acknowledgement, Linux's default).
inline constexpr double kTcpAcks = 66.0 / (2 * 1448.0);

struct Link {
  double latency_seconds = 0.0001;
  double gbit_per_s = 10;
  // The time `bytes` of payload take on the link, framing included, latency excluded.
  double wire_seconds(double bytes) const { return bytes * kTcpFraming * 8 / (gbit_per_s * 1e9); }
  // The time the acknowledgements of `bytes` of payload take on the other direction.
  double ack_seconds(double bytes) const { return bytes * kTcpAcks * 8 / (gbit_per_s * 1e9); }
  double seconds(double bytes) const { return latency_seconds + wire_seconds(bytes); }
};
// "0.1/10" (milliseconds / Gbit/s) for every worker, or one per worker, comma-separated; empty:
// the default (0.1 ms, 10 Gbit/s: one cloud zone). Throws UsageError.
std::vector<Link> parse_links(const std::string& spec, int workers);

// Each parameter-server shard's link when --ps-link is not given: 8 Gbit/s, the paper's
// parameter server (4 vCPUs) at Compute Engine's 2 Gbit/s of egress per vCPU (the
// "network-bandwidth" page: an n1-standard-8 is limited to 16 Gbps), 0.1 ms.
inline constexpr double kDefaultPsLinkGbit = 8;
// --ps-link: "GBIT_PER_S" or "LATENCY_MS/GBIT_PER_S" for every shard; "none": not modelled (an
// unlimited link); empty: the default. Throws UsageError.
std::optional<Link> parse_ps_link(const std::string& spec);
// The bytes of each shard's part of a message of the model's parameters, as ps/wire/partition splits
// them, `bytes_per_value` each (--push-precision: 4 fp32, 2 bf16).
std::vector<double> shard_message_bytes(const std::string& model, int shards, double bytes_per_value = sizeof(float));
// The bytes of each shard's replica for `standbys` standby workers (train's --ps-standby,
// ps/resilience/replica.hpp): one send to each of them of its part of the parameters and of each
// of its `state_buffers` optimizer buffers, in fp32 whatever the push precision. The trainer's
// shards keep one momentum per data slot under dana (else one) and one more buffer under gap-aware
// scaling: replica_state_buffers. Empty when `standbys` is 0.
std::vector<double> shard_replica_bytes(const std::string& model, int shards, int state_buffers, int standbys);
int replica_state_buffers(bool dana, bool gap_aware, int data_slots);
// Shard `shard`'s replica as the trainer paces it (ps/resilience/replica_pacing.hpp): the floats of
// one standby's replica (`replica_bytes` are for `standbys` of them: each slice goes to every
// standby) and the shard's reply (`shard_bytes`, at the push precision) as floats' worth: half its
// values with bf16 pushes. Zeros where there is no replica.
struct ReplicaFloats {
  std::int64_t replica = 0, reply = 0;
};
ReplicaFloats replica_floats(const std::vector<double>& replica_bytes, const std::vector<double>& shard_bytes,
                             int standbys, std::size_t shard);

// A worker that joins on the virtual clock: "k80@step=16000" or "k80@2h" (s, m, h).
struct VirtualJoin {
  std::string type;
  std::int64_t step = -1;
  double seconds = -1;
};
std::vector<VirtualJoin> parse_virtual_joins(const std::string& spec);

// The parameter server's time per update when --ps-update-seconds is not given: 0.11 ms per
// ResNet-32 (464,154 parameters) update, measured with bench/ps_bench (one shard, shared memory,
// about 9,000 updates/s on the 2-core development machine), in proportion to the parameters.
// bf16 pushes add decoding the gradient and encoding the reply, 0.09 ms per ResNet-32 update
// (ps_bench's codec_ms, the same machine): 0.20 ms.
double default_ps_update_seconds(std::int64_t params, PushPrecision precision = PushPrecision::kFp32);

// `--revocation-model NAME` (empty: none) for each of `types`: RevocationModel::load(NAME, type).
std::map<std::string, RevocationModel> revocation_models(const std::string& name,
                                                         const std::vector<std::string>& types);
// The lifetime (virtual seconds from its start) the simulator draws for worker `rank` of `type`
// with `seed`; negative: never revoked, or no model for its type.
double worker_lifetime_seconds(const std::map<std::string, RevocationModel>& lifetimes, const std::string& type,
                               std::uint64_t seed, int rank);

// One worker of the simulated cluster, as the simulator sees it.
struct SimWorker {
  int rank = 0;  // as in a real job with one parameter server: 1, 2, ...
  std::string type;
  Link link;
  std::optional<StepPacer> pacer;    // its step times (draw_target: no sleeping)
  double arrival = kNeverSeconds;    // its next push reaches the parameter server
  bool begun = false;                // started (a joiner: once it joined)
  double started = 0, ended = -1;    // virtual seconds, for billing (ended < 0: still running)
  bool alive = true;                 // its process runs
  bool counted = true;               // the parameter server counts it active
  bool leaving = false;              // a notice: its next push is its last
  double detect_at = kNeverSeconds;  // when the parameter server notices its loss
  double kill_at = kNeverSeconds;    // --revoke rank=R@T, or a lifetime of the revocation model
  std::int64_t kill_step = -1;       // --revoke rank=R@step=N
  int kill_signal = SIGKILL;
  std::string kill_why;
  std::int64_t version = 0;        // the global step of the parameters it computes on
  double last_step_seconds = 0;    // its step in flight: compute only, links excluded
  double send_at = kNeverSeconds;  // with a shard link: its step computed, its push starts up
  std::int64_t pushes = 0;         // applied
};

struct SimOptions {
  double update_seconds = 0;  // the parameter server's time per update
  double message_bytes = 0;   // the model, one way
  // Each shard's link, and the bytes of its part of a message (one per shard); none: only the
  // workers' links are modelled.
  std::optional<Link> ps_link;
  std::vector<double> shard_bytes;
  // Each shard's replica (shard_replica_bytes; empty: no standby) and the updates between two: a
  // replica begins after an update once `replica_interval` updates passed since the last one and
  // that one has left (ReplicaSender::due and ready), in slices, a few after each update, behind
  // that update's reply on the shard's outbound link (ClusterSim::pace_replica). Only
  // with a shard link. `standbys`: how many standbys the replica_bytes are for.
  std::vector<double> replica_bytes;
  std::int64_t replica_interval = 10;
  int standbys = 0;
  double failure_timeout = 1.5;
  std::uint64_t seed = 1;  // lifetimes (sampled_lifetime_seconds(model, seed, rank)), the links' draws
  // Each instance type's revocation model (revocation_models()); empty: no lifetimes.
  std::map<std::string, RevocationModel> lifetimes;
};

class ClusterSim {
 public:
  enum class Kind { kNone, kArrive, kKill, kDetect, kJoin, kLeft };
  struct Event {
    Kind kind = Kind::kNone;
    std::size_t who = 0;  // the worker's index (rank - 1)
    double at = kNeverSeconds;
  };

  // `workers`: the ones running from time 0 (the first `initial`), then one per join, in order;
  // each with its type, link, pacer and any --revoke set. Starts the initial ones at time 0.
  ClusterSim(SimOptions options, std::vector<SimWorker> workers, int initial, std::vector<VirtualJoin> joins);

  // When the next event happens (kNeverSeconds: none left, every worker gone), without acting on
  // it (pushes sent before it take their turns on the shards' links).
  double next_time() {
    settle_sends();
    return pick().at;
  }
  // The next event, acted on: kKill (a SIGKILL: the worker stops; a notice: it will leave after
  // its next push), kDetect (a lost worker no longer counted: active() fell), kJoin (the worker
  // started: active() rose), or kArrive (a push reaches the parameter server; the caller applies
  // it, then calls pushed()). kNone: no worker left to push.
  Event advance();
  // The push of worker `who` reported by advance() was applied (or, `applied` false, dropped as
  // too stale), counting one global step either way; the worker gets the parameters of `step()`
  // and computes its next step, or leaves after a notice (returns kLeft then). Step-based
  // revocations and joins fire here.
  Event pushed(std::size_t who, bool applied = true);

  // When the push reported by the last kArrive is applied: the parameter server serves pushes in
  // arrival order, update_seconds each.
  double applied_at() const { return now_; }
  double now() const { return now_; }
  std::int64_t step() const { return step_; }
  int active() const { return active_; }
  double staleness(std::size_t who) const { return double(step_ - workers_[who].version); }
  const SimWorker& worker(std::size_t who) const { return workers_[who]; }
  const std::vector<SimWorker>& workers() const { return workers_; }
  std::int64_t revocations() const { return lost_ + left_; }
  std::int64_t lost() const { return lost_; }
  std::int64_t left() const { return left_; }
  std::int64_t joined() const { return joined_; }
  double ps_busy_seconds() const { return ps_busy_; }
  // The updates between two standby replicas (each shard one after the same update), on average
  // (0 before the second).
  double replica_interval() const {
    return replicas_ > 1 ? double(replica_step_ - first_replica_step_) / double(replicas_ - 1) : 0.0;
  }
  // The busiest shard link's busiest direction: seconds it carried bytes.
  double ps_link_busy_seconds() const;
  // Worker-seconds billed so far to `type`-priced workers is the caller's: each worker from
  // `started` to `ended` (or now()).
  double billed_seconds(std::size_t who) const;

 private:
  Event pick() const;
  void settle_sends();
  void upload(SimWorker& w);
  // One direction of each shard's link and the other (its acknowledgements): when each is free,
  // and how long it carried bytes.
  struct Direction {
    std::vector<double>& free;
    std::vector<double>& busy;
  };
  double through_shard_links(const SimWorker& w, double at, Direction way, Direction back);
  static void acknowledge(Direction back, std::size_t s, double at, double seconds);
  void start(std::size_t who, double at);
  void kill(SimWorker& w, double at, const std::string& why);
  void next_step(SimWorker& w, double at);
  void pace_replica();

  SimOptions opt_;
  std::vector<SimWorker> workers_;
  int initial_ = 0;
  std::vector<VirtualJoin> joins_;
  std::vector<double> join_at_;
  int active_ = 0;
  std::int64_t step_ = 0, lost_ = 0, left_ = 0, joined_ = 0;
  double ps_free_ = 0, now_ = 0, ps_busy_ = 0;
  // Per shard link: when each direction is free again, and how long it carried bytes.
  std::vector<double> in_free_, out_free_, in_busy_, out_busy_;
  // The multiple of its mean time each message (and replica) takes on the shards' links.
  std::mt19937_64 link_rng_;
  std::exponential_distribution<double> link_draw_{1.0};
  // Per shard link: the bytes of a slice of the last replica (to every standby), its slices still
  // to go and those sent after each update. The last replica's update.
  std::vector<double> replica_slice_bytes_;
  std::vector<std::int64_t> replica_slices_left_, replica_per_update_;
  std::int64_t replica_step_ = -1, first_replica_step_ = -1, replicas_ = 0;
};

}  // namespace mt
