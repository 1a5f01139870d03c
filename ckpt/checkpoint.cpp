#include "ckpt/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace mt::ckpt {

namespace fs = std::filesystem;

namespace {

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
void quiet_hdf5() {
  thread_local const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

// The innermost HDF5 error description, for messages.
std::string hdf5_error() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (n == 0 && e->desc) *s = e->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "unknown HDF5 error" : msg;
}

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
hid_t check(hid_t id, const fs::path& file, const std::string& what) {
  if (id < 0) throw CheckpointError(file.string() + ": " + what + ": " + hdf5_error());
  return id;
}

// ---------------------------------------------------------------- content CRC

struct Crc {
  uLong value = crc32(0L, Z_NULL, 0);
  void add(const void* p, std::size_t n) {
    const auto* b = static_cast<const Bytef*>(p);
    while (n > 0) {
      const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
      value = crc32(value, b, chunk);
      b += chunk;
      n -= chunk;
    }
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }
  template <class T>
  void add_value(T v) {
    add(&v, sizeof v);
  }
};

// Every attribute and array in a canonical order (maps and sorted paths).
std::uint32_t content_crc(const Checkpoint& c, double created_unix) {
  Crc crc;
  crc.add(std::string(kAttrStep));
  crc.add_value(c.global_step);
  crc.add(std::string(kAttrModel));
  crc.add(c.model);
  crc.add(std::string(kAttrParamCount));
  crc.add_value(c.param_count);
  crc.add(std::string(kAttrEpoch));
  crc.add_value(c.epoch);
  crc.add(std::string(kAttrCreated));
  crc.add_value(created_unix);
  crc.add(std::string(kAttrConfig));
  crc.add(c.config_json);
  for (const auto& [k, v] : c.ints) crc.add(k), crc.add_value(v);
  for (const auto& [k, v] : c.reals) crc.add(k), crc.add_value(v);
  for (const auto& [k, v] : c.strings) crc.add(k), crc.add(v);
  std::vector<const Array*> arrays;
  for (const auto& a : c.arrays) arrays.push_back(&a);
  std::sort(arrays.begin(), arrays.end(), [](auto* a, auto* b) { return a->path < b->path; });
  for (const Array* a : arrays) {
    crc.add(a->path);
    for (auto d : a->dims) crc.add_value(d);
    crc.add(a->data.data(), a->data.size() * sizeof(float));
  }
  return static_cast<std::uint32_t>(crc.value);
}

// ---------------------------------------------------------------- attributes

// Writes a scalar attribute: created in a new file (`create`), rewritten in a kept one.
void put_attr(hid_t loc, const fs::path& file, const std::string& name, hid_t mem_type, hid_t file_type,
              const void* value, bool create) {
  hid_t id = -1;
  if (create) {
    Handle space(check(H5Screate(H5S_SCALAR), file, "H5Screate"), H5Sclose);
    id = check(H5Acreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), file,
               "create attribute " + name);
  } else {
    id = check(H5Aopen(loc, name.c_str(), H5P_DEFAULT), file, "open attribute " + name);
  }
  Handle attr(id, H5Aclose);
  check(H5Awrite(attr.get(), mem_type, value), file, "write attribute " + name);
}

// Variable-length UTF-8: h5py returns it as a Python str.
void put_string_attr(hid_t loc, const fs::path& file, const std::string& name, const std::string& v, bool create) {
  Handle type(check(H5Tcopy(H5T_C_S1), file, "H5Tcopy"), H5Tclose);
  check(H5Tset_size(type.get(), H5T_VARIABLE), file, "H5Tset_size");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), file, "H5Tset_cset");
  const char* p = v.c_str();
  put_attr(loc, file, name, type.get(), type.get(), &p, create);
}

struct AttrValue {
  enum class Kind { kInt, kReal, kString } kind = Kind::kInt;
  std::int64_t i = 0;
  double r = 0;
  std::string s;
};

AttrValue read_attr(hid_t attr, const fs::path& file, const std::string& name) {
  Handle type(check(H5Aget_type(attr), file, "type of attribute " + name), H5Tclose);
  AttrValue v;
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER:
      v.kind = AttrValue::Kind::kInt;
      check(H5Aread(attr, H5T_NATIVE_INT64, &v.i), file, "read attribute " + name);
      break;
    case H5T_FLOAT:
      v.kind = AttrValue::Kind::kReal;
      check(H5Aread(attr, H5T_NATIVE_DOUBLE, &v.r), file, "read attribute " + name);
      break;
    case H5T_STRING: {
      v.kind = AttrValue::Kind::kString;
      if (H5Tis_variable_str(type.get()) > 0) {
        Handle mem(check(H5Tcopy(H5T_C_S1), file, "H5Tcopy"), H5Tclose);
        check(H5Tset_size(mem.get(), H5T_VARIABLE), file, "H5Tset_size");
        check(H5Tset_cset(mem.get(), H5Tget_cset(type.get())), file, "H5Tset_cset");
        char* p = nullptr;
        check(H5Aread(attr, mem.get(), &p), file, "read attribute " + name);
        if (p) {
          v.s = p;
          H5free_memory(p);
        }
      } else {
        const std::size_t n = H5Tget_size(type.get());
        std::string buf(n, '\0');
        check(H5Aread(attr, type.get(), buf.data()), file, "read attribute " + name);
        v.s = buf.c_str();
      }
      break;
    }
    default:
      throw CheckpointError(file.string() + ": attribute " + name + " has an unsupported type");
  }
  return v;
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<std::int64_t> step_of(const std::string& name) {
  // ckpt-NNNNNNNNNN.h5
  if (name.size() != 18 || !name.starts_with("ckpt-") || !name.ends_with(".h5")) return std::nullopt;
  const std::string digits = name.substr(5, 10);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

// Set once before training, read by the writer thread at each write.
std::mutex g_hook_mutex;
MidWriteHook g_mid_write_hook;

void mid_write(std::int64_t global_step) {
  MidWriteHook hook;
  {
    std::lock_guard<std::mutex> lock(g_hook_mutex);
    hook = g_mid_write_hook;
  }
  if (hook) hook(global_step);
}

// The superblock of a file image HDF5 1.10.8 hands out (H5Fget_file_image) has its "open for
// write" flag cleared but keeps the checksum computed with the flag set, so HDF5 and h5py refuse
// the file ("incorrect metadata checksum"). Superblock versions 2 and 3 end with a metadata
// checksum of the bytes before it: recompute it.
void fix_superblock_checksum(std::vector<char>& image) {
  if (image.size() < 12 || std::memcmp(image.data(), "\x89HDF\r\n\x1a\n", 8) != 0)
    throw CheckpointError("in-memory HDF5 image without an HDF5 signature");
  const auto version = static_cast<unsigned char>(image[8]);
  if (version < 2) return;  // older superblocks carry no checksum
  const std::size_t offsets = static_cast<unsigned char>(image[9]);
  const std::size_t len = 12 + 4 * offsets;  // signature, version, sizes, flags, four addresses
  if (image.size() < len + 4) throw CheckpointError("in-memory HDF5 image shorter than its superblock");
  const std::uint32_t sum = hdf5_metadata_checksum(image.data(), len);
  for (int i = 0; i < 4; ++i) image[len + static_cast<std::size_t>(i)] = static_cast<char>((sum >> (8 * i)) & 0xff);
}

// The layout of a checkpoint: every attribute's name and kind, every array's path and shape. Two
// checkpoints with the same layout differ only in values, so the second can be written into the
// in-memory file of the first.
std::string layout_of(const Checkpoint& c) {
  std::string key;
  const auto add = [&key](const std::string& s) { key.append(s).push_back('\0'); };
  for (const auto& [k, v] : c.ints) add("i" + k);
  for (const auto& [k, v] : c.reals) add("r" + k);
  for (const auto& [k, v] : c.strings) add("s" + k);
  for (const auto& a : c.arrays) {
    add("a" + a.path);
    for (auto d : a.dims) add(std::to_string(d));
  }
  return key;
}

// The in-memory HDF5 file of the writing thread's previous checkpoint, kept open: a checkpoint
// with the same layout (every periodic one of a run) rewrites its attributes and datasets in place
// instead of creating ~260 datasets again (HDF5's object creation was most of the build).
struct OpenImage {
  OpenImage(std::string l, hid_t f) : layout(std::move(l)), file(f, H5Fclose) {}
  std::string layout;
  Handle file;
  std::vector<Handle> datasets;                // c.arrays' order; closed before the file
  // Each array's chunk in the image: its offset and size (the floats, then Fletcher32). Empty when
  // HDF5 laid a chunk out otherwise than expected: the datasets are then written through HDF5.
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  std::map<std::string, std::string> strings;  // string attributes as last written
  std::size_t built_bytes = 0;                 // the image's size when the file was created
};
thread_local std::unique_ptr<OpenImage> t_open;

void fill_file(OpenImage& img, const Checkpoint& c, double created_unix, const fs::path& name, bool create);

// Where each array's chunk lies in a freshly built image. Empty (no direct writes) unless every
// chunk is one unfiltered-masked block of the array's floats plus 4 checksum bytes, inside the
// image, holding the array's values with the checksum this code computes.
std::vector<std::pair<std::size_t, std::size_t>> chunk_places(const OpenImage& img, const Checkpoint& c,
                                                             const std::vector<char>& image, const fs::path& name) {
  static_assert(std::endian::native == std::endian::little, "the image holds little-endian floats");
  std::vector<std::pair<std::size_t, std::size_t>> places;
  for (std::size_t i = 0; i < c.arrays.size(); ++i) {
    const auto& a = c.arrays[i];
    Handle space(check(H5Dget_space(img.datasets[i].get()), name, "dataspace of " + a.path), H5Sclose);
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    hsize_t nchunks = 0;
    check(H5Dget_num_chunks(img.datasets[i].get(), space.get(), &nchunks), name, "chunks of " + a.path);
    const std::size_t n = a.data.size() * sizeof(float);
    if (nchunks != 1 ||
        H5Dget_chunk_info(img.datasets[i].get(), space.get(), 0, nullptr, &mask, &addr, &size) < 0 || mask != 0 ||
        addr == HADDR_UNDEF || size != n + 4 || addr + size > image.size())
      return {};
    const char* at = image.data() + addr;
    const std::uint32_t sum = hdf5_fletcher32(at, n);
    std::uint32_t stored = 0;
    for (std::size_t b = 0; b < 4; ++b) stored |= std::uint32_t(static_cast<unsigned char>(at[n + b])) << (8 * b);
    if (stored != sum || std::memcmp(at, a.data.data(), n) != 0) return {};
    places.emplace_back(static_cast<std::size_t>(addr), static_cast<std::size_t>(size));
  }
  return places;
}

// The name HDF5 knows an in-memory image by: the file's, made unique to this thread, since each
// thread keeps its image open between checkpoints and HDF5 refuses to create a file under a name
// another open one has (a standby's replica written by the main thread at the step the writer
// thread then checkpoints, after a takeover, failed so).
std::string memory_name(const fs::path& name) {
  static std::atomic<std::uint64_t> next{0};
  thread_local const std::uint64_t id = next++;
  return name.string() + ".image" + std::to_string(id);
}

// The checkpoint as the bytes of an HDF5 file, built in memory (HDF5's core driver, no backing
// store): HDF5 never touches the disk, so a full or failing disk is an ordinary POSIX error in
// write_durably, with nothing half-open left inside HDF5 (a failed flush on close used to leave the
// file open, and HDF5's exit handler then crashed).
// Returns the writing thread's image buffer, kept between checkpoints: the same few MB each time,
// so after the first no page is faulted in or zero-filled again.
const std::vector<char>& file_image(const Checkpoint& c, double created_unix, const fs::path& name, bool* rewritten) {
  // The content CRC (a pass over every byte) runs beside HDF5's work; its attribute is written last.
  auto crc = std::async(std::launch::async, [&c, created_unix] { return content_crc(c, created_unix); });
  thread_local std::vector<char> image;
  try {
    std::string layout = layout_of(c);
    const bool create = !t_open || t_open->layout != layout;
    if (create) {
      t_open.reset();
      std::size_t bytes = 1 << 20;
      for (const auto& a : c.arrays) bytes += a.data.size() * sizeof(float);
      // The HDF5 1.10 file format: superblock, object headers and chunk indexes carry their own
      // checksums, so damaged metadata is caught too (readable by HDF5 >= 1.10 and h5py).
      Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), name, "H5Pcreate"), H5Pclose);
      check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), name, "H5Pset_libver_bounds");
      check(H5Pset_fapl_core(fapl.get(), bytes, /*backing_store=*/0), name, "H5Pset_fapl_core");
      t_open = std::make_unique<OpenImage>(
          std::move(layout),
          check(H5Fcreate(memory_name(name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), name,
                "create file in memory"));
    }
    OpenImage& img = *t_open;
    const bool direct = !create && !img.chunks.empty();
    *rewritten = direct;
    fill_file(img, c, created_unix, name, create);
    // While the CRC thread runs: the Fletcher32 of each array going straight into the image.
    std::vector<std::uint32_t> sums;
    if (direct)
      for (const auto& a : c.arrays) sums.push_back(hdf5_fletcher32(a.data.data(), a.data.size() * sizeof(float)));
    const std::int64_t sum = crc.get();
    put_attr(img.file.get(), name, kAttrCrc, H5T_NATIVE_INT64, H5T_STD_I64LE, &sum, create);
    // The image is copied while the file is open, after a flush of everything HDF5 still holds.
    check(H5Fflush(img.file.get(), H5F_SCOPE_GLOBAL), name, "flush in memory");
    const ssize_t n = H5Fget_file_image(img.file.get(), nullptr, 0);
    if (n <= 0) throw CheckpointError(name.string() + ": file image size: " + hdf5_error());
    image.resize(static_cast<std::size_t>(n));
    if (H5Fget_file_image(img.file.get(), image.data(), image.size()) != n)
      throw CheckpointError(name.string() + ": file image: " + hdf5_error());
    if (create) {
      img.built_bytes = image.size();
      img.chunks = chunk_places(img, c, image, name);
    } else if (direct) {
      // The arrays go straight into the image, each chunk followed by its Fletcher32 (HDF5's
      // filter pipeline and its copies skipped; the file's metadata does not change).
      for (std::size_t i = 0; i < c.arrays.size(); ++i) {
        const auto& a = c.arrays[i];
        const std::size_t n = a.data.size() * sizeof(float);
        char* at = image.data() + img.chunks[i].first;
        std::memcpy(at, a.data.data(), n);
        for (std::size_t b = 0; b < 4; ++b) at[n + b] = static_cast<char>((sums[i] >> (8 * b)) & 0xff);
      }
    }
    // Rewritten variable-length strings (the data cursors) leave their old heap objects behind:
    // past an eighth more than the file was built with, the next checkpoint builds it afresh.
    if (image.size() > img.built_bytes + img.built_bytes / 8) t_open.reset();
  } catch (...) {
    t_open.reset();  // whatever HDF5 holds of a failed build is not reused
    throw;
  }
  fix_superblock_checksum(image);
  return image;
}

// Writes every attribute but the CRC and every array into `img`: created when `create`, else
// rewritten (string attributes only when their value changed).
void fill_file(OpenImage& img, const Checkpoint& c, double created_unix, const fs::path& name, bool create) {
  const hid_t f = img.file.get();
  const auto put_int = [&](const std::string& k, std::int64_t v) {
    put_attr(f, name, k, H5T_NATIVE_INT64, H5T_STD_I64LE, &v, create);
  };
  const auto put_real = [&](const std::string& k, double v) {
    put_attr(f, name, k, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, &v, create);
  };
  const auto put_string = [&](const std::string& k, const std::string& v) {
    auto [it, fresh] = img.strings.try_emplace(k, v);
    if (!fresh && it->second == v) return;
    put_string_attr(f, name, k, v, create);
    it->second = v;
  };
  put_int(kAttrFormat, kFormatVersion);
  put_int(kAttrStep, c.global_step);
  put_string(kAttrModel, c.model);
  put_int(kAttrParamCount, c.param_count);
  put_int(kAttrEpoch, c.epoch);
  put_real(kAttrCreated, created_unix);
  put_string(kAttrConfig, c.config_json);
  for (const auto& [k, v] : c.ints) put_int(k, v);
  for (const auto& [k, v] : c.reals) put_real(k, v);
  for (const auto& [k, v] : c.strings) put_string(k, v);

  if (!create) {
    if (!img.chunks.empty()) return;  // written into the image by file_image
    for (std::size_t i = 0; i < c.arrays.size(); ++i)
      check(H5Dwrite(img.datasets[i].get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.arrays[i].data.data()),
            name, "write dataset " + c.arrays[i].path);
    return;
  }
  // Each group is created once and every dataset by its leaf name under its group's handle:
  // creating ~260 datasets by full path, with intermediate groups, spent most of the build in
  // HDF5's name lookups. One creation property list per shape; no fill values are ever written
  // (every dataset is written whole at once).
  std::map<std::string, Handle> groups;
  const auto group_of = [&](const std::string& path) -> hid_t {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return f;
    const std::string parent = path.substr(0, slash);
    if (const auto it = groups.find(parent); it != groups.end()) return it->second.get();
    std::string at;  // create the missing ancestors, outermost first
    hid_t loc = f;
    for (std::size_t from = parent[0] == '/' ? 1 : 0; from <= parent.size();) {
      const std::size_t to = std::min(parent.find('/', from), parent.size());
      const std::string part = parent.substr(from, to - from);
      at += "/" + part;
      auto it = groups.find(at);
      if (it == groups.end())
        it = groups
                 .emplace(at, Handle(check(H5Gcreate2(loc, part.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), name,
                                           "create group " + at),
                                     H5Gclose))
                 .first;
      loc = it->second.get();
      from = to + 1;
    }
    return loc;
  };
  std::map<std::vector<hsize_t>, Handle> dcpls;
  img.datasets.reserve(c.arrays.size());
  for (const auto& a : c.arrays) {
    MT_ASSERT(static_cast<std::int64_t>(a.data.size()) == product(a.dims), "array size vs dims: " + a.path);
    std::vector<hsize_t> dims(a.dims.begin(), a.dims.end());
    Handle space(check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), name,
                       "dataspace for " + a.path),
                 H5Sclose);
    auto dcpl = dcpls.find(dims);
    if (dcpl == dcpls.end()) {
      // One chunk per dataset (the largest is ~0.6 MB): Fletcher32 needs chunked storage.
      Handle p(check(H5Pcreate(H5P_DATASET_CREATE), name, "H5Pcreate"), H5Pclose);
      check(H5Pset_chunk(p.get(), static_cast<int>(dims.size()), dims.data()), name, "H5Pset_chunk");
      check(H5Pset_fletcher32(p.get()), name, "H5Pset_fletcher32");
      check(H5Pset_fill_time(p.get(), H5D_FILL_TIME_NEVER), name, "H5Pset_fill_time");
      dcpl = dcpls.emplace(dims, std::move(p)).first;
    }
    const hid_t group = group_of(a.path);
    const std::string leaf = a.path.substr(a.path.rfind('/') + 1);
    Handle& ds = img.datasets.emplace_back(
        check(H5Dcreate2(group, leaf.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl->second.get(), H5P_DEFAULT),
              name, "create dataset " + a.path),
        H5Dclose);
    check(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()), name,
          "write dataset " + a.path);
  }
}

// Writes `image` to `tmp` and fsyncs it; the fault hook runs with half of it written (a torn file).
// On failure the temporary file is removed and CheckpointError names it, the step and errno's text.
void write_durably(const fs::path& tmp, const std::vector<char>& image, std::int64_t global_step) {
  const auto fail = [&](const std::string& what, int err, int fd) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return CheckpointError(tmp.string() + ": " + what + ": " + std::strerror(err) + " (checkpoint of global step " +
                           std::to_string(global_step) + ")");
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw fail("create", errno, -1);
  const std::size_t half = image.size() / 2;
  for (std::size_t done = 0; done < image.size();) {
    const std::size_t end = done < half ? half : image.size();
    const ssize_t w = ::write(fd, image.data() + done, end - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw fail("write", errno, fd);
    done += static_cast<std::size_t>(w);
    if (done == half) mid_write(global_step);
  }
  if (::fsync(fd) != 0) throw fail("fsync", errno, fd);
  if (::close(fd) != 0) throw fail("close", errno, -1);
}

}  // namespace

std::uint32_t hdf5_fletcher32(const void* data, std::size_t length) {
  // HDF5's H5_checksum_fletcher32: sums of big-endian 16-bit words in blocks of 360 (no 32-bit
  // overflow inside a block), each block's sums folded (end-around carry), an odd last byte as the
  // high byte of a word, two final folds.
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t sum1 = 0, sum2 = 0;
  const auto fold = [&] {
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  };
  for (std::size_t words = length / 2; words > 0;) {
    const auto block = static_cast<std::uint32_t>(std::min<std::size_t>(words, 360));
    words -= block;
    // Within a block HDF5 adds sum1 to sum2 after each word: the same as adding block * sum1 and
    // each word weighted by the words left (the sums stay below 2^32 in a block of 360).
    std::uint32_t s = 0, w = 0;
    for (std::uint32_t k = 0; k < block; ++k) {
      const std::uint32_t v = static_cast<std::uint32_t>(p[2 * k]) << 8 | p[2 * k + 1];
      s += v;
      w += (block - k) * v;
    }
    p += 2 * block;
    sum2 += block * sum1 + w;
    sum1 += s;
    fold();
  }
  if (length % 2) {
    sum1 += static_cast<std::uint32_t>(*p) << 8;
    sum2 += sum1;
    fold();
  }
  fold();
  return sum2 << 16 | sum1;
}

// Bob Jenkins' lookup3 hashlittle (public domain), byte by byte, as HDF5 checksums its metadata.
std::uint32_t hdf5_metadata_checksum(const void* data, std::size_t length) {
  const auto rot = [](std::uint32_t x, int k) { return (x << k) | (x >> (32 - k)); };
  const auto* k = static_cast<const unsigned char*>(data);
  std::uint32_t a, b, c;
  a = b = c = 0xdeadbeefu + static_cast<std::uint32_t>(length);
  const auto word = [&](std::size_t i) {
    return std::uint32_t(k[i]) | std::uint32_t(k[i + 1]) << 8 | std::uint32_t(k[i + 2]) << 16 |
           std::uint32_t(k[i + 3]) << 24;
  };
  while (length > 12) {
    a += word(0);
    b += word(4);
    c += word(8);
    a -= c; a ^= rot(c, 4);  c += b;
    b -= a; b ^= rot(a, 6);  a += c;
    c -= b; c ^= rot(b, 8);  b += a;
    a -= c; a ^= rot(c, 16); c += b;
    b -= a; b ^= rot(a, 19); a += c;
    c -= b; c ^= rot(b, 4);  b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;
  // The last 1..12 bytes, little-endian into a, b, c.
  std::uint32_t tail[3] = {0, 0, 0};
  for (std::size_t i = 0; i < length; ++i) tail[i / 4] |= std::uint32_t(k[i]) << (8 * (i % 4));
  a += tail[0];
  b += tail[1];
  c += tail[2];
  c ^= b; c -= rot(b, 14);
  a ^= c; a -= rot(c, 11);
  b ^= a; b -= rot(a, 25);
  c ^= b; c -= rot(b, 16);
  a ^= c; a -= rot(c, 4);
  b ^= a; b -= rot(a, 14);
  c ^= b; c -= rot(b, 24);
  return c;
}

void set_mid_write_hook(MidWriteHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_mid_write_hook = std::move(hook);
}

const Array* Checkpoint::find(const std::string& path) const {
  for (const auto& a : arrays)
    if (a.path == path) return &a;
  return nullptr;
}

std::string file_name(std::int64_t global_step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld.h5", static_cast<long long>(global_step));
  return buf;
}

namespace {

// Checkpoint files known to be valid, by path, with the size and modification time they had:
// retention runs after every publish and would otherwise read every kept file again. A file that
// changed since (another size or time) is verified anew.
struct KnownValid {
  std::mutex mutex;
  std::map<std::string, std::pair<std::uintmax_t, fs::file_time_type>> files;

  static std::optional<std::pair<std::uintmax_t, fs::file_time_type>> identity(const fs::path& file) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    const auto mtime = fs::last_write_time(file, ec);
    if (ec) return std::nullopt;
    return std::make_pair(size, mtime);
  }
  void remember(const fs::path& file) {
    if (const auto id = identity(file)) {
      std::lock_guard<std::mutex> lock(mutex);
      files[file.string()] = *id;
    }
  }
  bool known(const fs::path& file) {
    const auto id = identity(file);
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = files.find(file.string());
    return id && it != files.end() && it->second == *id;
  }
};
KnownValid& known_valid() {
  static KnownValid k;
  return k;
}

bool verifies(const fs::path& file) {
  if (known_valid().known(file)) return true;
  if (!verify(file).ok) return false;
  known_valid().remember(file);
  return true;
}

}  // namespace

void retain(const fs::path& dir, int keep, const fs::path& written) {
  if (keep <= 0) return;
  int kept = 0;
  std::error_code ec;
  for (const auto& file : list(dir)) {
    if (file == written) {  // just published: never removed, and it counts
      ++kept;
      continue;
    }
    if (kept < keep) {
      // Newer than the kept set is complete: a valid one is kept; a damaged one does not count
      // and stays for inspection (resume passes over it and says so).
      if (verifies(file)) ++kept;
      continue;
    }
    fs::remove(file, ec);  // older than the newest `keep` valid ones: valid or not
  }
}

fs::path publish(const fs::path& dir, const Checkpoint& c, int keep, PublishStats* stats) {
  quiet_hdf5();
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir.string() + ": cannot create checkpoint directory: " + ec.message());
  // Not a copy of the checkpoint with the time set (a few MB copied on every write).
  const double created_unix = c.created_unix != 0 ? c.created_unix : now_unix();
  const fs::path final_path = dir / file_name(c.global_step);
  const fs::path tmp = fs::path(final_path.string() + ".tmp");
  bool rewritten = false;
  const std::vector<char>& image = file_image(c, created_unix, tmp, &rewritten);
  const auto t_image = std::chrono::steady_clock::now();
  write_durably(tmp, image, c.global_step);
  const auto t1 = std::chrono::steady_clock::now();
  try {
    rename_durably(tmp, final_path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  const auto t_durable = std::chrono::steady_clock::now();
  // LATEST names the newest checkpoint, for scripts; readers do not depend on it.
  write_file_atomically(dir / "LATEST", final_path.filename().string() + '\n');
  const auto t2 = std::chrono::steady_clock::now();  // durable and published
  retain(dir, keep, final_path);
  // Leftovers of an interrupted earlier write are never valid; remove those older than us.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".h5.tmp")) {
      const auto s = step_of(name.substr(0, name.size() - 4));
      if (s && *s < c.global_step) fs::remove(e.path(), ec);
    }
  }
  if (stats) {
    stats->write_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->sync_seconds = std::chrono::duration<double>(t2 - t1).count();
    stats->image_seconds = std::chrono::duration<double>(t_image - t0).count();
    stats->durable_seconds = std::chrono::duration<double>(t_durable - t0).count();
    stats->bytes = static_cast<std::int64_t>(fs::file_size(final_path, ec));
    stats->rewritten = rewritten;
  }
  return final_path;
}

Checkpoint read(const fs::path& file) {
  quiet_hdf5();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw CheckpointError(file.string() + ": no such checkpoint file");
  if (H5Fis_hdf5(file.c_str()) <= 0)
    throw CheckpointError(file.string() + ": not a readable HDF5 file (truncated or damaged)");
  Handle f(check(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), file,
                 "open (truncated or damaged file?)"),
           H5Fclose);

  // Attributes.
  struct Collect {
    hid_t file_id;
    const fs::path* path;
    std::map<std::string, AttrValue> attrs;
    std::string error;
  } col{f.get(), &file, {}, {}};
  hsize_t idx = 0;
  const herr_t it = H5Aiterate2(
      f.get(), H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t loc, const char* name, const H5A_info_t*, void* data) -> herr_t {
        auto* c = static_cast<Collect*>(data);
        try {
          Handle a(check(H5Aopen(loc, name, H5P_DEFAULT), *c->path, std::string("open attribute ") + name),
                   H5Aclose);
          c->attrs[name] = read_attr(a.get(), *c->path, name);
        } catch (const std::exception& e) {
          c->error = e.what();
          return -1;
        }
        return 0;
      },
      &col);
  if (!col.error.empty()) throw CheckpointError(col.error);
  check(it, file, "read attributes");

  auto need = [&](const char* name, AttrValue::Kind kind) -> const AttrValue& {
    const auto i = col.attrs.find(name);
    if (i == col.attrs.end()) throw CheckpointError(file.string() + ": missing attribute '" + name + "'");
    if (i->second.kind != kind) throw CheckpointError(file.string() + ": attribute '" + name + "' has the wrong type");
    return i->second;
  };
  const std::int64_t version = need(kAttrFormat, AttrValue::Kind::kInt).i;
  if (version != kFormatVersion)
    throw CheckpointError(file.string() + ": format_version " + std::to_string(version) +
                          " is not the supported version " + std::to_string(kFormatVersion));
  Checkpoint c;
  c.global_step = need(kAttrStep, AttrValue::Kind::kInt).i;
  c.model = need(kAttrModel, AttrValue::Kind::kString).s;
  c.param_count = need(kAttrParamCount, AttrValue::Kind::kInt).i;
  c.epoch = need(kAttrEpoch, AttrValue::Kind::kInt).i;
  c.created_unix = need(kAttrCreated, AttrValue::Kind::kReal).r;
  c.config_json = need(kAttrConfig, AttrValue::Kind::kString).s;
  const std::int64_t stored_crc = need(kAttrCrc, AttrValue::Kind::kInt).i;
  for (const auto& [name, v] : col.attrs) {
    if (name == kAttrFormat || name == kAttrStep || name == kAttrModel || name == kAttrParamCount ||
        name == kAttrEpoch || name == kAttrCreated || name == kAttrConfig || name == kAttrCrc)
      continue;
    switch (v.kind) {
      case AttrValue::Kind::kInt: c.ints[name] = v.i; break;
      case AttrValue::Kind::kReal: c.reals[name] = v.r; break;
      case AttrValue::Kind::kString: c.strings[name] = v.s; break;
    }
  }

  // Datasets, each read through the Fletcher32 filter.
  struct Visit {
    std::vector<std::string> names;
  } vis;
  check(H5Ovisit2(
            f.get(), H5_INDEX_NAME, H5_ITER_INC,
            [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
              if (info->type == H5O_TYPE_DATASET) static_cast<Visit*>(data)->names.emplace_back(name);
              return 0;
            },
            &vis, H5O_INFO_BASIC),
        file, "list datasets");
  for (const auto& name : vis.names) {
    Handle ds(check(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), file, "open dataset " + name), H5Dclose);
    Handle space(check(H5Dget_space(ds.get()), file, "dataspace of " + name), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0 || rank > 8) throw CheckpointError(file.string() + ": dataset " + name + " has a bad shape");
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), file, "shape of " + name);
    Array a;
    a.path = name;
    a.dims.assign(dims.begin(), dims.end());
    a.data.resize(static_cast<std::size_t>(product(a.dims)));
    if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()) < 0)
      throw CheckpointError(file.string() + ": dataset " + name +
                            " failed its Fletcher32 checksum or could not be read: " + hdf5_error());
    c.arrays.push_back(std::move(a));
  }
  const std::uint32_t crc = content_crc(c, c.created_unix);
  if (static_cast<std::int64_t>(crc) != stored_crc)
    throw CheckpointError(file.string() + ": content checksum mismatch (stored " +
                          std::to_string(stored_crc) + ", computed " + std::to_string(crc) +
                          "): the file was modified or damaged");
  return c;
}

VerifyReport verify(const fs::path& file) {
  VerifyReport r;
  try {
    const Checkpoint c = read(file);
    r.ok = true;
    r.global_step = c.global_step;
    r.model = c.model;
  } catch (const CheckpointError& e) {
    r.reason = e.what();
  }
  return r;
}

std::vector<fs::path> list(const fs::path& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    if (const auto s = step_of(e.path().filename().string())) found.emplace_back(*s, e.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& [s, p] : found) out.push_back(std::move(p));
  return out;
}

std::optional<Loaded> load_latest_valid(const fs::path& dir,
                                        const std::function<void(const Checkpoint&)>& accept,
                                        std::vector<std::string>* skipped) {
  for (const auto& file : list(dir)) {
    try {
      Checkpoint c = read(file);
      if (accept) accept(c);
      return Loaded{std::move(c), file};
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

std::string describe(const Checkpoint& c) {
  std::ostringstream os;
  os << "format_version: " << kFormatVersion << '\n'
     << "global_step: " << c.global_step << '\n'
     << "model: " << c.model << '\n'
     << "param_count: " << c.param_count << '\n'
     << "epoch: " << c.epoch << '\n'
     << "created_unix: " << std::fixed << c.created_unix << '\n';
  for (const auto& [k, v] : c.ints) os << k << ": " << v << '\n';
  for (const auto& [k, v] : c.reals) os << k << ": " << v << '\n';
  for (const auto& [k, v] : c.strings) os << k << ": " << v << '\n';
  os << "config: " << c.config_json << '\n';
  std::int64_t floats = 0;
  os << "arrays: " << c.arrays.size() << '\n';
  for (const auto& a : c.arrays) {
    os << "  /" << a.path << ' ' << dims_to_string(a.dims) << '\n';
    floats += static_cast<std::int64_t>(a.data.size());
  }
  os << "floats: " << floats << '\n';
  return os.str();
}

}  // namespace mt::ckpt
