// Internal to mt_ckpt: the HDF5 plumbing that writing and reading share (checked calls, owned
// identifiers, scalar attributes), the reserved attribute names and the content CRC.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "ckpt/checkpoint.hpp"

namespace mt::ckpt::detail {

namespace fs = std::filesystem;

// Reserved root attributes (docs/checkpoint-format.md); everything else in `/` is a user attribute.
constexpr const char* kAttrFormat = "format_version";
constexpr const char* kAttrStep = "global_step";
constexpr const char* kAttrModel = "model";
constexpr const char* kAttrParamCount = "param_count";
constexpr const char* kAttrEpoch = "epoch";
constexpr const char* kAttrCreated = "created_unix";
constexpr const char* kAttrConfig = "config";
constexpr const char* kAttrCrc = "content_crc32";

// HDF5 prints its error stack by default; we report our own messages instead. The setting is
// per thread in a thread-safe HDF5 (Debian's is): every thread that calls HDF5 turns it off.
void quiet_hdf5();
// The innermost HDF5 error description, for messages.
std::string hdf5_error();

// Owns one HDF5 identifier.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&&) = delete;
  Handle(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  hid_t get() const { return id_; }
  // Closes now and reports failure (closing a file flushes it).
  bool close() {
    const herr_t r = id_ >= 0 ? closer_(id_) : 0;
    id_ = -1;
    return r >= 0;
  }

 private:
  hid_t id_;
  Closer closer_;
};


// Checks an HDF5 return value; failures name the checkpoint file and the operation.
hid_t check(hid_t id, const fs::path& file, const std::string& what);

// Every attribute and array in a canonical order (maps and sorted paths).
std::uint32_t content_crc(const Checkpoint& c, double created_unix);

// Writes a scalar attribute: created in a new file (`create`), rewritten in a kept one.
void put_attr(hid_t loc, const fs::path& file, const std::string& name, hid_t mem_type, hid_t file_type,
              const void* value, bool create);
// Variable-length UTF-8: h5py returns it as a Python str.
void put_string_attr(hid_t loc, const fs::path& file, const std::string& name, const std::string& v, bool create);

struct AttrValue {
  enum class Kind { kInt, kReal, kString } kind = Kind::kInt;
  std::int64_t i = 0;
  double r = 0;
  std::string s;
};
AttrValue read_attr(hid_t attr, const fs::path& file, const std::string& name);

// The step of a checkpoint file's name (ckpt-NNNNNNNNNN.h5), or nothing for another name.
std::optional<std::int64_t> step_of(const std::string& name);

}  // namespace mt::ckpt::detail
