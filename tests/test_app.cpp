// App-level pieces without a process boundary: the price table, where workers' data cursors
// start after a resume, and snapshots that reuse the checkpoint writer's memory.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "app/checkpointing.hpp"
#include "app/cost.hpp"
#include "ckpt/async_writer.hpp"
#include "core/error.hpp"
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
  const ckpt::Checkpoint fresh = make_checkpoint(model, params, mom, stats, p, "{}");

  // A spare made from other values is overwritten in place: same memory, this state's values.
  FlatTensors other(model.params());
  ckpt::Checkpoint spare = make_checkpoint(model, other, other, stats, TrainProgress{}, "{}");
  const float* memory = spare.arrays[0].data.data();
  const ckpt::Checkpoint reused = make_checkpoint(model, params, mom, stats, p, "{}", std::move(spare));
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
      make_checkpoint(model, params, mom, stats, p, "{}", make_checkpoint(t2t, tp, tm, ts, p, "{}"));
  CHECK(rebuilt.arrays.size() == fresh.arrays.size());
  CHECK(rebuilt.arrays.back().path == fresh.arrays.back().path);

  // The writer hands back what it wrote and what it was given.
  ckpt::AsyncWriter writer(dir.path(), 0);
  CHECK(writer.take_spare().arrays.empty());
  writer.give_spare(make_checkpoint(model, params, mom, stats, p, "{}"));
  writer.submit(make_checkpoint(model, params, mom, stats, p, "{}", writer.take_spare()));
  writer.flush();
  CHECK(writer.take_spare().arrays.size() == fresh.arrays.size());
  const ckpt::Checkpoint back = ckpt::read(dir.path() / ckpt::file_name(4));
  for (const auto& a : fresh.arrays) {
    const ckpt::Array* b = back.find(a.path);
    REQUIRE(b);
    CHECK(b->data == a.data);
  }
}
