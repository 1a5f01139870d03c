// The fast write path (ckpt/image.hpp): an in-memory HDF5 image, its checksums computed here as
// HDF5 computes them, and the durable write.
#include "ckpt/image.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "ckpt/hdf5_util.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace mt::ckpt {

namespace detail {
namespace {

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
const std::vector<char>& build_image(const Checkpoint& c, double created_unix, const fs::path& name, bool* rewritten) {
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
    if (!img.chunks.empty()) return;  // written into the image by build_image
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


}  // namespace

const std::vector<char>& file_image(const Checkpoint& c, double created_unix, const fs::path& name, bool* rewritten) {
  return build_image(c, created_unix, name, rewritten);
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
  ::unlink(tmp.c_str());  // a leftover would keep its own mode through O_TRUNC
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, kPrivateFileMode);
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

}  // namespace detail

using namespace detail;

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

}  // namespace mt::ckpt
