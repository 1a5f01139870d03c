#include "ckpt/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "ckpt/hdf5_util.hpp"
#include "core/error.hpp"

namespace mt::ckpt {

using namespace detail;

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

namespace {
template <class Read>
VerifyReport verify_with(const fs::path& file, Read read_it) {
  VerifyReport r;
  try {
    const Checkpoint c = read_it(file);
    r.ok = true;
    r.global_step = c.global_step;
    r.model = c.model;
  } catch (const CheckpointError& e) {
    r.reason = e.what();
  }
  return r;
}
}  // namespace

VerifyReport verify(const fs::path& file) { return verify_with(file, [](const fs::path& f) { return read(f); }); }
VerifyReport verify_contained(const fs::path& file) {
  return verify_with(file, [](const fs::path& f) { return read_contained(f); });
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
      Checkpoint c = read_contained(file);
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
