// App-level pieces without a process boundary: the price table, where workers' data cursors
// start after a resume, snapshots that reuse the checkpoint writer's memory, and the fault
// injection's parsers (--revoke, revocation models), whole output lines, the progress line and
// the warning of a run that learned nothing, and the TensorBoard event files' encoding.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/checkpointing.hpp"
#include "plan/cost.hpp"
#include "app/learning_check.hpp"
#include "app/metrics.hpp"
#include "app/tensorboard.hpp"
#include "ckpt/async_writer.hpp"
#include "data/dataset.hpp"
#include "core/error.hpp"
#include "core/line_output.hpp"
#include "plan/revocation_model.hpp"
#include "ps/ps.hpp"
#include "plan/revocation_bands.hpp"
#include "test_util.hpp"

using namespace mt;

namespace {

std::string write_prices(const std::string& text) {
  static int n = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("mt_prices_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".txt");
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("the default price table is the paper's Table II, billed per second", "[unit][cost]") {
  const auto t = PriceTable::table2();
  CHECK(t.at("k80").on_demand == Approx(0.723));
  CHECK(t.at("v100").transient == Approx(0.861));
  CHECK(t.at("ps").transient == Approx(0.041));
  // One K80 for 90 minutes on demand, a PS for 10 seconds transient.
  CHECK(t.cost_usd("k80", false, 5400) == Approx(0.723 * 1.5));
  CHECK(t.cost_usd("ps", true, 10) == Approx(0.041 * 10 / 3600));
  CHECK_THROWS_WITH(t.at("a100"), Catch::Contains("unknown instance type 'a100'") && Catch::Contains("k80, p100, ps, v100"));
}

TEST_CASE("price files (--prices): spaces, commas, comments, header, bad lines named", "[unit][cost]") {
  const auto t = PriceTable::from_file(write_prices("# my cloud\ntype,on_demand,transient\na100, 3.0, 1.1\n\nh100\t5\t2  # spot\n"));
  CHECK(t.types() == std::vector<std::string>{"a100", "h100"});
  CHECK(t.at("h100").transient == Approx(2.0));
  CHECK_THROWS_AS(t.at("k80"), UsageError);
  const auto bad = [](const std::string& text, const std::string& what) {
    const auto path = write_prices(text);
    CHECK_THROWS_WITH(PriceTable::from_file(path), Catch::Contains(path) && Catch::Contains(what));
  };
  bad("a100 3.0\n", "line 1: expected 'TYPE ON_DEMAND TRANSIENT'");
  bad("a100 3.0 1 7\n", "line 1: expected");
  bad("# x\na100 three 1\n", "line 2: 'three' is not a price");
  bad("a100 -1 1\n", "'-1' is not a price");
  bad("a 1 1\na 2 2\n", "type 'a' is listed twice");
  bad("# nothing\n", "no prices in the file");
  CHECK_THROWS_AS(PriceTable::from_file("/nonexistent/prices.txt"), DataError);
  // "-": not offered that way; billing it is a usage error that says what to give instead.
  const auto spotless = PriceTable::from_file(write_prices("h100 6.98 -\n"));
  CHECK(spotless.per_hour("h100", false) == Approx(6.98));
  CHECK_THROWS_WITH(spotless.cost_usd("h100", true, 60),
                    Catch::Contains("'h100' is not offered as a transient (spot) server") &&
                        Catch::Contains("--pricing (or --ps-pricing) on-demand"));
  bad("a100 - x\n", "line 1: 'x' is not a price");
}

TEST_CASE("today's built-in price tables (--prices aws|gcp|azure): every row sourced, spot below on demand",
          "[unit][cost]") {
  for (const char* cloud : {"aws", "gcp", "azure"}) {
    INFO(cloud);
    const auto t = PriceTable::load(cloud);
    CHECK(t.source() == std::string(cloud) + " (built in: plan/prices_" + cloud + ".txt)");
    // A parameter server's type in each, and a spot price below the on-demand one wherever both exist.
    CHECK(t.per_hour("ps", true) < t.per_hour("ps", false));
    for (const auto& type : t.types()) {
      const auto& p = t.at(type);
      if (std::isfinite(p.transient) && std::isfinite(p.on_demand)) CHECK(p.transient < p.on_demand);
    }
  }
  CHECK(PriceTable::load("aws").at("t4").on_demand == Approx(0.526));    // g4dn.xlarge, us-east-1
  CHECK(PriceTable::load("gcp").at("a100").transient == Approx(1.92802));  // a2-highgpu-1g + one A100
  CHECK_THROWS_AS(PriceTable::load("gcp").per_hour("h100", false), UsageError);  // the catalog's figures disagree
  CHECK(PriceTable::load("table2").source() == "table2");
  CHECK_THROWS_WITH(PriceTable::load("oracle"), Catch::Contains("give aws, gcp, azure, or a table file"));
}

TEST_CASE("workers' data cursors after a resume", "[unit][ckpt]") {
  TrainProgress fresh;
  for (const auto& c : start_cursors(fresh, 3)) CHECK((c.epoch == 0 && c.position == 0));
  TrainProgress p;
  p.global_step = 100;
  p.worker_cursors = {{2, 14}, {2, 10}, {3, 0}};
  // Same worker count: each continues where it stopped.
  const auto same = start_cursors(p, 3);
  CHECK((same[0].epoch == 2 && same[0].position == 14 && same[1].position == 10 && same[2].epoch == 3));
  // Another count: the shards differ, so all start the epoch after the furthest one.
  for (const auto& c : start_cursors(p, 2)) CHECK((c.epoch == 3 && c.position == 0));
  p.worker_cursors = {{2, 14}, {4, 0}};
  for (const auto& c : start_cursors(p, 1)) CHECK((c.epoch == 4 && c.position == 0));
  // A single-process checkpoint: its one cursor.
  TrainProgress single;
  single.global_step = 50;
  single.epoch = 1;
  single.position = 7;
  CHECK(start_cursors(single, 1)[0].position == 7);
  CHECK(start_cursors(single, 2)[1].epoch == 2);
}

TEST_CASE("snapshots reuse the writer's spare checkpoints in place", "[unit][ckpt]") {
  test::TempDir dir("ckpt_spares");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mom(model.params()), stats(model.stats());
  model.init_params(params, stats, 3);
  TrainProgress p;
  p.global_step = 4;
  const ckpt::Checkpoint fresh = make_checkpoint(model, params, mom, stats, p, "{}", {});

  // A spare made from other values is overwritten in place: same memory, this state's values.
  FlatTensors other(model.params());
  ckpt::Checkpoint spare = make_checkpoint(model, other, other, stats, TrainProgress{}, "{}", {});
  const float* memory = spare.arrays[0].data.data();
  const ckpt::Checkpoint reused = make_checkpoint(model, params, mom, stats, p, "{}", {}, std::move(spare));
  CHECK(reused.arrays[0].data.data() == memory);
  REQUIRE(reused.arrays.size() == fresh.arrays.size());
  for (std::size_t i = 0; i < fresh.arrays.size(); ++i) {
    CHECK(reused.arrays[i].path == fresh.arrays[i].path);
    CHECK(reused.arrays[i].data == fresh.arrays[i].data);
  }
  CHECK(reused.ints == fresh.ints);

  // A checkpoint of another model is not reused: rebuilt with this model's arrays.
  const Model t2t(parse_model("resnet8-t2t"));
  FlatTensors tp(t2t.params()), tm(t2t.params()), ts(t2t.stats());
  const ckpt::Checkpoint rebuilt =
      make_checkpoint(model, params, mom, stats, p, "{}", {}, make_checkpoint(t2t, tp, tm, ts, p, "{}", {}));
  CHECK(rebuilt.arrays.size() == fresh.arrays.size());
  CHECK(rebuilt.arrays.back().path == fresh.arrays.back().path);

  // The writer hands back what it wrote and what it was given.
  ckpt::AsyncWriter writer(dir.path(), 0);
  CHECK(writer.take_spare().arrays.empty());
  writer.give_spare(make_checkpoint(model, params, mom, stats, p, "{}", {}));
  writer.submit(make_checkpoint(model, params, mom, stats, p, "{}", {}, writer.take_spare()));
  writer.flush();
  CHECK(writer.take_spare().arrays.size() == fresh.arrays.size());
  const ckpt::Checkpoint back = ckpt::read(dir.path() / ckpt::file_name(4));
  for (const auto& a : fresh.arrays) {
    const ckpt::Array* b = back.find(a.path);
    REQUIRE(b);
    CHECK(b->data == a.data);
  }
}

TEST_CASE("a checkpoint records its job and input; a resume of another job is refused", "[unit][ckpt]") {
  test::TempDir dir("ckpt_identity");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mom(model.params()), stats(model.stats());
  model.init_params(params, stats, 3);
  JobIdentity job;
  job.data = "cifar10 train=512 test=64 fingerprint=0123456789abcdef";
  job.batch_size = 8;
  job.lr_schedule = "step 0.1 x0.1 at 32000 48000";
  job.input_normalization = "channel-stats";
  job.input_mean = {0.5f, 0.25f, 0.125f};
  job.input_std = {0.2f, 0.3f, 0.4f};
  job.label_names = label_names("cifar10");
  TrainProgress p;
  p.global_step = 20;
  p.position = 20;
  p.worker_cursors = {{0, 12}, {1, 4}};
  ckpt::publish(dir.path(), make_checkpoint(model, params, mom, stats, p, "{}", job), 0);
  const ckpt::Checkpoint back = ckpt::read(dir.path() / ckpt::file_name(20));
  CHECK(back.strings.at("data") == job.data);
  CHECK(back.ints.at("batch_size") == 8);
  CHECK(back.strings.at("lr_schedule") == job.lr_schedule);
  CHECK(back.strings.at("input_normalization") == "channel-stats");
  CHECK(back.strings.at("input_mean") == "[0.5,0.25,0.125]");
  CHECK(nlohmann::json::parse(back.strings.at("label_names")).at(9) == "truck");

  std::ostringstream log;
  const ckpt::CheckpointState state = ckpt::decode(back);
  CHECK(state.job == job);
  CHECK_NOTHROW(check_same_job(state, "f.h5", job, {}, log));
  CHECK(log.str().empty());
  for (const std::string field : {"data", "batch_size", "lr_schedule"}) {
    JobIdentity other = job;
    if (field == "data") other.data = "fashion-mnist train=60000 test=10000 fingerprint=7e94c8c7de2bab3f";
    if (field == "batch_size") other.batch_size = 32;
    if (field == "lr_schedule") other.lr_schedule = "cosine 0.1 over 200 steps";
    CHECK_THROWS_WITH(check_same_job(state, "f.h5", other, {}, log),
                      Catch::Contains("f.h5 is of another job: its " + field) &&
                          Catch::Contains("--resume-override " + field));
    try {
      check_same_job(state, "f.h5", other, {}, log);
    } catch (const Error& e) {
      CHECK(e.exit_code() == kExitCheckpoint);
    }
    CHECK_NOTHROW(check_same_job(state, "f.h5", other, {field}, log));
    CHECK_THAT(log.str(), Catch::Contains("as --resume-override asks"));
  }
  // Written before these attributes existed: not checked, and said.
  ckpt::Checkpoint old = back;
  old.strings.erase("data");
  old.ints.erase("batch_size");
  old.strings.erase("lr_schedule");
  std::ostringstream old_log;
  CHECK_NOTHROW(check_same_job(ckpt::decode(old), "old.h5", job, {}, old_log));
  CHECK_THAT(old_log.str(), Catch::Contains("does not record its data, batch_size, lr_schedule"));

  CHECK(parse_resume_override("data,batch_size") == std::vector<std::string>{"data", "batch_size"});
  CHECK_THROWS_AS(parse_resume_override("model"), UsageError);
  CHECK_THROWS_WITH(parse_resume_override("batch"), Catch::Contains("use data, batch_size, lr_schedule"));

  // A resume at batch 32 with the override: the cursors point at the batch holding the same image.
  TrainConfig cfg;
  cfg.ckpt_dir = dir.path().string();
  cfg.resume_override = "batch_size";
  JobIdentity bigger = job;
  bigger.batch_size = 32;
  MetricsWriter none;
  const LrSchedule schedule = parse_schedule(cfg.lr_schedule, model.spec().kind == BlockKind::kPreActivation, cfg.lr,
                                             cfg.lr_warmup_steps, cfg.train_steps);
  const auto found = find_resume_checkpoint(cfg, model, bigger, schedule, none, log);
  REQUIRE(found);
  CHECK(found->state.progress.position == 5);
  CHECK(found->state.progress.worker_cursors == std::vector<std::array<std::int64_t, 2>>{{0, 3}, {1, 1}});
  CHECK(found->state.job.batch_size == 32);
  cfg.resume_override.clear();
  CHECK_THROWS_AS(find_resume_checkpoint(cfg, model, bigger, schedule, none, log), CheckpointError);
}

TEST_CASE("revocation entries of --revoke: times, steps, checkpoint writes, signals, bad ones named", "[unit][fault]") {
  const auto e = parse_revoke("rank=2@30s, rank=3@step=400,rank=1@1.5m:TERM,rank=4@2h:USR1,rank=0@ckpt=2");
  REQUIRE(e.size() == 5);
  CHECK(e[0].rank == 2);
  CHECK(e[0].seconds == Approx(30));
  CHECK(e[0].signal == SIGKILL);
  CHECK(e[1].rank == 3);
  CHECK(e[1].step == 400);
  CHECK(e[1].seconds < 0);
  CHECK(e[2].seconds == Approx(90));
  CHECK(e[2].signal == SIGTERM);
  CHECK(e[3].seconds == Approx(7200));
  CHECK(e[3].signal == SIGUSR1);
  CHECK(e[4].ckpt_write == 2);
  const auto t = parse_revoke("rank=2@takeover=1:TERM");
  REQUIRE(t.size() == 1);
  CHECK((t[0].takeover == 1 && t[0].signal == SIGTERM && t[0].step < 0 && t[0].seconds < 0));
  CHECK(parse_revoke("").empty());
  for (const char* bad : {"2@30s", "rank=2", "rank=x@30s", "rank=2@30", "rank=2@step=0", "rank=2@step=-3",
                          "rank=2@30s:HUP", "rank=1@ckpt=1", "rank=2@abc s", "rank=1@takeover=0", "rank=1@takeover="})
    CHECK_THROWS_AS(parse_revoke(bad), UsageError);
  try {
    parse_revoke("rank=2@30s:HUP");
  } catch (const UsageError& err) {
    CHECK_THAT(err.what(), Catch::Contains("rank=2@30s:HUP") && Catch::Contains("unknown signal"));
  }
}

TEST_CASE("the GCE revocation model: 20% within 2 h, 70% live the full 24 h and are revoked then, lifetimes invert it",
          "[unit][fault]") {
  const auto m = RevocationModel::load("gce");
  CHECK(m.fraction_by(0) == 0);
  CHECK(m.fraction_by(2) == Approx(0.20));
  CHECK(m.fraction_by(13) == Approx(0.25));
  CHECK(m.fraction_by(24) == Approx(0.30));  // then GCE's cap: the rest at once
  CHECK(m.fraction_by(24.001) == Approx(1.0));
  CHECK(m.fraction_by(100) == Approx(1.0));
  CHECK(m.fraction_by(1.5) == Approx(0.15));
  for (const double u : {0.0, 0.05, 0.2, 0.25, 0.29}) {
    const double h = m.lifetime_hours(u);
    REQUIRE(h >= 0);
    CHECK(h < 24);
    CHECK(m.fraction_by(h) == Approx(u).margin(1e-9));
  }
  for (const double u : {0.3, 0.5, 0.999}) CHECK(m.lifetime_hours(u) == Approx(24));
  // Sampled lifetimes follow the table: about 20% of draws end within 2 model hours, 70% at 24.
  int early = 0, capped = 0;
  const int n = 4000;
  for (int r = 0; r < n; ++r) {
    const double s = sampled_lifetime_seconds(m, 7, r, 3600.0);  // one model hour per second
    REQUIRE(s >= 0);
    REQUIRE(s <= 24.0 + 1e-9);
    early += s <= 2.0;
    capped += s >= 24.0 - 1e-9;
  }
  CHECK(double(early) / n == Approx(0.20).margin(0.03));
  CHECK(double(capped) / n == Approx(0.70).margin(0.03));
  CHECK(sampled_lifetime_seconds(m, 7, 3, 1.0) == sampled_lifetime_seconds(m, 7, 3, 1.0));
  // Another seed, other draws (70% of either are the 24 h cap: compare many ranks).
  int differ = 0;
  for (int r = 0; r < 20; ++r) differ += sampled_lifetime_seconds(m, 7, r, 1.0) != sampled_lifetime_seconds(m, 8, r, 1.0);
  CHECK(differ >= 3);
}

TEST_CASE("the GCE revocation model per GPU type: the paper's Table III revocation rates", "[unit][fault]") {
  // gce picks the instance type's table; an unknown type (the parameter server's) gets all types'.
  CHECK(RevocationModel::load("gce", "v100").fraction_by(1.23) == Approx(0.438));  // 14 of 32 V100 runs
  CHECK(RevocationModel::load("gce", "p100").fraction_by(1.5) == Approx(0.0625));  // 2 of 32 P100 runs
  CHECK(RevocationModel::load("gce", "k80").fraction_by(1) == Approx(0.08));
  CHECK(RevocationModel::load("gce-k80").source() == RevocationModel::load("gce", "k80").source());
  CHECK(RevocationModel::load("gce", "ps").source() == RevocationModel::load("gce").source());
  for (const char* type : {"k80", "p100", "v100"}) {
    const auto t = RevocationModel::load("gce", type);
    INFO(type);
    CHECK(t.fraction_by(24) < 1.0);
    CHECK(t.fraction_by(24.001) == Approx(1.0));  // GCE's 24 h cap
    CHECK(t.lifetime_hours(0.999) == Approx(24));
  }
  CHECK(RevocationModel::load("gce", "v100").fraction_by(2) > RevocationModel::load("gce", "k80").fraction_by(2));
}

TEST_CASE("the AWS V100 spot model from public traces: half revoked within 40 minutes, no 24 h cap", "[unit][fault]") {
  // plan/revocation_aws_v100.csv, written by bench/tables/spot_traces.py from skypilot-org/spot-traces
  // (202 revocations of p3.2xlarge in 4 zones, April 2023).
  const auto m = RevocationModel::load("aws-v100");
  CHECK(m.source() == "aws-v100 (built in: plan/revocation_aws_v100.csv)");
  CHECK(m.fraction_by(0.6578) == Approx(0.5098));
  CHECK(m.lifetime_hours(0.5) == Approx(0.65).epsilon(0.02));
  CHECK(m.fraction_by(2) == Approx(0.74).epsilon(0.02));
  CHECK(m.fraction_by(22.31) == Approx(1.0));  // the longest life seen: no cap of AWS's
  CHECK(m.fraction_by(0.5) > RevocationModel::load("gce", "v100").fraction_by(0.5));
}

TEST_CASE("AWS's interruption bands as a constant hazard: the band's upper edge revoked within a month", "[unit][fault]") {
  // 20% a month: 1 - 0.8^(t / 730) by t hours; half a month leaves sqrt(0.8).
  const auto m = monthly_hazard_model(0.2, "test");
  CHECK(m.fraction_by(730) == Approx(0.2).margin(1e-6));
  CHECK(m.fraction_by(365) == Approx(1 - std::sqrt(0.8)).margin(1e-6));
  CHECK(m.fraction_by(1) == Approx(1 - std::pow(0.8, 1.0 / 730)).margin(1e-6));
  CHECK(m.lifetime_hours(0.1) == Approx(730 * std::log(0.9) / std::log(0.8)).epsilon(1e-4));
  CHECK(m.fraction_by(8760) == Approx(1 - std::pow(0.8, 12)).margin(1e-6));
  CHECK(m.lifetime_hours(0.99) < 0);  // beyond the year the table covers: never revoked
  // Bands, with or without the %, and percentages.
  CHECK(RevocationModel::load("aws-band:<5%").fraction_by(730) == Approx(0.05).margin(1e-6));
  CHECK(RevocationModel::load("aws-band:5-10").fraction_by(730) == Approx(0.10).margin(1e-6));
  CHECK(RevocationModel::load("aws-band:15-20%").fraction_by(730) == Approx(0.20).margin(1e-6));
  CHECK(RevocationModel::load("aws-band:35%").fraction_by(730) == Approx(0.35).margin(1e-6));
  CHECK(RevocationModel::load("aws-band:10-15%").source().find("taken as 15% revoked a month") != std::string::npos);
  for (const char* bad : {"aws-band:>20%", "aws-band:x", "aws-band:0", "aws-band:100", "aws-band:", "aws-band:-5"})
    CHECK_THROWS_AS(RevocationModel::load(bad), UsageError);
  CHECK_THROWS_WITH(RevocationModel::load("aws-band:>20%"), Catch::Contains("no upper edge"));
}

TEST_CASE("aws-advisor: each type's band in its region, from plan/revocation_aws_bands.csv", "[unit][fault]") {
  // Rows of the table (AWS's feed as kept by alexei-led/spotinfo): g4dn.xlarge is 15-20% in
  // us-east-1 and 5-10% in eu-west-1; p4d.24xlarge 10-15% in us-east-1, >20% in us-west-2.
  const auto t4 = RevocationModel::load("aws-advisor", "t4");
  CHECK(t4.fraction_by(730) == Approx(0.20).margin(1e-6));
  CHECK(t4.source().find("g4dn.xlarge in us-east-1, AWS interruption band 15-20%") != std::string::npos);
  CHECK(RevocationModel::load("aws-advisor:eu-west-1", "t4").fraction_by(730) == Approx(0.10).margin(1e-6));
  CHECK(RevocationModel::load("aws-advisor", "a100x8").fraction_by(730) == Approx(0.15).margin(1e-6));
  // >20% has no edge: the measured lifetimes of a >20% type stand in, and the source says so.
  const auto a100 = RevocationModel::load("aws-advisor:us-west-2", "a100x8");
  CHECK(a100.fraction_by(0.6578) == Approx(RevocationModel::load("aws-v100").fraction_by(0.6578)));
  CHECK(a100.source().find("no upper edge, so the measured lifetimes of aws-v100") != std::string::npos);
  CHECK_THROWS_WITH(RevocationModel::load("aws-advisor", "k80"), Catch::Contains("no band for the device type 'k80'"));
  CHECK_THROWS_WITH(RevocationModel::load("aws-advisor:mars", "t4"), Catch::Contains("no region 'mars'"));
  // Bad rows are named by file and line.
  CHECK(parse_aws_bands("# c\nt4,g4dn.xlarge,r,<5%\n", "b.csv").size() == 1);
  CHECK_THROWS_WITH(parse_aws_bands("# c\nt4,g4dn.xlarge,r,7%\n", "b.csv"), Catch::Contains("b.csv:2:"));
  CHECK_THROWS_WITH(parse_aws_bands("t4,g4dn.xlarge,<5%\n", "b.csv"), Catch::Contains("b.csv:1: expected TYPE,"));
  CHECK_THROWS_WITH(parse_aws_bands("t4,g4dn.xlarge,r,5-10\n", "b.csv"), Catch::Contains("b.csv:1:"));
  CHECK_THROWS_AS(parse_aws_bands("# only comments\n", "b.csv"), DataError);
}

TEST_CASE("revocation model files: a fraction below 1 leaves survivors, bad tables named", "[unit][fault]") {
  const auto m = RevocationModel::parse("# comment\n0,0\n10,0.5\n", "t.csv");
  CHECK(m.lifetime_hours(0.25) == Approx(5));
  CHECK(m.lifetime_hours(0.7) < 0);  // never revoked
  // The same hour twice is a jump (every server left revoked at that age).
  const auto jump = RevocationModel::parse("0,0\n10,0.5\n10,1\n", "t.csv");
  CHECK(jump.lifetime_hours(0.8) == Approx(10));
  CHECK(jump.fraction_by(10.5) == Approx(1));
  for (const char* bad : {"0,0\n", "1,0\n2,0.5\n", "0,0\n2,0.5\n1,0.6\n", "0,0\n1,0.5\n2,0.4\n", "0,0\n1,1.5\n",
                          "0,0\nabc\n"})
    CHECK_THROWS_AS(RevocationModel::parse(bad, "t.csv"), DataError);
  try {
    RevocationModel::parse("0,0\nabc\n", "t.csv");
  } catch (const DataError& err) {
    CHECK_THAT(err.what(), Catch::Contains("t.csv:2"));
  }
  CHECK_THROWS_AS(RevocationModel::load("/nonexistent/model.csv"), DataError);
}

TEST_CASE("output lines leave in one write each, whichever thread builds them in pieces", "[unit][app]") {
  // A file opened O_APPEND by two writers: any write(2) of a part of a line would show up as a
  // line cut by the other thread's line.
  const mt::test::TempDir dir("line_output");
  const std::string path = (dir.path() / "out.txt").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  REQUIRE(fd >= 0);
  constexpr int kLines = 400;
  {
    std::ostream stream(nullptr);
    const mt::LineOutput lines(stream, fd);
    auto writer = [&stream](char who) {
      for (int i = 0; i < kLines; ++i) stream << who << ": line " << i << " of " << kLines << " " << 0.5 * i << '\n';
      stream << who << ": unfinished";
    };
    std::thread a(writer, 'a'), b(writer, 'b');
    a.join();
    b.join();
  }  // the unfinished lines go out at the end
  REQUIRE(::close(fd) == 0);
  std::ifstream in(path);
  std::map<char, int> next;
  std::string line;
  int unfinished = 0;
  while (std::getline(in, line)) {
    if (line.ends_with("unfinished")) {
      ++unfinished;
      continue;
    }
    std::ostringstream want;
    want << line[0] << ": line " << next[line[0]] << " of " << kLines << " " << 0.5 * next[line[0]];
    REQUIRE(line == want.str());
    ++next[line[0]];
  }
  CHECK(next['a'] == kLines);
  CHECK(next['b'] == kLines);
  CHECK(unfinished >= 1);  // "a: unfinishedb: unfinished" or two lines: both whole
}

TEST_CASE("a final evaluation at chance level is a warning naming the causes; a run that learned is not",
          "[unit][app]") {
  TrainConfig c;
  c.train_steps = 200;
  // The dead network of issue 42: 8.3% with 4 asynchronous workers.
  const std::string w = learned_nothing_warning(0.083, 2.3026, 10, c, 4);
  CHECK(w.find("test accuracy 8.3% is chance level for 10 classes") != std::string::npos);
  CHECK(w.find("learned nothing") != std::string::npos);
  CHECK(w.find("4 asynchronous workers") != std::string::npos);
  CHECK(w.find("--lr-warmup-steps") != std::string::npos);
  CHECK(w.find("--train-steps 200") != std::string::npos);
  CHECK(learned_nothing_warning(0.1, 2.3, 10, c, 1).find("asynchronous") == std::string::npos);
  CHECK(!learned_nothing_warning(0.149, 2.2, 10, c, 1).empty());  // below 1.5 x chance
  CHECK(learned_nothing_warning(0.15, 2.2, 10, c, 1).empty());
  CHECK(learned_nothing_warning(0.749, 0.68, 10, c, 3).empty());   // the quickstart
  CHECK(learned_nothing_warning(std::nan(""), 0, 10, c, 3).empty());  // not evaluated
  // The summary always has the list; an entry only when there is a warning.
  nlohmann::ordered_json summary{{"event", "summary"}};
  add_warnings(summary, "");
  CHECK(summary["warnings"] == nlohmann::ordered_json::array());
  add_warnings(summary, w);
  REQUIRE(summary["warnings"].size() == 1);
  CHECK(summary["warnings"][0] == w);
}

TEST_CASE("a progress line carries one time estimate: the caller's live prediction", "[unit][app]") {
  const std::string line = format_progress(ProgressLine{200, 2000, 0.6123, 0.781, 0.1, 420.3, 1, 0.0});
  CHECK(line == "step 200/2000  loss 0.6123  train_acc 0.781  lr 0.1000  img/s 420.3  workers 1  staleness 0.0");
  CHECK(format_eta(310) == "0:05:10");
}

TEST_CASE("TensorBoard event files: CRC-32C, TFRecord framing, scalars from the metrics events", "[unit][tensorboard]") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the standard check value of CRC-32C
  CHECK(crc32c("") == 0u);
  const test::TempDir dir("tb");
  std::string path;
  {
    MetricsWriter w("", (dir.path() / "tb").string());
    CHECK(w.enabled());
    w.write(nlohmann::ordered_json{{"event", "progress"}, {"global_step", 300}, {"loss", 1.5}, {"lr", 0.1},
                                   {"active_workers", 2}, {"predicted_cost_usd", nullptr},
                                   {"workers", {{{"rank", 1}, {"images_per_second", 80.0}, {"mean_staleness", 1.0}}}}});
    w.write(nlohmann::ordered_json{{"event", "checkpoint"}, {"global_step", 300}});  // no scalars: no record
    path = std::filesystem::directory_iterator(dir.path() / "tb")->path().string();
  }
  CHECK(path.find("events.out.tfevents.") != std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  for (std::size_t at = 0; at < bytes.size();) {
    REQUIRE(at + 12 <= bytes.size());
    std::uint64_t n = 0;
    std::uint32_t crc = 0;
    std::memcpy(&n, bytes.data() + at, 8);
    std::memcpy(&crc, bytes.data() + at + 8, 4);
    CHECK(crc == masked_crc32c(bytes.substr(at, 8)));
    REQUIRE(at + 16 + n <= bytes.size());
    records.push_back(bytes.substr(at + 12, n));
    std::memcpy(&crc, bytes.data() + at + 12 + n, 4);
    CHECK(crc == masked_crc32c(records.back()));
    at += 16 + n;
  }
  REQUIRE(records.size() == 2);  // the file version, then one event of the progress line's scalars
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  const std::string& e = records[1];
  CHECK(e[9] == 0x10);  // after the wall time: the step, a varint (300 = 0xAC 0x02)
  CHECK(static_cast<unsigned char>(e[10]) == 0xAC);
  CHECK(e[11] == 0x02);
  for (const char* tag : {"train/loss", "train/lr", "workers/active", "worker/1/images_per_second", "worker/1/staleness"})
    CHECK(e.find(tag) != std::string::npos);
  CHECK(e.find("cost/predicted_usd") == std::string::npos);  // null: not known yet, no point
  const auto scalars = tensorboard_scalars(nlohmann::ordered_json{{"event", "eval"}, {"test_accuracy", 0.75}});
  REQUIRE(scalars.size() == 1);
  CHECK(scalars[0].first == "test/accuracy");
  CHECK(scalars[0].second == Approx(0.75));
}
