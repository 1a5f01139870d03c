// Virtual-clock runs (`train --virtual-workers N`, issue 19): the executable as a user runs it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/plan.hpp"
#include "app/train_virtual.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using mt::test::contains;
using mt::test::run;
using Json = nlohmann::json;

namespace {

std::vector<Json> events(const std::filesystem::path& file) {
  std::vector<Json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line));
  return out;
}

// Each progress event's training loss, in order.
std::vector<double> losses(const std::filesystem::path& file) {
  std::vector<double> out;
  for (const auto& e : events(file))
    if (e["event"] == "progress") out.push_back(e["loss"]);
  return out;
}

// Every event without the fields that measure real time.
std::vector<Json> without_real_time(std::vector<Json> ev) {
  for (auto& e : ev)
    for (const char* k : {"elapsed_seconds", "train_seconds", "eta_seconds"}) e.erase(k);
  return ev;
}

struct Data {
  mt::test::TempDir dir{"virtual"};
  std::string path = (dir.path() / "data").string();
  Data() { REQUIRE(run("gen-data " + path + " --train 512 --test 128 --seed 3").code == 0); }
};

}  // namespace

TEST_CASE("a virtual run of one worker is bit-identical to the single-process trainer", "[unit][virtual]") {
  Data d;
  const std::string common = "train --data " + d.path +
                             " --model resnet8 --batch-size 16 --train-steps 24 --threads 1 --log-every-steps 1 --seed 9"
                             " --augment on --lr 0.05 --metrics ";
  const auto one = d.dir.path() / "one.jsonl", virt = d.dir.path() / "virtual.jsonl";
  REQUIRE(run(common + one.string()).code == 0);
  // Plain momentum at the PS, as one process applies it (the default, dana, is Nesterov: below).
  const auto r = run(common + virt.string() + " --virtual-workers 1 --momentum-correction none");
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "virtual run: 1 worker(s)"));
  const auto a = events(one), b = events(virt);
  const auto la = losses(one), lb = losses(virt);
  REQUIRE(la.size() == 24);
  CHECK(la == lb);  // every step's loss, to the bit
  CHECK(a.back()["test_loss"] == b.back()["test_loss"]);
  CHECK(a.back()["test_accuracy"] == b.back()["test_accuracy"]);
  CHECK(b.back()["virtual"] == true);
  CHECK(b.back()["evidence"] == "E");
}

TEST_CASE("the default policy (dana) with one virtual worker is the single-process trainer with Nesterov momentum",
          "[unit][virtual]") {
  // One data slot, one momentum buffer: dana's update is Nesterov SGD, and --lr-scaling auto's
  // gap is zero (the parameters never move between a pull and its push), so nothing is penalized
  // (bench/README.md has what it does with more workers).
  Data d;
  const std::string common = "train --data " + d.path +
                             " --model resnet8 --batch-size 16 --train-steps 24 --threads 1 --log-every-steps 1 --seed 9"
                             " --lr 0.05 --metrics ";
  const auto one = d.dir.path() / "nesterov.jsonl", virt = d.dir.path() / "dana.jsonl";
  REQUIRE(run(common + one.string() + " --nesterov on").code == 0);
  const auto r = run(common + virt.string() + " --virtual-workers 1");
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "lr scaling gap, Nesterov momentum 0.9 per worker (dana)"));
  const auto la = losses(one), lb = losses(virt);
  REQUIRE(la.size() == 24);
  CHECK(la == lb);  // every step's loss, to the bit
  CHECK(events(virt).front()["momentum_correction"] == "dana");
  CHECK(events(virt).front()["lr_scaling"] == "gap");
  // auto is none with the other corrections.
  const auto implicit = run(common + (d.dir.path() / "implicit.jsonl").string() +
                            " --virtual-workers 2 --momentum-correction implicit");
  REQUIRE(implicit.code == 0);
  CHECK(contains(implicit.output, "lr scaling none, momentum 0.9 (applied with 2 workers: 0.400)"));
}

TEST_CASE("the default momentum (auto) with 8 virtual workers is --momentum 0.95, with 4 it is 0.9", "[unit][virtual]") {
  // bench/README.md measured 8 workers with --momentum 0.95 and 4 with 0.9 (the default
  // before --momentum auto); the default must run exactly those, step for step.
  Data d;
  const auto go = [&](const std::string& name, const std::string& flags) {
    const auto m = d.dir.path() / name;
    const auto r = run("train --data " + d.path +
                       " --model resnet8 --batch-size 8 --train-steps 40 --threads 1 --log-every-steps 4 --seed 5"
                       " --lr 0.05 --metrics " + m.string() + flags);
    REQUIRE(r.code == 0);
    return std::pair{r.output, without_real_time(events(m))};
  };
  const auto [auto8_out, auto8] = go("auto8.jsonl", " --virtual-workers 8");
  const auto [given8_out, given8] = go("given8.jsonl", " --virtual-workers 8 --momentum 0.95");
  CHECK(contains(auto8_out, "Nesterov momentum 0.95 per worker (dana; --momentum auto: 0.9, raised with 8 workers)"));
  CHECK(contains(given8_out, "Nesterov momentum 0.95 per worker (dana)"));
  CHECK(auto8.front()["momentum_auto"] == true);
  CHECK(given8.front()["momentum_auto"] == false);
  REQUIRE(auto8.size() == given8.size());
  for (std::size_t i = 1; i < auto8.size(); ++i) CHECK(auto8[i] == given8[i]);  // all but the config: to the bit
  CHECK(auto8[1]["momentum"] == 0.95);
  const auto [auto4_out, auto4] = go("auto4.jsonl", " --virtual-workers 4 --revoke rank=4@step=20");
  const auto [given4_out, given4] = go("given4.jsonl", " --virtual-workers 4 --revoke rank=4@step=20 --momentum 0.9");
  CHECK(contains(auto4_out, "Nesterov momentum 0.9 per worker (dana)"));
  REQUIRE(auto4.size() == given4.size());
  for (std::size_t i = 1; i < auto4.size(); ++i) CHECK(auto4[i] == given4[i]);
  // An explicit value is applied as given, whatever the worker count; bad values are refused.
  const auto [eight_out, eight] = go("eight.jsonl", " --virtual-workers 8 --momentum 0.9");
  CHECK(contains(eight_out, "Nesterov momentum 0.9 per worker (dana)"));
  CHECK(eight[1]["momentum"] == 0.9);
  const auto bad = run("train --data " + d.path + " --virtual-workers 2 --momentum fast");
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "--momentum: must be auto or a number, not 'fast'"));
  CHECK(contains(run("train --data " + d.path + " --virtual-workers 2 --momentum 1.5").output,
                 "must be between 0 and 1, not 1.5"));
}

TEST_CASE("two virtual runs with the same seed are bit-identical, revocations and joins included", "[unit][virtual]") {
  Data d;
  const auto go = [&](const std::string& name) {
    const auto m = d.dir.path() / name;
    const auto r = run("train --data " + d.path +
                       " --model resnet8 --batch-size 8 --train-steps 90 --threads 1 --log-every-steps 10 --seed 4"
                       " --virtual-workers 3 --worker-types k80,p100,v100 --revoke rank=2@step=20,rank=3@1s:TERM"
                       " --virtual-joins k80@step=50 --eval-every-steps 45 --metrics " +
                       m.string());
    REQUIRE(r.code == 0);
    return events(m);
  };
  const auto a = go("a.jsonl"), b = go("b.jsonl");
  CHECK(without_real_time(a) == without_real_time(b));
  const Json& s = a.back();
  CHECK(s["global_step"] == 90);
  CHECK(s["revocations"] == 2);
  CHECK(s["lost_workers"] == 1);
  CHECK(s["left_workers"] == 1);
  CHECK(s["joined_workers"] == 1);
  CHECK(s["workers_end"] == 2);
  int seen = 0;
  for (const auto& e : a) {
    if (e["event"] != "revocation") continue;
    ++seen;
    if (e["rank"] == 2) {  // SIGKILLed: noticed --failure-timeout later, by its silence
      CHECK(e["cause"] == "lost");
      CHECK(e["detected_by"] == "heartbeat");
      CHECK(contains(e["detail"].get<std::string>(), "--revoke at global step 20"));
      CHECK(e["global_step"].get<int>() > 20);
    } else {  // a notice: it pushed its last step and left
      CHECK(e["rank"] == 3);
      CHECK(e["cause"] == "notice");
    }
  }
  CHECK(seen == 2);
}

TEST_CASE("N equal workers: mean staleness N-1 in steady state", "[unit][virtual]") {
  Data d;
  for (const int n : {2, 4, 8}) {
    INFO(n << " workers");
    const auto m = d.dir.path() / std::to_string(n).append("-workers.jsonl");
    const auto r = run("train --data " + d.path +
                       " --model resnet8 --batch-size 8 --train-steps 160 --threads 1 --log-every-steps 40 --seed 2"
                       " --virtual-workers " +
                       std::to_string(n) + " --emulate-device k80 --metrics " + m.string());
    REQUIRE(r.code == 0);
    double staleness = 0, pushes = 0;
    for (const auto& e : events(m))
      if (e["event"] == "progress" && e["global_step"].get<int>() > 40)  // after the first window
        for (const auto& w : e["workers"]) {
          staleness += w["mean_staleness"].get<double>() * w["pushes"].get<double>();
          pushes += w["pushes"].get<double>();
        }
    CHECK(staleness / pushes == Approx(n - 1).margin(0.2));
  }
}

TEST_CASE("links, joins and the parameter server's update time", "[unit][virtual]") {
  const auto l = mt::parse_links("0.5/2", 3);
  REQUIRE(l.size() == 3);
  CHECK(l[2].seconds(1e6) == Approx(0.0005 + 8e6 / 2e9));
  CHECK(mt::parse_links("", 2)[0].latency_seconds == Approx(0.0001));
  const auto j = mt::parse_virtual_joins("k80@step=16000,p100@1.5h");
  REQUIRE(j.size() == 2);
  CHECK(j[0].step == 16000);
  CHECK(j[1].seconds == Approx(5400));
  CHECK(mt::default_ps_update_seconds(464154) == Approx(0.00011));
}

TEST_CASE("join warm-up (--join-warmup): after a join the rate ramps up from the old cluster's share", "[unit][virtual]") {
  Data d;
  const auto lr_at = [&](const std::string& warmup) {
    const auto m = d.dir.path() / ("warmup" + warmup + ".jsonl");
    const auto r = run("train --data " + d.path +
                       " --model resnet8 --batch-size 8 --train-steps 40 --threads 1 --log-every-steps 1 --seed 2"
                       " --lr-schedule constant --lr 0.1 --lr-scaling none --virtual-workers 1 --emulate-device k80"
                       " --virtual-joins k80@step=20 --join-warmup " +
                       warmup + " --metrics " + m.string());
    REQUIRE(r.code == 0);
    std::vector<double> lr(41, -1);
    for (const auto& e : events(m))
      if (e["event"] == "progress") lr[e["global_step"].get<std::size_t>()] = e["lr"].get<double>();
    return lr;
  };
  const auto ramp = lr_at("10");
  CHECK(ramp[20] == Approx(0.1));   // one worker: the schedule's rate
  CHECK(ramp[21] == Approx(0.05));  // the join at step 20: 1 of 2 workers' share
  CHECK(ramp[26] == Approx(0.075));
  CHECK(ramp[31] == Approx(0.1));   // ramped up after 10 steps
  CHECK(ramp[40] == Approx(0.1));
  const auto off = lr_at("0");
  CHECK(off[21] == Approx(0.1));
}

// `mpi_trainer plan` (issue 20): the cluster simulator without gradients, against closed forms.
namespace {

mt::PlanResult plan_of(const mt::PlanConfig& c) { return mt::run_plan(c); }

// The shipped K80 step with both messages of `model` on the default link (0.1 ms, 10 Gbit/s).
double k80_cycle(double params) { return 0.220 + 2 * (0.0001 + params * 4 * 8 / 10e9); }

}  // namespace

TEST_CASE("plan without revocations: N workers take steps x cycle / N while the parameter server keeps up",
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
    // Jitter (CV 2%) averages out over thousands of steps.
    CHECK(r.ideal_seconds == Approx(double(c.steps) * k80_cycle(params) / n).epsilon(0.01));
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
  // last replica while a worker outlives the parameter server.
  c.ps_standby = -1;
  c.replica_interval = 10;
  const auto sb = plan_of(c);
  double lost_sb = 0, beyond = 0;
  for (std::size_t i = 0; i < sb.restarts.size(); ++i) {
    CHECK(sb.restarts[i] <= t.restarts[i]);  // less to redo: never more restarts
    lost_sb += sb.lost_steps[i];
    beyond += sb.lost_steps[i] > 10 * sb.restarts[i] ? 1 : 0;  // every worker gone before the PS
  }
  CHECK(beyond <= 2);  // P(all 8 workers revoked first) < 0.4^8 per draw
  CHECK(lost_sb < lost / 10);
  // Under ULFM (--takeover) those losses are taken over in the job: no restart while the standby
  // is up, each a takeover of at most --replica-interval updates and --takeover-seconds.
  c.takeover = true;
  c.takeover_seconds = 0.2;
  const auto tk = plan_of(c);
  double took = 0, restarts_left = 0;
  for (std::size_t i = 0; i < tk.takeovers.size(); ++i) {
    took += tk.takeovers[i];
    restarts_left += tk.restarts[i];
    CHECK(tk.lost_steps[i] <= 10 * tk.takeovers[i] + 500 * tk.restarts[i]);
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
