// HDF5 checkpoints: round trip, atomic publish, retention, every kind of damage, fallback to the
// previous good checkpoint, refusing to overwrite, and bit-exact resume of training.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>
#include <sstream>

#include "app/checkpointing.hpp"
#include "app/train.hpp"
#include "ckpt/async_writer.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/state.hpp"
#include "core/atomic_file.hpp"
#include "ps/exchange/snapshot.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "test_util.hpp"

using namespace mt;
using test::sample_checkpoint;
namespace fs = std::filesystem;

namespace {

// Byte offset of a dataset's (single) chunk in the file.
haddr_t chunk_address(const fs::path& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  haddr_t addr = 0;
  hsize_t size = 0;
  const hid_t space = H5Dget_space(d);
  REQUIRE(H5Dget_chunk_info(d, space, 0, nullptr, nullptr, &addr, &size) >= 0);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return addr;
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(io);
  io.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  io.read(&b, 1);
  b = static_cast<char>(b ^ 0x5a);
  io.seekp(static_cast<std::streamoff>(offset));
  io.write(&b, 1);
}

// Rewrites an int64 root attribute in place, as a careless tool would.
void overwrite_int_attribute(const fs::path& file, const char* name, std::int64_t v) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  REQUIRE(a >= 0);
  REQUIRE(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
  H5Aclose(a);
  H5Fclose(f);
}

std::string reason(const fs::path& file) {
  const auto r = ckpt::verify(file);
  CHECK_FALSE(r.ok);
  return r.reason;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("checkpoint round trip keeps every attribute and array exactly", "[unit][ckpt]") {
  test::TempDir dir("ckpt_rt");
  const auto c = sample_checkpoint(1234);
  ckpt::PublishStats st;
  const fs::path file = ckpt::publish(dir.path(), c, 0, &st);
  CHECK(file.filename() == "ckpt-0000001234.h5");
  CHECK(st.bytes > 0);
  const auto r = ckpt::read(file);
  CHECK(r.global_step == 1234);
  CHECK(r.model == "resnet8");
  CHECK(r.epoch == 3);
  CHECK(r.created_unix > 1.7e9);
  CHECK(r.config_json == c.config_json);
  CHECK(r.ints == c.ints);
  CHECK(r.reals == c.reals);
  CHECK(r.strings == c.strings);
  REQUIRE(r.arrays.size() == 2);
  for (const auto& a : c.arrays) {
    const auto* b = r.find(a.path);
    REQUIRE(b);
    CHECK(b->dims == a.dims);
    CHECK(b->data == a.data);
  }
  std::ifstream latest(dir.path() / "LATEST");
  std::string name;
  latest >> name;
  CHECK(name == "ckpt-0000001234.h5");
  for (const auto& e : fs::directory_iterator(dir.path())) CHECK_FALSE(e.path().string().ends_with(".tmp"));
}

TEST_CASE("Fletcher32 is HDF5's own: the checksum its filter appended to a chunk", "[unit][ckpt]") {
  test::TempDir dir("ckpt_fletcher");
  const fs::path file = dir.path() / "f.h5";
  for (const std::size_t bytes : {2ul, 3ul, 720ul, 721ul, 722ul, 4000ul, 100003ul}) {
    INFO(bytes << " bytes");
    std::vector<unsigned char> v(bytes);
    for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(i * 7919 % 251 + (i % 3 ? 200 : 0));
    if (bytes == 722) std::fill(v.begin(), v.end(), 0xff);  // the folds' edge: sums of 0xffff words
    const hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(f >= 0);
    const hsize_t dims[1] = {bytes};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_chunk(dcpl, 1, dims) >= 0);
    REQUIRE(H5Pset_fletcher32(dcpl) >= 0);
    const hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_UCHAR, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
    const hsize_t origin[1] = {0};
    hsize_t size = 0;
    REQUIRE(H5Dget_chunk_storage_size(d, origin, &size) >= 0);
    REQUIRE(size == bytes + 4);
    std::vector<unsigned char> raw(size);
    std::uint32_t mask = 0;
    REQUIRE(H5Dread_chunk(d, H5P_DEFAULT, origin, &mask, raw.data()) >= 0);
    const std::uint32_t stored = raw[bytes] | raw[bytes + 1] << 8 | raw[bytes + 2] << 16 | std::uint32_t(raw[bytes + 3]) << 24;
    CHECK(ckpt::hdf5_fletcher32(v.data(), bytes) == stored);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
}

TEST_CASE("the metadata checksum is HDF5's own, so files built in memory publish valid", "[unit][ckpt]") {
  // lookup3's published answers, and the checksum of a superblock HDF5 wrote itself.
  CHECK(ckpt::hdf5_metadata_checksum("", 0) == 0xdeadbeefu);
  CHECK(ckpt::hdf5_metadata_checksum("Four score and seven years ago", 30) == 0x17770551u);
  test::TempDir dir("ckpt_lookup3");
  const fs::path native = dir.path() / "native.h5";
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  REQUIRE(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) >= 0);
  const hid_t f = H5Fcreate(native.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  REQUIRE(f >= 0);
  H5Fclose(f);
  H5Pclose(fapl);
  std::ifstream in(native, std::ios::binary);
  std::vector<unsigned char> b(64);
  in.read(reinterpret_cast<char*>(b.data()), 64);
  REQUIRE(b[8] >= 2);  // superblock version 2 or 3: checksummed
  const std::size_t len = 12 + 4 * std::size_t(b[9]);
  const std::uint32_t stored = b[len] | b[len + 1] << 8 | b[len + 2] << 16 | std::uint32_t(b[len + 3]) << 24;
  CHECK(ckpt::hdf5_metadata_checksum(b.data(), len) == stored);
  // A published checkpoint (built in memory) opens in HDF5 itself.
  const fs::path published = ckpt::publish(dir.path(), sample_checkpoint(7), 0);
  CHECK(H5Fis_hdf5(published.c_str()) > 0);
  const hid_t g = H5Fopen(published.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(g >= 0);
  if (g >= 0) H5Fclose(g);
}

TEST_CASE("checkpoints of one layout rewrite the kept in-memory file and read back exactly", "[unit][ckpt]") {
  test::TempDir dir("ckpt_kept");
  const auto same = [](const ckpt::Checkpoint& a, const ckpt::Checkpoint& b) {
    CHECK(b.global_step == a.global_step);
    CHECK(b.model == a.model);
    CHECK(b.config_json == a.config_json);
    CHECK(b.ints == a.ints);
    CHECK(b.reals == a.reals);
    CHECK(b.strings == a.strings);
    REQUIRE(b.arrays.size() == a.arrays.size());
    for (const auto& x : a.arrays) {
      const auto* y = b.find(x.path);
      REQUIRE(y);
      CHECK(y->dims == x.dims);
      CHECK(y->data == x.data);
    }
  };
  std::vector<std::pair<ckpt::Checkpoint, fs::path>> written;
  std::uintmax_t first_bytes = 0;
  for (std::int64_t step = 1; step <= 60; ++step) {
    auto c = sample_checkpoint(step);
    c.model = step % 2 ? "resnet8" : "resnet8-long-name";  // a string that changes length
    c.ints["data_cursor_position"] = step * 100;
    c.reals["train_seconds"] = 0.5 * double(step);
    c.strings["data_cursors"] = std::string("[") + std::to_string(step * 1000) + "]";
    c.arrays[1].data[2] = float(step) * 3;
    if (step == 30) c.arrays.push_back({"params/extra", {2}, {9, 8}});  // another layout: built afresh
    if (step == 31) c.strings["another"] = "x";  // and 32 is back to the first layout
    ckpt::PublishStats st;
    const fs::path f = ckpt::publish(dir.path(), c, 0, &st);
    INFO("step " << step);
    // The first of a layout is built, the next ones written into it.
    CHECK(st.rewritten == !(step == 1 || step == 30 || step == 31 || step == 32));
    if (step == 1) first_bytes = fs::file_size(f);
    // Rewritten strings leave old heap objects: bounded, the file is built afresh past 1/8 more.
    CHECK(fs::file_size(f) <= first_bytes + first_bytes / 8 + 4096);
    REQUIRE(ckpt::verify(f).ok);
    written.emplace_back(std::move(c), f);
  }
  for (const auto& [c, f] : written) {
    INFO(f);
    same(c, ckpt::read(f));
    const hid_t h = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(h >= 0);
    if (h >= 0) H5Fclose(h);
  }
}

TEST_CASE("retention keeps the newest checkpoints and the writer thread publishes in order",
          "[unit][ckpt]") {
  test::TempDir dir("ckpt_keep");
  {
    ckpt::AsyncWriter w(dir.path(), 2);
    for (int s = 1; s <= 5; ++s) {
      w.submit(sample_checkpoint(s * 10));
      w.flush();
    }
    CHECK(w.take_written().size() == 5);
  }
  const auto files = ckpt::list(dir.path());
  REQUIRE(files.size() == 2);
  CHECK(files[0].filename() == "ckpt-0000000050.h5");
  CHECK(files[1].filename() == "ckpt-0000000040.h5");
}

TEST_CASE("two threads write checkpoints of the same step: each keeps its own in-memory image", "[unit][ckpt]") {
  // A standby that takes the parameter server over writes its replica at step S from its main
  // thread; the writer thread may then checkpoint step S too (a notice at once). HDF5 refused the
  // second in-memory file under the name the first thread's image still held open.
  test::TempDir dir("ckpt_two_threads");
  ckpt::publish(dir.path(), sample_checkpoint(30), 0);
  {
    ckpt::AsyncWriter w(dir.path(), 0);
    w.submit(sample_checkpoint(30));
    w.flush();
    const auto written = w.take_written();
    REQUIRE(written.size() == 1);
    CHECK(written[0].error.empty());
  }
  ckpt::publish(dir.path(), sample_checkpoint(40), 0);  // the main thread's image, reused
  CHECK(ckpt::list(dir.path()).size() == 2);
}

TEST_CASE("retention counts only checkpoints that verify: a damaged one never pushes out a valid one",
          "[unit][ckpt][fault]") {
  // Issue 17, defect 1: 10..40 written, 30 and 40 damaged on disk, a run resumed from 20 writes
  // 25 with --ckpt-keep 2. Before: 10 and 20 deleted, the damaged 30 and 40 kept, one valid left.
  test::TempDir dir("ckpt_keep_damaged");
  for (int s = 10; s <= 40; s += 10) ckpt::publish(dir.path(), sample_checkpoint(s), 0);
  const fs::path c30 = dir.path() / "ckpt-0000000030.h5", c40 = dir.path() / "ckpt-0000000040.h5";
  fs::resize_file(c30, fs::file_size(c30) / 2);
  flip_byte(c40, chunk_address(c40, "params/stage1/block1/conv1/weight") + 1);
  REQUIRE_FALSE(ckpt::verify(c30).ok);
  REQUIRE_FALSE(ckpt::verify(c40).ok);
  ckpt::publish(dir.path(), sample_checkpoint(25), 2);
  std::vector<std::string> names;
  for (const auto& f : ckpt::list(dir.path())) names.push_back(f.filename().string());
  CHECK(names == std::vector<std::string>{"ckpt-0000000040.h5", "ckpt-0000000030.h5", "ckpt-0000000025.h5",
                                          "ckpt-0000000020.h5"});
  CHECK(ckpt::verify(dir.path() / "ckpt-0000000020.h5").ok);
  const auto found = ckpt::load_latest_valid(dir.path(), {}, nullptr);
  REQUIRE(found);
  CHECK(found->checkpoint.global_step == 25);
  // --ckpt-keep 1: the newest valid one and the one just written stay, whatever the steps say.
  ckpt::publish(dir.path(), sample_checkpoint(22), 1);
  names.clear();
  for (const auto& f : ckpt::list(dir.path())) names.push_back(f.filename().string());
  CHECK(names == std::vector<std::string>{"ckpt-0000000040.h5", "ckpt-0000000030.h5", "ckpt-0000000025.h5",
                                          "ckpt-0000000022.h5"});
}

TEST_CASE("damaged checkpoints are detected with a clear reason", "[unit][ckpt]") {
  test::TempDir dir("ckpt_damage");
  const fs::path good = ckpt::publish(dir.path(), sample_checkpoint(10), 0);
  const fs::path bad = ckpt::publish(dir.path(), sample_checkpoint(20), 0);
  const auto bytes = fs::file_size(bad);
  // The damaged newest is passed over for the previous good one, which is untouched.
  auto expect_fallback = [&] {
    std::vector<std::string> skipped;
    const auto found = ckpt::load_latest_valid(dir.path(), {}, &skipped);
    REQUIRE(found);
    CHECK(found->file == good);
    CHECK(found->checkpoint.global_step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(has(skipped[0], "ckpt-0000000020.h5"));
  };

  SECTION("truncated file") {
    fs::resize_file(bad, bytes / 2);
    CHECK(has(reason(bad), "truncated or damaged"));
    expect_fallback();
  }
  SECTION("one flipped byte in a weight's data: Fletcher32") {
    flip_byte(bad, chunk_address(bad, "params/stage1/block1/conv1/weight") + 5);
    CHECK(has(reason(bad), "Fletcher32"));
    expect_fallback();
  }
  SECTION("one flipped byte anywhere in the file") {
    // Every byte position that still parses must fail a checksum; sample positions.
    int detected = 0, tried = 0;
    for (std::uint64_t off = 0; off < bytes; off += bytes / 37 + 1) {
      fs::copy_file(good, dir.path() / "probe.h5", fs::copy_options::overwrite_existing);
      const fs::path probe = dir.path() / "probe.h5";
      flip_byte(probe, off);
      const auto r = ckpt::verify(probe);
      ++tried;
      // A flip in unused space changes nothing a reader sees: then it must read back identical.
      if (r.ok) {
        const auto a = ckpt::read(probe), b = ckpt::read(good);
        CHECK(a.arrays[0].data == b.arrays[0].data);
        CHECK(a.ints == b.ints);
      } else {
        ++detected;
      }
    }
    INFO(detected << " of " << tried << " flips detected");
    CHECK(detected > 0);
  }
  SECTION("wrong format_version") {
    overwrite_int_attribute(bad, "format_version", 99);
    CHECK(has(reason(bad), "format_version 99"));
    expect_fallback();
  }
  SECTION("an attribute edited behind our back: content checksum") {
    overwrite_int_attribute(bad, "global_step", 21);
    CHECK(has(reason(bad), "content checksum mismatch"));
    expect_fallback();
  }
  SECTION("leftover .tmp of an interrupted write is ignored") {
    std::ofstream(dir.path() / "ckpt-0000000030.h5.tmp") << "partial";
    CHECK(ckpt::list(dir.path()).front().filename() == "ckpt-0000000020.h5");
    CHECK(ckpt::load_latest_valid(dir.path(), {}, nullptr)->checkpoint.global_step == 20);
  }
}

TEST_CASE("dana's momentum per data slot is checkpointed and resumed exactly, or from the mean", "[unit][ckpt]") {
  test::TempDir dir("ckpt_slots");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mean(model.params()), stats(model.stats());
  model.init_params(params, stats, 1);
  std::vector<FlatTensors> slots;
  for (int j = 0; j < 2; ++j) {
    slots.emplace_back(model.params());
    float* v = slots.back().flat().data();
    for (std::int64_t i = 0; i < slots.back().flat().numel(); ++i) v[i] = static_cast<float>((j + 1) * (i % 7));
  }
  mean_momentum(slots, mean);
  TrainProgress p;
  p.global_step = 11;
  const auto file = ckpt::publish(dir.path(), make_checkpoint(model, params, mean, stats, p, "{}", {}, {}, ExtraOptimizerState{slots}), 0);
  const ckpt::Checkpoint c = ckpt::read(file);
  CHECK(c.find(ckpt::array_path("optimizer/slot_momentum/1", model.params().entries().front().name)) != nullptr);
  // As many slots: each its own, to the bit.
  const ckpt::CheckpointState s = ckpt::decode(c);
  FlatTensors rp(model.params()), rm(model.params()), rs(model.stats());
  restore_checkpoint(s, model, rp, rm, rs);
  std::vector<FlatTensors> back;
  for (int j = 0; j < 2; ++j) back.emplace_back(model.params());
  restore_slot_momenta(s, rm, back);
  for (int j = 0; j < 2; ++j)
    CHECK(std::equal(back[j].span().begin(), back[j].span().end(), slots[static_cast<std::size_t>(j)].span().begin()));
  // Another number of slots (a resume with more workers): every slot starts from the mean.
  std::vector<FlatTensors> three;
  for (int j = 0; j < 3; ++j) three.emplace_back(model.params());
  restore_slot_momenta(s, rm, three);
  for (const auto& t : three) CHECK(std::equal(t.span().begin(), t.span().end(), mean.span().begin()));
  CHECK(c.ints.at("slot_momenta") == 2);
}

TEST_CASE("a dana checkpoint with a slot momentum missing or misshapen is refused with the array named",
          "[unit][ckpt]") {
  test::TempDir dir("ckpt_slots_bad");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mean(model.params()), stats(model.stats());
  model.init_params(params, stats, 1);
  std::vector<FlatTensors> slots;
  for (int j = 0; j < 2; ++j) slots.emplace_back(model.params());
  TrainProgress p;
  p.global_step = 12;
  ckpt::Checkpoint c = make_checkpoint(model, params, mean, stats, p, "{}", {}, {}, ExtraOptimizerState{slots});
  std::vector<FlatTensors> back;
  for (int j = 0; j < 2; ++j) back.emplace_back(model.params());
  const auto& entries = model.params().entries();
  const auto erase = [&](const std::string& path) {
    const auto it = std::find_if(c.arrays.begin(), c.arrays.end(), [&](const ckpt::Array& a) { return a.path == path; });
    REQUIRE(it != c.arrays.end());
    c.arrays.erase(it);
  };
  const auto refused = [&](const std::string& needle) {
    try {
      restore_slot_momenta(ckpt::decode(c), mean, back);
      FAIL("restored a damaged checkpoint");
    } catch (const CheckpointError& e) {
      INFO(e.what());
      CHECK(has(e.what(), needle));
    }
  };
  SECTION("one layer of slot 1 missing") {
    erase(ckpt::array_path("optimizer/slot_momentum/1", entries.back().name));
    refused("lacks /" + ckpt::array_path("optimizer/slot_momentum/1", entries.back().name));
  }
  SECTION("slot 1 missing entirely") {
    for (const auto& e : entries) erase(ckpt::array_path("optimizer/slot_momentum/1", e.name));
    refused("records 2 slot momenta (--momentum-correction dana) but holds 1");
  }
  SECTION("a layer of slot 0 with another shape") {
    for (auto& a : c.arrays)
      if (a.path == ckpt::array_path("optimizer/slot_momentum/0", entries.front().name)) a.dims = {a.dims.front()};
    refused("has shape");
  }
}

TEST_CASE("the gap-aware mean steps are checkpointed and resumed exactly, start afresh from a checkpoint without "
          "them, and are refused when damaged", "[unit][ckpt]") {
  test::TempDir dir("ckpt_gap");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mom(model.params()), stats(model.stats()), gap(model.params());
  model.init_params(params, stats, 1);
  float* c0 = gap.flat().data();
  for (std::int64_t i = 0; i < gap.flat().numel(); ++i) c0[i] = 1e-4f * static_cast<float>(1 + i % 13);
  TrainProgress p;
  p.global_step = 13;
  const auto file =
      ckpt::publish(dir.path(), make_checkpoint(model, params, mom, stats, p, "{}", {}, {}, ExtraOptimizerState{{}, &gap}), 0);
  ckpt::Checkpoint c = ckpt::read(file);
  CHECK(c.ints.at("gap_mean_step") == 1);
  CHECK(c.ints.count("slot_momenta") == 0);
  FlatTensors back(model.params());
  CHECK(restore_gap_mean_step(ckpt::decode(c), back));
  CHECK(std::equal(back.span().begin(), back.span().end(), gap.span().begin()));
  // Written under another policy: nothing to restore, every mean step zero (no history).
  const ckpt::Checkpoint plain = make_checkpoint(model, params, mom, stats, p, "{}", {});
  CHECK_FALSE(restore_gap_mean_step(ckpt::decode(plain), back));
  CHECK(std::all_of(back.span().begin(), back.span().end(), [](float x) { return x == 0.f; }));
  // Recorded but a layer missing: damage, named.
  const std::string path = ckpt::array_path("optimizer/gap_mean_step", model.params().entries().back().name);
  const auto it = std::find_if(c.arrays.begin(), c.arrays.end(), [&](const ckpt::Array& a) { return a.path == path; });
  REQUIRE(it != c.arrays.end());
  c.arrays.erase(it);
  try {
    restore_gap_mean_step(ckpt::decode(c), back);
    FAIL("restored a damaged checkpoint");
  } catch (const CheckpointError& e) {
    INFO(e.what());
    CHECK(has(e.what(), "lacks /" + path));
  }
}

TEST_CASE("a checkpoint of another model is refused and the previous one used", "[unit][ckpt]") {
  test::TempDir dir("ckpt_model");
  const Model model(parse_model("resnet8"));
  FlatTensors params(model.params()), mom(model.params()), stats(model.stats());
  model.init_params(params, stats, 1);
  TrainProgress p;
  p.global_step = 5;
  ckpt::publish(dir.path(), make_checkpoint(model, params, mom, stats, p, "{}", {}), 0);
  const Model other(parse_model("resnet8-t2t"));
  FlatTensors op(other.params()), om(other.params()), os(other.stats());
  p.global_step = 9;
  ckpt::publish(dir.path(), make_checkpoint(other, op, om, os, p, "{}", {}), 0);
  std::vector<std::string> skipped;
  const auto found = ckpt::load_latest_valid(
      dir.path(), [&](const ckpt::Checkpoint& c) { check_compatible(ckpt::decode(c), model); }, &skipped);
  REQUIRE(found);
  CHECK(found->checkpoint.global_step == 5);
  REQUIRE(skipped.size() == 1);
  CHECK(has(skipped[0], "model 'resnet8-t2t'"));
}

namespace {

TrainConfig small_run(const fs::path& data, const fs::path& ckpt_dir, std::int64_t steps) {
  TrainConfig cfg;
  cfg.data = data.string();
  cfg.model = "resnet8";
  cfg.batch_size = 16;
  cfg.train_steps = steps;
  // These tests stop a run early with a shorter --train-steps, which would move a default
  // schedule's boundaries (they scale with the run): given, one after the resume point.
  cfg.lr_schedule = "step:15,25";
  cfg.threads = 2;
  cfg.device = "cpu";
  cfg.quiet = true;
  cfg.ckpt_dir = ckpt_dir.string();
  return cfg;
}

}  // namespace

TEST_CASE("resume is bit-exact: 20 steps straight equal 10, checkpoint, resume, 10",
          "[unit][ckpt]") {
  test::TempDir dir("ckpt_resume");
  write_synthetic_cifar10(dir.path() / "data", 256, 64, 5);
  std::ostringstream log;
  train(small_run(dir.path() / "data", dir.path() / "a", 20), log);
  train(small_run(dir.path() / "data", dir.path() / "b", 10), log);
  const TrainResult r = train(small_run(dir.path() / "data", dir.path() / "b", 20), log);
  CHECK(r.global_step == 20);
  const auto a = ckpt::read(dir.path() / "a" / ckpt::file_name(20));
  const auto b = ckpt::read(dir.path() / "b" / ckpt::file_name(20));
  CHECK(b.ints.at("attempts") == 2);
  CHECK(a.ints.at("data_cursor_position") == b.ints.at("data_cursor_position"));
  REQUIRE(a.arrays.size() == b.arrays.size());
  int differing = 0;
  for (const auto& x : a.arrays) {
    const auto* y = b.find(x.path);
    REQUIRE(y);
    if (x.data != y->data) {
      ++differing;
      UNSCOPED_INFO("differs: " << x.path);
    }
  }
  CHECK(differing == 0);
}

TEST_CASE("a run never overwrites checkpoints it cannot resume", "[unit][ckpt]") {
  test::TempDir dir("ckpt_guard");
  write_synthetic_cifar10(dir.path() / "data", 128, 32, 5);
  std::ostringstream log;
  train(small_run(dir.path() / "data", dir.path() / "c", 2), log);
  auto cfg = small_run(dir.path() / "data", dir.path() / "c", 4);
  cfg.resume = "never";
  CHECK_THROWS_AS(train(cfg, log), CheckpointError);
  cfg.resume = "auto";
  cfg.model = "resnet8-t2t";  // every checkpoint there is of another model
  CHECK_THROWS_AS(train(cfg, log), CheckpointError);
  CHECK(ckpt::verify(dir.path() / "c" / ckpt::file_name(2)).ok);
}
