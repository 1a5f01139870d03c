// `mpi_trainer plan`: predicts the training time, cost and risk of a (transient) parameter-server
// cluster before renting it. The cluster simulator of virtual runs (plan/cluster_sim), without
// gradients, run once per Monte-Carlo draw of revocations: each worker's lifetime drawn from the
// revocation model; a worker revoked mid-run leaves the others training (the parameter server
// notices after --failure-timeout); the parameter server itself revoked (when it is transient)
// stops the job, which restarts after --restart-seconds from its newest periodic checkpoint (the
// steps since are lost); every worker revoked stops it too, after a checkpoint of the current
// state (nothing lost), and it restarts with a fresh cluster. Evidence kind S (simulator only).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/accuracy_table.hpp"
#include "plan/cost.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"

namespace mt {

struct PlanConfig {
  std::string model = "resnet32";
  std::int64_t steps = 64000;  // global steps (or --epochs with --train-images)
  double epochs = 0;
  std::int64_t train_images = 50000;
  std::int64_t batch_size = 128;
  int workers = 4;
  std::string worker_types = "k80";  // one for all, or one per worker
  int num_ps = 1;                    // 0: one process alone (--workers 1)
  std::string ps_type = "ps";
  std::string pricing = "transient";     // the workers'
  std::string ps_pricing = "on-demand";  // the parameter server's (the paper's)
  std::string prices;                    // price table file; empty: the paper's Table II
  std::string devices;                   // device table file; empty: the shipped one
  std::string worker_links;
  std::string ps_link;                   // each shard's link (parse_ps_link); empty: the default
  std::string push_precision = "fp32";   // fp32 | bf16: the bytes of each push and reply
  double ps_update_seconds = -1;         // < 0: default_ps_update_seconds(model)
  std::string revocation_model = "gce";  // gce, a table file, or none
  double failure_timeout = 1.5;
  std::int64_t ckpt_every_steps = 1000;
  // A standby's replica (train's --ps-standby): a lost parameter server costs the updates since
  // its last replica, not since its last checkpoint, while a worker (the standby) outlives it.
  // -1: 1 with 2 or more workers and a parameter server, else 0.
  int ps_standby = -1;
  std::int64_t replica_interval = 10;
  double restart_seconds = 120;
  // The cloud's warning before it reclaims a server (GCE and Azure Spot: 30 s, AWS Spot: 120 s;
  // 0: none acted on, as the paper's TensorFlow). A worker warned at least a step ahead pushes
  // that step and leaves (nothing lost, nothing to detect); a parameter server warned at least
  // kNoticeCheckpointSeconds ahead checkpoints first (its restart loses nothing).
  double notice_seconds = 0;
  // A ULFM build (train's takeover, docs/fault-model.md): a lost parameter server whose standby
  // outlives it is taken over in the job: --replica-interval updates lost at most, and
  // takeover_seconds (measured: bench/faults/ps_takeover.sh) instead of a restart. Modelled as a new
  // attempt of the same cluster shape (the new parameter server on a worker's server, billed as
  // the parameter server's type).
  bool takeover = false;
  double takeover_seconds = 0.2;
  int draws = 100;
  std::uint64_t seed = 1;
  bool json = false;
  bool per_draw = false;  // --json: every draw's time, cost, revocations and restarts too
  std::string joins;      // workers joining later: TYPE@step=N or TYPE@TIME, comma-separated
  // --deadline / --budget: search cluster shapes (worker type and count, transient or on demand,
  // 1 or 2 shards) for the cheapest meeting both at the 90th percentile; < 0: not given.
  double deadline_seconds = -1;
  double budget_usd = -1;
  int max_workers = 16;  // the largest worker count the search tries
  // --target-accuracy (percent): each shape of the search runs the shortest measured schedule
  // predicted to reach it (epochs_to_reach), and shapes rank by that time; < 0: not given.
  double target_accuracy = -1;
};

// The warning a parameter server needs to write its checkpoint before it is reclaimed: measured
// 0.10-0.16 s from the notice to a durable resnet32 checkpoint (docs/fault-model.md, "Measured"),
// 3.38 s for a 16 MB one to cloud storage (CM-DARE); 5 s covers both.
inline constexpr double kNoticeCheckpointSeconds = 5;

// One configuration's prediction.
struct PlanResult {
  // What was planned, as checked and resolved (the report and the JSON say it).
  std::string cluster;  // e.g. "4 x k80 worker(s) (transient) + 1 parameter server ..."
  std::int64_t params = 0, steps = 0;
  std::vector<std::string> worker_types;                                        // per worker, joiners last
  std::string prices, devices;                                                  // the tables' sources
  nlohmann::ordered_json revocation_models = nlohmann::ordered_json::object();  // type -> the model's source
  double ideal_seconds = 0;               // no revocation: one draw of the step times
  std::vector<double> seconds, cost_usd;  // one per draw
  std::vector<double> revocations, restarts, lost_steps, takeovers;
  // Each draw's first attempt: its length and each initial worker's end (revoked or at the end).
  std::vector<double> first_attempt_seconds;
  std::vector<std::vector<double>> worker_ends;
  double ps_utilisation = 0;       // the parameter server's busy fraction without revocations
  double ps_link_utilisation = 0;  // its busiest shard link's busiest direction's, likewise
  double ps_link_gbit = 0;         // each shard's link as resolved from --ps-link; 0: not modelled
  // Workers like these at which the parameter servers are always busy: updating (compute) or
  // carrying pushes and replies (link), and the lower of the two (kNeverSeconds: never).
  double ps_compute_saturation_workers = 0, ps_link_saturation_workers = 0, ps_saturation_workers = 0;
  // The payload bytes one update put on the busiest shard link's busier direction in the run
  // without revocations (outbound: its part of the reply and of a standby replica's share; 0
  // without a shard link).
  double ps_link_update_bytes = 0;
  // The updates between two standby replicas in that run, on average: --replica-interval (paced
  // beside the replies, a replica leaves the trainer at once; a slow link carries fewer updates,
  // not fewer replicas; measured so up to four workers, from five on a full link the trainer's
  // space out: ClusterSim::pace_replica); 0: no standby, or no shard link (replicas are not
  // modelled then).
  double replica_interval = 0;
  // The share of ps_link_update_bytes that is the standby replicas' (0: none).
  double ps_link_replica_share = 0;
  // The most updates the standby's replica can be behind the parameter server: what a takeover or
  // a restart from it loses at most (with --push-journal off).
  std::int64_t replica_age = 0;
  std::string ps_limit;  // "compute" or "link": which saturates first
  int unfinished = 0;    // draws that needed more than the restart limit
};

PlanResult run_plan(const PlanConfig& cfg);

// One cluster shape the search tried.
struct PlanShape {
  PlanConfig cfg;  // workers, worker_types, pricing, num_ps set
  PlanResult result;
  bool meets = false;  // p90 time within the deadline and p90 cost within the budget
  // --target-accuracy: the schedule this shape runs to reach it, none when no measured one does.
  std::optional<EpochsToTarget> target;
};
// Every shape tried, the ones meeting both first, cheapest (median cost) first, or with
// --target-accuracy soonest (median time) first (plan/plan_search).
std::vector<PlanShape> search_plans(const PlanConfig& cfg);
// `mpi_trainer plan --deadline/--budget`: prints the search (or its JSON); 1 when no shape meets both.
int plan_search_command(const PlanConfig& cfg, std::ostream& out);
nlohmann::ordered_json plan_json(const PlanConfig& cfg, const PlanResult& r);
// The human-readable report.
void print_plan(const PlanConfig& cfg, const PlanResult& r, std::ostream& out);
// The live prediction of a run in progress (its progress lines and metrics): when it will finish
// and what it will have cost, from each active worker's measured push rate, the revocation model
// of its instance type given its age (a worker that has lived `age` is revoked later with the
// model's odds conditioned on that), and the prices. The expected training rate over time is
// integrated until the steps left are done.
struct LiveWorker {
  std::string type;
  double steps_per_second = 0;  // its pushes per second, measured
  double age_seconds = 0;       // since it started (run time)
};
struct LivePrediction {
  double seconds_left = -1;  // < 0: not expected to finish (every worker likely revoked first)
  double cost_usd = -1;      // the run's total, so far included
};
// `models`: each instance type's revocation model (empty: none); `time_scale`: model hours per
// run hour (--time-scale); `spent_usd`: the cost so far; `ps_usd_per_second`: every shard's.
LivePrediction predict_finish(std::int64_t steps_left, const std::vector<LiveWorker>& workers,
                              const std::map<std::string, RevocationModel>& models, double time_scale,
                              const PriceTable& prices, bool transient, double spent_usd, double ps_usd_per_second);
// The revocation model a run's live prediction uses: --revocation-model when given, else gce for
// transient workers, none on demand.
std::string prediction_model(const std::string& revocation_model, bool transient);
// "  finish ~0:12:34 $1.23" for a progress line ("  finish ? (a restart is likely)" when not
// expected to finish); `word`: "vfinish" for a virtual run's (virtual time).
std::string format_prediction(const LivePrediction& p, const char* word = "finish");
// The metrics' "predicted_seconds_left" and "predicted_cost_usd": null when not expected to finish.
nlohmann::ordered_json prediction_seconds_json(const LivePrediction& p);
nlohmann::ordered_json prediction_cost_json(const LivePrediction& p);

// `mpi_trainer plan`: prints the prediction (or its JSON); returns the exit code.
int plan_command(const PlanConfig& cfg, std::ostream& out);

}  // namespace mt
