// The checkpoint's schema (ckpt/state.hpp) without the trainer or MPI: a CheckpointState with every
// field set goes through encode, a published file, read and decode and comes back whole; the file
// holds exactly the documented arrays and attributes; older and damaged checkpoints decode as
// documented.
#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <set>

#include "ckpt/checkpoint.hpp"
#include "ckpt/state.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace mt;
namespace fs = std::filesystem;

namespace {

// The state's array values live here (a deque: adding one moves none of the others).
struct Buffers {
  std::deque<std::vector<float>> storage;
  float next = 0.5f;
  // An array of these dims whose values no other array shares.
  ckpt::NamedArray array(const std::string& name, Dims dims) {
    auto& v = storage.emplace_back(static_cast<std::size_t>(product(dims)));
    for (auto& x : v)
      x = next += 0.25f;
    return {name, std::move(dims), v};
  }
  ckpt::ArrayGroup group(const std::string& tag) {
    return {array("stem.conv." + tag, {4, 3, 3, 3}), array("stage1.block1.conv1.weight", {4, 4, 3, 3}),
            array("fc.bias", {10})};
  }
};

ckpt::CheckpointState full_state(Buffers& b) {
  ckpt::CheckpointState s;
  s.model = "resnet8-t2t";
  s.param_count = 123456;
  s.progress = {
      /*global_step=*/4321,    /*epoch=*/7,         /*position=*/19,
      /*train_seconds=*/86.25, /*cost_usd=*/0.0625,
      /*attempts=*/3,          /*lr=*/0.0375,       /*worker_cursors=*/{{7, 19}, {6, 388}, {8, 0}}};
  s.job.data = "fashion-mnist train=60000 test=10000 fingerprint=7e94c8c7de2bab3f";
  s.job.batch_size = 96;
  s.job.lr_schedule = "cosine 0.4 over 120000 steps, warmup 100";
  s.job.input_normalization = "channel-stats";
  s.job.input_mean = {0.4914f, 0.4822f, 0.4465f};
  s.job.input_std = {0.247f, 0.2435f, 0.2616f};
  s.job.label_names = {"T-shirt/top", "say \"cheese\"", "héllo", "back\\slash"};
  s.config_json = R"({"event":"config","lr":0.4})";
  s.written_by = "worker rank 2";
  s.created_unix = 1790000000.125;
  s.params = {b.array("stem.conv.weight", {16, 3, 7, 7}), b.array("stage1.block1.conv1.weight", {32, 16, 3, 3}),
              b.array("fc.bias", {10})};
  s.momentum = b.group("m");
  s.bn_stats = {b.array("stem.bn.running_mean", {16}), b.array("stem.bn.running_var", {16})};
  s.slot_momenta = {b.group("s0"), b.group("s1")};
  s.gap_mean_step = b.group("g");
  return s;
}

void same_group(const ckpt::ArrayGroup& back, const ckpt::ArrayGroup& sent, const std::string& what) {
  INFO(what);
  REQUIRE(back.size() == sent.size());
  for (const auto& a : sent) {
    INFO(a.name);
    const ckpt::NamedArray* b = ckpt::find(back, a.name);
    REQUIRE(b);
    CHECK(b->dims == a.dims);
    CHECK(std::equal(b->values.begin(), b->values.end(), a.values.begin(), a.values.end()));
  }
}

void same_state(const ckpt::CheckpointState& back, const ckpt::CheckpointState& sent) {
  CHECK(back.model == sent.model);
  CHECK(back.param_count == sent.param_count);
  CHECK(back.progress == sent.progress);
  CHECK(back.job == sent.job);
  CHECK(back.config_json == sent.config_json);
  CHECK(back.written_by == sent.written_by);
  CHECK(back.created_unix == sent.created_unix);
  same_group(back.params, sent.params, "params");
  same_group(back.momentum, sent.momentum, "momentum");
  same_group(back.bn_stats, sent.bn_stats, "bn_stats");
  REQUIRE(back.slot_momenta.size() == sent.slot_momenta.size());
  for (std::size_t j = 0; j < sent.slot_momenta.size(); ++j)
    same_group(back.slot_momenta[j], sent.slot_momenta[j], "slot " + std::to_string(j));
  REQUIRE(back.gap_mean_step.has_value() == sent.gap_mean_step.has_value());
  if (sent.gap_mean_step) same_group(*back.gap_mean_step, *sent.gap_mean_step, "gap_mean_step");
}

template <class Map>
std::set<std::string> keys(const Map& m) {
  std::set<std::string> k;
  for (const auto& [name, v] : m)
    k.insert(name);
  return k;
}

}  // namespace

TEST_CASE("the checkpoint schema round trip: every field of a state comes back from its file", "[unit][ckpt]") {
  test::TempDir dir("ckpt_state_rt");
  Buffers b;
  const ckpt::CheckpointState sent = full_state(b);
  const fs::path file = ckpt::publish(dir.path(), ckpt::encode(sent), 0);
  CHECK(file.filename() == ckpt::file_name(4321));
  // Handed over: the state keeps the checkpoint it views, and so do its copies.
  ckpt::CheckpointState back = ckpt::decode(ckpt::read(file));
  REQUIRE(back.storage);
  const ckpt::CheckpointState copy = back;
  back = {};
  same_state(copy, sent);
}

TEST_CASE("the checkpoint schema: the documented arrays and attributes, with their names and types", "[unit][ckpt]") {
  Buffers b;
  const ckpt::CheckpointState s = full_state(b);
  const ckpt::Checkpoint c = ckpt::encode(s);
  CHECK(c.global_step == 4321);
  CHECK(c.model == "resnet8-t2t");
  CHECK(c.param_count == 123456);
  CHECK(c.epoch == 7);
  CHECK(c.created_unix == 1790000000.125);
  CHECK(c.config_json == s.config_json);
  CHECK(keys(c.ints) == std::set<std::string>{"attempts", "batch_size", "data_cursor_epoch", "data_cursor_position",
                                              "gap_mean_step", "slot_momenta", "workers"});
  CHECK(keys(c.reals) == std::set<std::string>{"cost_usd", "lr", "train_seconds"});
  CHECK(keys(c.strings) == std::set<std::string>{"data", "data_cursors", "input_mean", "input_normalization",
                                                 "input_std", "label_names", "lr_schedule", "written_by"});
  CHECK(c.ints.at("data_cursor_epoch") == 7);
  CHECK(c.ints.at("data_cursor_position") == 19);
  CHECK(c.ints.at("workers") == 3);
  CHECK(c.ints.at("slot_momenta") == 2);
  CHECK(c.ints.at("gap_mean_step") == 1);
  CHECK(c.strings.at("data_cursors") == "[[7,19],[6,388],[8,0]]");
  // Each float widened to a double, in nlohmann_json's shortest round-trip form (as before: ee87e23's files).
  CHECK(c.strings.at("input_mean") == "[0.49140000343322754,0.4821999967098236,0.4465000033378601]");
  CHECK(c.strings.at("label_names") == R"(["T-shirt/top","say \"cheese\"","héllo","back\\slash"])");
  // Every array under its group, dots as slashes, in the order written.
  std::vector<std::string> paths;
  for (const auto& a : c.arrays)
    paths.push_back(a.path);
  CHECK(paths == std::vector<std::string>{
                     "params/stem/conv/weight", "params/stage1/block1/conv1/weight", "params/fc/bias",
                     "optimizer/momentum/stem/conv/m", "optimizer/momentum/stage1/block1/conv1/weight",
                     "optimizer/momentum/fc/bias", "bn_stats/stem/bn/running_mean", "bn_stats/stem/bn/running_var",
                     "optimizer/slot_momentum/0/stem/conv/s0", "optimizer/slot_momentum/0/stage1/block1/conv1/weight",
                     "optimizer/slot_momentum/0/fc/bias", "optimizer/slot_momentum/1/stem/conv/s1",
                     "optimizer/slot_momentum/1/stage1/block1/conv1/weight", "optimizer/slot_momentum/1/fc/bias",
                     "optimizer/gap_mean_step/stem/conv/g", "optimizer/gap_mean_step/stage1/block1/conv1/weight",
                     "optimizer/gap_mean_step/fc/bias"});
  CHECK(c.arrays[0].dims == Dims{16, 3, 7, 7});

  // The optional parts absent: their attributes are not written, and decode says absent.
  ckpt::CheckpointState plain = s;
  plain.progress.worker_cursors.clear();
  plain.slot_momenta.clear();
  plain.gap_mean_step.reset();
  plain.written_by.clear();
  const ckpt::Checkpoint p = ckpt::encode(plain);
  for (const char* k : {"workers", "slot_momenta", "gap_mean_step"})
    CHECK(p.ints.count(k) == 0);
  for (const char* k : {"data_cursors", "written_by"})
    CHECK(p.strings.count(k) == 0);
  CHECK(p.arrays.size() == 8);
  same_state(ckpt::decode(p), plain);
}

TEST_CASE("the checkpoint schema: reused in place, older checkpoints decoded, damaged ones refused", "[unit][ckpt]") {
  Buffers b;
  const ckpt::CheckpointState s = full_state(b);
  ckpt::Checkpoint spare = ckpt::encode(s);
  const float* memory = spare.arrays.back().data.data();
  const ckpt::Checkpoint reused = ckpt::encode(s, std::move(spare));
  CHECK(reused.arrays.back().data.data() == memory);
  ckpt::CheckpointState other = s;
  other.gap_mean_step.reset();
  CHECK(ckpt::encode(other, ckpt::encode(s)).arrays.size() == reused.arrays.size() - 3);

  // Written before the job's attributes, the counters and the cursors' list existed.
  ckpt::Checkpoint old = ckpt::encode(s);
  for (const char* k : {"attempts", "batch_size", "workers"})
    old.ints.erase(k);
  for (const char* k : {"cost_usd", "lr", "train_seconds"})
    old.reals.erase(k);
  for (const char* k : {"data", "data_cursors", "lr_schedule", "input_normalization", "input_mean", "input_std",
                        "label_names", "written_by"})
    old.strings.erase(k);
  const ckpt::CheckpointState o = ckpt::decode(old);
  CHECK(o.job == ckpt::JobIdentity{});
  CHECK(o.progress.attempts == 1);
  CHECK(o.progress.train_seconds == 0);
  CHECK(o.progress.worker_cursors.empty());
  CHECK(o.progress.position == 19);
  CHECK(o.written_by.empty());

  const auto refused = [&](ckpt::Checkpoint c, const std::string& needle) {
    INFO(needle);
    CHECK_THROWS_WITH(ckpt::decode(c), Catch::Contains(needle));
    CHECK_THROWS_AS(ckpt::decode(c), CheckpointError);
  };
  ckpt::Checkpoint bad = ckpt::encode(s);
  bad.ints.erase("data_cursor_position");
  refused(bad, "lacks attribute data_cursor_position");
  bad = ckpt::encode(s);
  bad.strings["data_cursors"] = "[[1,2],[3]]";
  refused(bad, "data_cursors is not a list of [epoch, position]");
  bad = ckpt::encode(s);
  bad.strings["input_std"] = "[1,2]";
  refused(bad, "input_std is not 3 numbers");
  bad = ckpt::encode(s);
  bad.strings["label_names"] = "airplane";
  refused(bad, "label_names is not a list of strings");
  bad = ckpt::encode(s);
  std::erase_if(bad.arrays, [](const ckpt::Array& a) { return a.path.starts_with("optimizer/slot_momentum/1/"); });
  refused(bad, "records 2 slot momenta (--momentum-correction dana) but holds 1");
  // The gap-aware mean steps recorded but gone: an empty group, which a restore finds lacking.
  bad = ckpt::encode(s);
  std::erase_if(bad.arrays, [](const ckpt::Array& a) { return a.path.starts_with("optimizer/gap_mean_step/"); });
  const ckpt::CheckpointState lacking = ckpt::decode(bad);
  REQUIRE(lacking.gap_mean_step);
  CHECK(lacking.gap_mean_step->empty());
}
