// `mpi_trainer plan` (issue 20; the parameter server's link and notices, issue 44): the cluster
// simulator without gradients, against closed forms, and the command as a user runs it.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan/accuracy_table.hpp"
#include "plan/cluster_sim.hpp"
#include "plan/plan.hpp"
#include "core/error.hpp"
#include "plan/revocation_model.hpp"
#include "test_util.hpp"

using mt::test::contains;
using mt::test::run;
using Json = nlohmann::json;

// The simulator against closed forms.
namespace {

mt::PlanResult plan_of(const mt::PlanConfig& c) { return mt::run_plan(c); }

// A message of `params` fp32 values on a link of `gbit` Gbit/s, TCP's framing included.
double wire(double params, double gbit) { return params * 4 * mt::kTcpFraming * 8 / (gbit * 1e9); }
// TCP's acknowledgements of a message, on the link's other direction, over the message's time on it.
constexpr double kAcks = mt::kTcpAcks / mt::kTcpFraming;

// Seconds per global step of `n` workers stepping `step` s each, with a shard link of `gbit`
// Gbit/s (0.1 ms) as fast as or faster than theirs: the closed network of the link's two directions, fairly
// shared, and the step and both latencies as the delay (mean value analysis). Outbound, each
// update also carries a standby's replica share when there are 2 or more workers (train's
// default: dana's momentum per worker and the gap buffer beside the parameters, every 10 updates);
// each direction carries the acknowledgements of the other's bytes.
double link_seconds_per_step(int n, double params, double step, double gbit, bool standby = true) {
  const double one = wire(params, gbit), replica = standby && n >= 2 ? one * (1 + n + 1) / 10.0 : 0;
  return mt::test::mva_seconds_per_step(n, {one + kAcks * (one + replica), one + replica + kAcks * one},
                                        step + 2 * 0.0001);
}

}  // namespace

TEST_CASE("plan without revocations: N workers take the cycle of their steps and the shared link",
          "[unit][plan]") {
  mt::PlanConfig c;
  c.steps = 8000;
  c.revocation_model = "none";
  c.draws = 3;
  const double params = 464154;  // resnet32
  for (int n : {1, 2, 4, 8}) {
    c.workers = n;
    const auto r = plan_of(c);
    INFO(n << " workers");
    // Jitter (CV 2%) averages out over thousands of steps; the default shard link, 8 Gbit/s, is
    // slower than the workers' 10, so it sets each message's time.
    const double per_step = link_seconds_per_step(n, params, 0.220, 8);
    CHECK(r.ideal_seconds == Approx(double(c.steps) * per_step).epsilon(0.01));
    CHECK(per_step < (0.220 + 2 * (0.0001 + wire(params, 8))) / n * 1.02);  // the link barely queues (1.5% with 8)
    CHECK(r.seconds.size() == 3);
    for (double s : r.seconds) CHECK(s == Approx(r.ideal_seconds).epsilon(0.01));  // other draws of the jitter
    for (double v : r.revocations) CHECK(v == 0);
    CHECK(r.ps_utilisation == Approx(double(c.steps) * 0.00011 / r.ideal_seconds).epsilon(0.01));
  }
  // One process alone: the device's step time, nothing else (the paper's 1 K80: 64K steps in 3.91 h).
  c.workers = 1;
  c.num_ps = 0;
  c.steps = 64000;
  c.pricing = "on-demand";
  const auto one = plan_of(c);
  CHECK(one.ideal_seconds / 3600 == Approx(3.91).epsilon(0.005));
  CHECK(one.cost_usd[0] == Approx(3.91 * 0.723).epsilon(0.005));  // Table II's on-demand K80, no parameter server
}

TEST_CASE("plan when the parameter server is the bottleneck: steps x its time per update", "[unit][plan]") {
  mt::PlanConfig c;
  c.steps = 4000;
  c.workers = 8;
  c.revocation_model = "none";
  c.draws = 1;
  c.ps_update_seconds = 0.1;  // 10 updates/s against 8 K80s' ~36 pushes/s
  const auto r = plan_of(c);
  CHECK(r.ideal_seconds == Approx(4000 * 0.1).epsilon(0.01));
  CHECK(r.ps_utilisation == Approx(1.0).epsilon(0.01));
  CHECK(r.ps_saturation_workers < 8);
  c.num_ps = 2;  // two shards, each updating half of every push: still below the workers' rate
  CHECK(plan_of(c).ideal_seconds == Approx(4000 * 0.05).epsilon(0.01));
}

TEST_CASE("plan finds where the parameter server's link saturates, as a hand calculation does", "[unit][plan]") {
  // 8 V100s (0.069 s a step) on resnet32-t2t (1,857,722 parameters, 7.43 MB a message) with a
  // 10 Gbit/s shard link: each worker's exchange is its step and one message each way; the
  // shard's link carries one message each way in 6.2 ms (TCP's framing included), and the other
  // message's acknowledgements (2.2% more).
  mt::PlanConfig c;
  c.model = "resnet32-t2t";
  c.worker_types = "v100";
  c.workers = 8;
  c.steps = 4000;
  c.revocation_model = "none";
  c.draws = 1;
  c.ps_link = "10";
  c.ps_standby = 0;  // first without the standby's replicas
  const double params = 1857722, one = wire(params, 10), busy = one * (1 + kAcks);
  const double cycle = 0.069 + 2 * (0.0001 + one);
  auto r = plan_of(c);
  CHECK(r.ps_limit == "link");
  // The link's time per update as the simulation had it: exponential draws of mean `one`.
  CHECK(r.ps_link_saturation_workers == Approx(cycle / busy).epsilon(0.05));  // 12.8
  CHECK(r.ps_saturation_workers == r.ps_link_saturation_workers);
  CHECK(r.ps_compute_saturation_workers == Approx(cycle / mt::default_ps_update_seconds(1857722)).epsilon(0.001));
  CHECK(r.ps_link_update_bytes == Approx(params * 4 * (1 + kAcks)).epsilon(0.03));
  // Below the limit the shared link delays each exchange by its queueing; past it (24 workers) a
  // global step takes about the link's time for one message, whatever the worker count.
  CHECK(r.ideal_seconds == Approx(4000 * link_seconds_per_step(8, params, 0.069, 10, false)).epsilon(0.03));
  c.workers = 24;
  r = plan_of(c);
  CHECK(r.ideal_seconds == Approx(4000 * link_seconds_per_step(24, params, 0.069, 10, false)).epsilon(0.03));
  CHECK(r.ideal_seconds > 4000 * busy);  // never above the link's bound
  CHECK(r.ideal_seconds < 1.12 * 4000 * busy);
  CHECK(r.ps_link_utilisation > 0.9);
  // Two shards each carry about half of every message: the limit doubles.
  c.num_ps = 2;
  const auto two = plan_of(c);
  CHECK(two.ps_link_saturation_workers == Approx(2 * cycle / busy).epsilon(0.04));
  // bf16 pushes: half the bytes each way, on the shard's link and each worker's.
  c.num_ps = 1;
  c.push_precision = "bf16";
  const double cycle16 = 0.069 + 2 * (0.0001 + one / 2);
  const auto half = plan_of(c);
  CHECK(half.ps_limit == "link");
  // (the busier of two directions of 4,000 draws each: a few percent high)
  CHECK(half.ps_link_saturation_workers == Approx(cycle16 / (busy / 2)).epsilon(0.05));  // 23.8
  CHECK(half.ideal_seconds < 0.75 * 4000 * busy);
  c.push_precision = "fp32";
  // The standby's replicas go out through the same link (train's default --ps-standby: 1): the
  // parameters, a momentum per worker (dana) and the gap buffer, 26 messages' worth with 24
  // workers, paced in 60 KB slices beside the replies, no more after an update than its reply
  // (123 slices): 3,221 slices follow 27 updates, the next replica after the last of them, 26
  // apart, not 10; each update carries a reply and nearly a reply's worth of replica. Fewer
  // workers saturate the link.
  c.ps_standby = -1;
  const auto standby = plan_of(c);
  const double replica = params * 4 * 26;
  CHECK(standby.replica_interval == Approx(26).margin(0.01));
  // (over 4,000 updates: 155 replicas, the first at the start)
  const double update = params * 4 * (1 + kAcks) + replica / 26;
  CHECK(standby.ps_link_update_bytes == Approx(update).epsilon(0.02));
  CHECK(standby.ps_link_replica_share == Approx(replica / 26 / update).epsilon(0.02));
  CHECK(standby.ps_link_saturation_workers < 0.95 * r.ps_link_saturation_workers);
  CHECK(standby.ideal_seconds > 1.05 * r.ideal_seconds);
  CHECK(standby.ideal_seconds == Approx(4000 * standby.ps_link_update_bytes * 8 * mt::kTcpFraming / 10e9).epsilon(0.1));
  // Without the link model (the simulator before issue 44): only the updates saturate.
  c.ps_standby = 0;
  c.ps_link = "none";
  r = plan_of(c);
  CHECK(r.ps_limit == "compute");
  CHECK(r.ideal_seconds == Approx(4000 * (0.069 + 2 * (0.0001 + wire(params, 10))) / 24).epsilon(0.02));
}

TEST_CASE("plan with the cloud's notice: a warned parameter server checkpoints, warned workers leave", "[unit][plan]") {
  // AWS spot V100s (half revoked within 40 minutes), the parameter server transient too, no
  // standby: without a notice each restart goes back to the newest periodic checkpoint.
  mt::PlanConfig c;
  c.workers = 4;
  c.worker_types = "v100";
  c.steps = 64000;
  c.revocation_model = "aws-v100";
  c.ps_pricing = "transient";
  c.ps_standby = 0;
  c.draws = 40;
  const auto none = plan_of(c);
  double lost = 0;
  for (double l : none.lost_steps) lost += l;
  CHECK(lost > 0);
  c.notice_seconds = 120;  // AWS's two minutes
  const auto warned = plan_of(c);
  REQUIRE(warned.restarts == none.restarts);  // the same draws of the same lifetimes
  for (double l : warned.lost_steps) CHECK(l == 0);
  // Each warned worker's revocation costs neither its step in flight nor --failure-timeout.
  double t_none = 0, t_warned = 0;
  for (std::size_t i = 0; i < none.seconds.size(); ++i) {
    t_none += none.seconds[i];
    t_warned += warned.seconds[i];
  }
  CHECK(t_warned < t_none);
  c.notice_seconds = 0.05;  // shorter than a V100's step, too short to checkpoint: as without one
  CHECK(plan_of(c).lost_steps == none.lost_steps);
  c.notice_seconds = 2;  // a step ahead, not 5 s: the workers leave, the parameter server's restarts lose steps
  double lost_short = 0;
  for (double l : plan_of(c).lost_steps) lost_short += l;
  CHECK(lost_short > 0);
  CHECK(run("plan --notice-seconds -1").code == mt::kExitUsage);
}

TEST_CASE("plan's Monte-Carlo revocations match the revocation model's CDF", "[unit][plan]") {
  mt::test::TempDir dir("plan");
  // 40% of servers revoked within their first 36 s, the others never: each of 8 workers is lost
  // with probability 0.4 in a run that lasts longer (all 8 lost, and a restart, has p = 0.4^8).
  // 1000 draws: the checks below allow more than 3 standard errors.
  const auto model = dir.path() / "early.csv";
  std::ofstream(model) << "# hours,fraction\n0,0\n0.01,0.4\n";
  mt::PlanConfig c;
  c.steps = 4000;  // about 2 minutes with 8 K80s
  c.workers = 8;
  c.revocation_model = model.string();
  c.draws = 1000;
  const auto r = plan_of(c);
  double mean = 0;
  for (double v : r.revocations) mean += v;
  mean /= double(r.revocations.size());
  CHECK(mean == Approx(8 * 0.4).margin(0.15));  // standard error 0.044
  // Losing workers slows the run: every draw at least as long as the one without revocations.
  for (double s : r.seconds) CHECK(s >= r.ideal_seconds * 0.99);
  // A transient parameter server (its own lifetime from the model) stops the job in 40% of runs:
  // restarts from the newest checkpoint, at most one interval of steps lost each time.
  c.revocation_model = model.string();
  c.ps_pricing = "transient";
  c.ckpt_every_steps = 500;
  c.ps_standby = 0;
  const auto t = plan_of(c);
  double restarted = 0, lost = 0;
  for (std::size_t i = 0; i < t.restarts.size(); ++i) {
    restarted += t.restarts[i] > 0 ? 1 : 0;
    lost += t.lost_steps[i];
    CHECK(t.lost_steps[i] <= 500 * t.restarts[i]);
  }
  CHECK(restarted / double(t.restarts.size()) == Approx(0.4).margin(0.05));
  // With a standby (the default with 2 or more workers) a restart loses the updates since the
  // last whole replica while a worker outlives the parameter server: at most the updates between
  // two and those its slices followed the first (resnet32's replica with 8 workers: 310 slices, 30
  // after each update, its reply's worth, over 11 updates: 10 apart, 20 behind at most).
  c.ps_standby = -1;
  c.replica_interval = 10;
  const auto sb = plan_of(c);
  CHECK(sb.replica_age == 20);
  double lost_sb = 0, beyond = 0;
  for (std::size_t i = 0; i < sb.restarts.size(); ++i) {
    CHECK(sb.restarts[i] <= t.restarts[i]);  // less to redo: never more restarts
    lost_sb += sb.lost_steps[i];
    beyond += sb.lost_steps[i] > 20 * sb.restarts[i] ? 1 : 0;  // every worker gone before the PS
  }
  CHECK(beyond <= 2);  // P(all 8 workers revoked first) < 0.4^8 per draw
  CHECK(lost_sb < lost / 10);
  // Under ULFM (--takeover) those losses are taken over in the job: no restart while the standby
  // is up, each a takeover of at most the replica's age in updates and --takeover-seconds.
  c.takeover = true;
  c.takeover_seconds = 0.2;
  const auto tk = plan_of(c);
  double took = 0, restarts_left = 0;
  for (std::size_t i = 0; i < tk.takeovers.size(); ++i) {
    took += tk.takeovers[i];
    restarts_left += tk.restarts[i];
    CHECK(tk.lost_steps[i] <= 20 * tk.takeovers[i] + 500 * tk.restarts[i]);
  }
  CHECK(took > 0.3 * double(tk.takeovers.size()));  // the parameter server is lost in ~40% of draws
  CHECK(restarts_left <= 2);                         // every worker gone first: as rare as above
  double mean_sb = 0, mean_tk = 0;
  for (double v : sb.seconds) mean_sb += v;
  for (double v : tk.seconds) mean_tk += v;
  CHECK(mean_tk < mean_sb);  // 0.2 s instead of a 120 s restart each time
}

TEST_CASE("mpi_trainer plan: the report, --json and its errors", "[unit][plan]") {
  const auto r = run("plan --workers 4 --worker-types k80 --steps 64000 --draws 20");
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "4 x k80 worker(s) (transient) + 1 parameter server (ps, on-demand)"));
  CHECK(contains(r.output, "evidence S"));
  CHECK(contains(r.output, "its link (8 Gbit/s each way per shard)"));  // the default shard link
  const auto j = run("plan --workers 4 --steps 64000 --draws 20 --json");
  REQUIRE(j.code == 0);
  const auto p = Json::parse(j.output);
  // The paper's Table I, 4 K80 transient: 1.05 h, $1.05 (time within 15%; the cost with the
  // parameter server on demand, as the paper ran it).
  CHECK(p["seconds"]["mean"].get<double>() / 3600 == Approx(1.05).epsilon(0.15));
  CHECK(p["cost_usd"]["mean"].get<double>() == Approx(1.05).epsilon(0.15));
  CHECK(p["evidence"] == "S");
  CHECK(p["ps_pricing"] == "on-demand");
  CHECK(run("plan --workers 0").code == mt::kExitUsage);
  const auto bad = run("plan --workers 3 --worker-types k80,p100");
  CHECK(bad.code == mt::kExitUsage);
  CHECK(contains(bad.output, "--worker-types lists 2 types for 3 workers"));
  const auto unknown = run("plan --worker-types a100");
  CHECK(unknown.code == mt::kExitUsage);
  CHECK(contains(unknown.output, "a100"));
  CHECK(run("plan --workers 2 --num-ps 0").code == mt::kExitUsage);
  CHECK(run("plan --steps 10 --epochs 2").code == mt::kExitUsage);
  CHECK(run("plan --deadline soon").code == mt::kExitUsage);
}

TEST_CASE("mpi_trainer plan --deadline --budget: the cheapest shapes meeting both, or exit 1", "[unit][plan]") {
  const auto r = run("plan --steps 64000 --deadline 2h --budget 3 --draws 10 --max-workers 8 --json");
  REQUIRE(r.code == 0);
  const auto j = Json::parse(r.output);
  CHECK(j["event"] == "plan_search");
  const auto& shapes = j["shapes"];
  REQUIRE(shapes.size() > 10);
  bool met = true;
  double last = 0;
  for (const auto& s : shapes) {
    const bool meets = s["meets"].get<bool>();
    if (meets) {
      CHECK(met);  // the ones meeting both come first, cheapest first
      CHECK(s["seconds"]["p90"].get<double>() <= 7200);
      CHECK(s["cost_usd"]["p90"].get<double>() <= 3);
      CHECK(s["cost_usd"]["median"].get<double>() >= last);
      last = s["cost_usd"]["median"].get<double>();
    }
    met = meets;
  }
  CHECK(shapes[0]["meets"].get<bool>());
  // One K80 alone takes 3.9 h: never within 2 h; 8 K80s do.
  for (const auto& s : shapes)
    if (s["worker_types"][0] == "k80" && s["num_ps"] == 0) CHECK_FALSE(s["meets"].get<bool>());
  const auto none = run("plan --steps 64000 --deadline 1m --draws 5 --max-workers 2");
  CHECK(none.code == 1);
  CHECK(contains(none.output, "none does"));
}

TEST_CASE("the live prediction: steps left over the workers' rates, less what the revocation model takes",
          "[unit][plan]") {
  const mt::PriceTable prices = mt::PriceTable::table2();
  const std::vector<mt::LiveWorker> two{{"k80", 4.0, 0}, {"k80", 4.0, 0}};
  // No model: 800 steps at 8 a second, $0.256 an hour per transient K80 and the PS's $0.143 on demand.
  const auto calm = mt::predict_finish(800, two, {}, 1.0, prices, true, 0.5, 0.143 / 3600);
  CHECK(calm.seconds_left == Approx(100));
  CHECK(calm.cost_usd == Approx(0.5 + 100 * (2 * 0.256 + 0.143) / 3600));
  CHECK(mt::predict_finish(0, two, {}, 1.0, prices, true, 0.5, 0).seconds_left == 0);
  CHECK(mt::predict_finish(10, {}, {}, 1.0, prices, true, 0.5, 0).seconds_left < 0);  // nobody trains
  // Every server revoked at 1 model hour (--time-scale 3600: one a second): a run needing 2 s of
  // two workers does not finish; one needing half a second does, as if nothing happened.
  std::map<std::string, mt::RevocationModel> cap{{"k80", mt::RevocationModel::parse("0,0\n1,0\n1,1\n", "cap")}};
  CHECK(mt::predict_finish(16, two, cap, 3600, prices, true, 0, 0).seconds_left < 0);
  CHECK(mt::predict_finish(4, two, cap, 3600, prices, true, 0, 0).seconds_left == Approx(0.5).epsilon(0.01));
  // 10% of the servers revoked in their first hour, all by the second: the expected rate falls,
  // so the run takes longer than without the model, and a worker already 50 minutes old (alive)
  // nears the steep part, so it is likelier to go during the run than a fresh one.
  std::map<std::string, mt::RevocationModel> half{{"k80", mt::RevocationModel::parse("0,0\n1,0.1\n2,1\n", "steep")}};
  const auto fresh = mt::predict_finish(8 * 1800, two, half, 1.0, prices, true, 0, 0);
  CHECK(fresh.seconds_left > 1800 * 1.01);
  const std::vector<mt::LiveWorker> old{{"k80", 4.0, 3000}, {"k80", 4.0, 3000}};
  CHECK(mt::predict_finish(8 * 1800, old, half, 1.0, prices, true, 0, 0).seconds_left > fresh.seconds_left);
  // Expected cost: workers billed only while expected alive, so below the calm run's bill per second.
  CHECK(fresh.cost_usd < fresh.seconds_left * 2 * 0.256 / 3600);
}

TEST_CASE("mpi_trainer calibrate writes a device table that plan and --emulate-device read", "[unit][plan]") {
  mt::test::TempDir dir("calibrate");
  const auto table = dir.path() / "here.txt";
  const auto r = run("calibrate --model resnet8 --batch-size 8 --steps 3 --warmup 1 --updates 5 --threads 1 --name k80 --out " +
                     table.string());
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "parameter-server update"));
  // The table's k80 row is this machine's step: plan without revocations takes steps x that.
  std::ifstream in(table);
  double step = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("k80 ", 0) == 0) step = std::stod(line.substr(4));
  REQUIRE(step > 0);
  const auto p = run("plan --devices " + table.string() +
                     " --workers 1 --num-ps 0 --steps 100 --revocation-model none --draws 1 --json");
  REQUIRE(p.code == 0);
  CHECK(Json::parse(p.output)["seconds"]["mean"].get<double>() == Approx(100 * step).epsilon(0.1));
  CHECK(run("calibrate --name 'a b'").code == mt::kExitUsage);
  CHECK(run("calibrate --steps 1").code == mt::kExitUsage);
}

TEST_CASE("plan's accuracy line: the measured cost of asynchrony for its shape, or what was measured", "[unit][plan]") {
  // plan/accuracy_measured.csv, from bench/README.md's "Speed-up" tables.
  const auto rows = mt::measured_accuracy();
  REQUIRE(rows.size() == 7);
  for (const auto& m : rows) {
    CHECK(m.seeds == 3);
    CHECK(m.sd_points < 1);
  }
  const auto four = mt::accuracy_for("resnet8", 20, 4);
  REQUIRE(four);
  CHECK(four->delta_points == Approx(-0.17));
  CHECK(mt::accuracy_for("resnet8", 20.5, 8)->delta_points == Approx(-0.41));  // within 5% of 20 epochs
  CHECK_FALSE(mt::accuracy_for("resnet8", 5, 8));                              // measured before --momentum auto
  CHECK_FALSE(mt::accuracy_for("resnet32", 20, 4));
  // As a user runs it: 20 epochs of Fashion-MNIST (60,000 images) at batch 128 = 9,375 steps.
  const auto measured = run("plan --model resnet8 --epochs 20 --train-images 60000 --workers 4 --draws 3");
  REQUIRE(measured.code == 0);
  CHECK(contains(measured.output, "accuracy: -0.17 points against one worker (sd 0.19, 3 seeds; one worker 92.56%)"));
  const auto other = run("plan --workers 4 --draws 3");
  REQUIRE(other.code == 0);
  CHECK(contains(other.output, "accuracy: not measured for resnet32 over 163.8 epochs with 4 workers"));
  const auto json = Json::parse(run("plan --model resnet8 --epochs 10 --train-images 60000 --workers 2 --draws 3 --json").output);
  CHECK(json["accuracy"]["delta_points"].get<double>() == Approx(0.06));
  CHECK(json["accuracy"]["evidence"] == "E");
  CHECK(Json::parse(run("plan --workers 4 --draws 3 --json").output)["accuracy"].is_null());
  const std::string shape_flags = "plan --model resnet8 --epochs 20 --train-images 60000 --deadline 10h --draws 3 --max-workers 4";
  CHECK(contains(run(shape_flags).output, "acc."));
  int four_workers = 0;
  const Json shapes = Json::parse(run(shape_flags + " --json").output)["shapes"];
  for (const auto& s : shapes)
    if (s["workers"] == 4 && s["num_ps"] == 1) {
      ++four_workers;
      CHECK(s["accuracy"]["delta_points"].get<double>() == Approx(-0.17));
    }
  CHECK(four_workers > 0);
}

TEST_CASE("plan --target-accuracy: each shape runs the shortest measured schedule reaching it, soonest first",
          "[unit][plan]") {
  // One worker's accuracy plus the measured cost of asynchrony (plan/accuracy_measured.csv):
  // 4 workers reach 88.04% after 5 epochs, 90.87% after 10, 92.39% after 20.
  CHECK(mt::epochs_to_reach("resnet8", 4, 91.0)->epochs == 20);
  CHECK(mt::epochs_to_reach("resnet8", 4, 90.8)->epochs == 10);
  CHECK(mt::epochs_to_reach("resnet8", 4, 90.8)->predicted_percent == Approx(90.87));
  CHECK(mt::epochs_to_reach("resnet8", 2, 91.0)->epochs == 10);  // 91.55
  CHECK(mt::epochs_to_reach("resnet8", 1, 91.0)->epochs == 10);  // one worker's own 91.49
  CHECK_FALSE(mt::epochs_to_reach("resnet8", 8, 92.5));           // 92.15 at 20 epochs, the longest measured
  CHECK_FALSE(mt::epochs_to_reach("resnet8", 3, 80));             // 3 workers: not measured
  CHECK_FALSE(mt::epochs_to_reach("resnet32", 2, 50));
  const auto r = run("plan --model resnet8 --train-images 60000 --target-accuracy 91 --draws 3 --max-workers 4 --json");
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.output);
  CHECK(j["target_accuracy_percent"].get<double>() == 91);
  bool met = true;
  double last = 0;
  int checked = 0;
  for (const auto& s : j["shapes"]) {
    const bool meets = s["meets"].get<bool>();
    const int workers = s["num_ps"] == 0 ? 1 : s["workers"].get<int>();
    if (meets) {
      CHECK(met);  // the shapes reaching it first, soonest first
      CHECK(s["seconds"]["median"].get<double>() >= last);
      last = s["seconds"]["median"].get<double>();
      const int epochs = workers == 4 ? 20 : 10;
      CHECK(s["target"]["epochs"].get<double>() == epochs);
      CHECK(s["global_steps"].get<std::int64_t>() == (epochs * 60000 + 127) / 128);
      ++checked;
    } else {
      CHECK(s["target"].is_null());  // 3 workers: no measured schedule
      CHECK(workers == 3);
    }
    met = meets;
  }
  CHECK(checked > 4);
  const auto text = run("plan --model resnet8 --target-accuracy 91 --draws 3 --max-workers 2");
  CHECK(contains(text.output, "the shortest measured schedule predicted to reach 91.0% test accuracy"));
  CHECK(contains(text.output, "epochs"));
  const auto never = run("plan --model resnet8 --target-accuracy 99 --draws 3 --max-workers 2");
  CHECK(never.code == 1);
  CHECK(contains(never.output, "no measured schedule of resnet8 is predicted to reach 99.0%; measured: resnet8 on "
                               "fashion-mnist, 92.56% at most (one worker, 20 epochs)"));
  CHECK(run("plan --target-accuracy 0").code == mt::kExitUsage);
}

TEST_CASE("plan writes its shard link's rate as given: Mbit/s below 1 Gbit/s, not a rounded 0", "[unit][plan]") {
  const auto slow = run("plan --model resnet8 --workers 5 --ps-link 2.2/0.05 --push-precision bf16 --draws 3");
  REQUIRE(slow.code == 0);
  CHECK(contains(slow.output, "its link (50 Mbit/s each way per shard, bf16 pushes)"));
  CHECK(contains(slow.output, "the link first (the updates at about"));
  const auto odd = run("plan --model resnet8 --workers 2 --ps-link 2.5 --draws 3");
  REQUIRE(odd.code == 0);
  CHECK(contains(odd.output, "its link (2.5 Gbit/s each way per shard)"));
  const auto wide = run("plan --model resnet8 --workers 2 --ps-link 1600 --draws 3");
  REQUIRE(wide.code == 0);
  CHECK(contains(wide.output, "its link (1600 Gbit/s each way per shard)"));  // not 1.6e+03
}

TEST_CASE("plan says what share of a slow shard link the standby replicas take", "[unit][plan]") {
  // 8 workers, bf16 pushes, 50 Mbit/s: the link is full. Each replica (the parameters, 8 momenta
  // and the gap buffer: 752,900 floats, 51 slices of 60 KB) goes no faster than its 150 KB reply
  // after each update (2 slices, over 26 updates): 25 updates apart, not 10, and 45% of the
  // link's bytes.
  const auto slow = run("plan --model resnet8 --workers 8 --ps-link 2.2/0.05 --push-precision bf16 --draws 3 --json");
  REQUIRE(slow.code == 0);
  const auto j = Json::parse(slow.output);
  CHECK(j["replica_interval_updates"].get<double>() == Approx(25).margin(0.01));
  const double replica = 75290.0 * 4 * 10, reply = 75290.0 * 2;
  const double share = j["ps_link_replica_share"].get<double>();
  CHECK(share == Approx(replica / 25 / (replica / 25 + reply)).epsilon(0.02));
  const auto text = run("plan --model resnet8 --workers 8 --ps-link 2.2/0.05 --push-precision bf16 --draws 3");
  CHECK(contains(text.output, "(" + std::to_string(std::lround(100 * share)) +
                                  "% of its bytes the standby replicas', one every 25 updates)"));
  // The link is full: that share is TCP's to give, and plan says so.
  CHECK(j["ps_link_utilisation"].get<double>() >= 0.95);
  CHECK(contains(text.output, "the link is full: TCP can give the standby's one connection less"));
  // --replica-interval 40: spread over 39 updates, under the reply's worth: a third of the bytes.
  const auto rarer = run("plan --model resnet8 --workers 8 --ps-link 2.2/0.05 --push-precision bf16 "
                         "--replica-interval 40 --draws 3 --json");
  REQUIRE(rarer.code == 0);
  CHECK(Json::parse(rarer.output)["replica_interval_updates"].get<double>() == Approx(40).margin(0.01));
  CHECK(Json::parse(rarer.output)["ps_link_replica_share"].get<double>() ==
        Approx(replica / 40 / (replica / 40 + reply)).epsilon(0.02));
  // Two workers: the replicas' share, but a link not full: no word of TCP's share.
  const auto two = run("plan --model resnet8 --workers 2 --ps-link 2.2/0.05 --draws 3 --json");
  CHECK(Json::parse(two.output)["ps_link_replica_share"].get<double>() >= 0.05);
  CHECK(Json::parse(two.output)["ps_link_utilisation"].get<double>() < 0.95);
  CHECK_FALSE(contains(run("plan --model resnet8 --workers 2 --ps-link 2.2/0.05 --draws 3").output, "the link is full"));
  // No standby (one worker): no replicas, null, nothing said.
  const auto one = run("plan --model resnet8 --workers 1 --ps-link 2.2/0.05 --draws 3 --json");
  CHECK(Json::parse(one.output)["replica_interval_updates"].is_null());
  CHECK(Json::parse(one.output)["ps_link_replica_share"].get<double>() == 0);
  CHECK_FALSE(contains(run("plan --model resnet8 --workers 1 --ps-link 2.2/0.05 --draws 3").output, "standby replicas'"));
}
