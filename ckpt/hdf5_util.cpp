#include "ckpt/hdf5_util.hpp"

#include <zlib.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace mt::ckpt::detail {

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

std::optional<std::int64_t> step_of(const std::string& name) {
  // ckpt-NNNNNNNNNN.h5
  if (name.size() != 18 || !name.starts_with("ckpt-") || !name.ends_with(".h5")) return std::nullopt;
  const std::string digits = name.substr(5, 10);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

}  // namespace mt::ckpt::detail
