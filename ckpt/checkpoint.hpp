// Durable training checkpoints in HDF5 (docs/checkpoint-format.md).
//
// One file per checkpoint, `ckpt-<global_step, 10 digits>.h5`. Every array is a chunked dataset
// with HDF5's Fletcher32 filter; a CRC-32 over all arrays and attributes (`content_crc32`) also
// catches damage Fletcher32 cannot see (attributes, a flipped byte in metadata that still
// parses). Publishing is atomic: write `*.tmp`, close, fsync, rename, fsync the directory, then
// replace `LATEST` the same way, then delete checkpoints beyond the newest `keep`. A reader
// never sees a half-written checkpoint under its final name.
//
// Depends on mt_core and HDF5 only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace mt::ckpt {

inline constexpr std::int64_t kFormatVersion = 1;

// One dataset: `path` relative to the file root, e.g. "params/stage2/block3/conv1/weight".
struct Array {
  std::string path;
  Dims dims;
  std::vector<float> data;
};

struct Checkpoint {
  std::int64_t global_step = 0;
  std::string model;
  std::int64_t param_count = 0;
  std::int64_t epoch = 0;
  double created_unix = 0;       // set by publish() when 0
  std::string config_json = "{}";
  std::map<std::string, std::int64_t> ints;     // data cursors, counters
  std::map<std::string, double> reals;          // schedule state
  std::map<std::string, std::string> strings;   // RNG states and the like
  std::vector<Array> arrays;

  const Array* find(const std::string& path) const;
};

// "ckpt-0000001234.h5"
std::string file_name(std::int64_t global_step);

struct PublishStats {
  double write_seconds = 0;    // the HDF5 file built in memory, written and fsync'ed
  double sync_seconds = 0;     // rename, fsync of the directory, LATEST (retention not included)
  double image_seconds = 0;    // of write_seconds: the HDF5 file built in memory
  double durable_seconds = 0;  // from the start to durable under its final name (renamed, the
                               // directory fsync'ed); LATEST comes after
  std::int64_t bytes = 0;
  // Written into the in-memory file of the thread's previous checkpoint of the same layout, the
  // arrays copied straight into it (false: the file was built from scratch).
  bool rewritten = false;
};

// Writes `c` into `dir` (created if missing) and publishes it atomically, then applies retain().
// Returns the final path. Throws CheckpointError. `before_rename`, when set, runs once the file is
// durable under its temporary name, right before it gets its final one: an exception from it
// (PsSuperseded: a fenced parameter server) removes the temporary file and publishes nothing.
std::filesystem::path publish(const std::filesystem::path& dir, const Checkpoint& c, int keep,
                              PublishStats* stats = nullptr, const std::function<void()>& before_rename = {});

// The parameter-server epoch of a checkpoint directory (docs/checkpoint-format.md, "Epochs"): the
// file `ps-epoch`, one decimal number and a newline, written atomically (0600). Each parameter server
// that starts on the directory, and each that takes a lost one's place inside the job, takes the next
// number; one whose number is no longer the newest has been superseded and publishes nothing.
// 0 when the file is missing; throws CheckpointError when it cannot be read or parsed.
std::int64_t read_ps_epoch(const std::filesystem::path& dir);
// Takes the next epoch (the file's + 1), durably; returns it. Throws CheckpointError.
std::int64_t claim_ps_epoch(const std::filesystem::path& dir);

// Retention: keeps the newest `keep` checkpoints that verify (0: all), counting `written` (the one
// just published, never removed); removes every checkpoint older than those, valid or not.
// Damaged ones newer than the oldest kept one do not count and are left for inspection. So a
// damaged file never takes the place of a valid one, and the newest valid one always stays.
void retain(const std::filesystem::path& dir, int keep, const std::filesystem::path& written);

// HDF5's metadata checksum (Bob Jenkins' lookup3 hashlittle, initial value 0) of `length` bytes.
std::uint32_t hdf5_metadata_checksum(const void* data, std::size_t length);

// HDF5's Fletcher32 filter checksum (H5Z fletcher32: big-endian 16-bit words, folded every 360
// words) of `length` bytes, as the filter appends it (little-endian) to each chunk.
std::uint32_t hdf5_fletcher32(const void* data, std::size_t length);

// Fault injection (`--revoke rank=0@ckpt=N`): called in the middle of every checkpoint write,
// with half of the arrays written and the file not yet closed. None by default.
// An empty function removes it. Called on the writing thread.
using MidWriteHook = std::function<void(std::int64_t global_step)>;
void set_mid_write_hook(MidWriteHook hook);

// Reads and fully verifies a checkpoint (HDF5 structure, Fletcher32 of every dataset, the
// content CRC, the format version). Throws CheckpointError naming the file and the problem.
Checkpoint read(const std::filesystem::path& file);

// read(), but first in a forked child process that must finish in time (10 s plus 1 s per 10 MB
// of file; $MT_CKPT_READ_SECONDS sets it): a file that crashes libhdf5 or makes it loop (a damaged
// or hostile file, found by bench/fuzz.sh) is a CheckpointError naming it, not a dead or hung
// trainer (ckpt/contained.cpp). For files that may come from elsewhere: resume, eval, export,
// `ckpt verify` and `ckpt inspect`.
Checkpoint read_contained(const std::filesystem::path& file);

struct VerifyReport {
  bool ok = false;
  std::string reason;  // empty when ok
  std::int64_t global_step = -1;
  std::string model;
};
VerifyReport verify(const std::filesystem::path& file);
VerifyReport verify_contained(const std::filesystem::path& file);  // with read_contained

// Published checkpoints in `dir`, newest (highest step) first; `*.tmp` and other files ignored.
std::vector<std::filesystem::path> list(const std::filesystem::path& dir);

// The newest checkpoint that reads, verifies and passes `accept` (which throws CheckpointError to
// reject, e.g. another model). Each one passed over is described in `skipped`. Empty when none.
struct Loaded {
  Checkpoint checkpoint;
  std::filesystem::path file;
};
std::optional<Loaded> load_latest_valid(const std::filesystem::path& dir,
                                        const std::function<void(const Checkpoint&)>& accept,
                                        std::vector<std::string>* skipped);

// A human-readable description (attributes, arrays with shapes) for `ckpt inspect`.
std::string describe(const Checkpoint& c);

}  // namespace mt::ckpt
