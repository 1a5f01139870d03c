#include "app/export.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/checkpointing.hpp"
#include "ckpt/state.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "nn/resnet.hpp"

namespace mt {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// One tensor of the export: its dtype, shape and bytes (little-endian, as on every machine we
// build for).
struct Entry {
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

Entry f32(const std::vector<std::int64_t>& shape, const std::vector<float>& values) {
  Entry e{"F32", shape, std::string(values.size() * sizeof(float), '\0')};
  std::memcpy(e.bytes.data(), values.data(), e.bytes.size());
  return e;
}

// safetensors: an 8-byte little-endian header length, the JSON header (names -> dtype, shape,
// [begin, end) offsets into the data; "__metadata__": string -> string), padded with spaces to a
// multiple of 8, then the data.
std::string safetensors(const std::map<std::string, Entry>& tensors, const std::map<std::string, std::string>& meta) {
  nlohmann::ordered_json header;
  header["__metadata__"] = meta;
  std::int64_t offset = 0;
  for (const auto& [name, e] : tensors) {
    const auto end = offset + static_cast<std::int64_t>(e.bytes.size());
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const auto n = static_cast<std::uint64_t>(h.size());
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  for (const auto& [name, e] : tensors) out += e.bytes;
  return out;
}

}  // namespace

std::string torch_name(const std::string& param_name) {
  if (ends_with(param_name, ".gamma")) return param_name.substr(0, param_name.size() - 6) + ".weight";
  if (ends_with(param_name, ".beta")) return param_name.substr(0, param_name.size() - 5) + ".bias";
  return param_name;
}

int export_checkpoint(const ExportConfig& cfg, std::ostream& log) {
  if (cfg.format != "safetensors")
    throw UsageError("export: --format must be safetensors, not '" + cfg.format + "'");
  const LoadedState loaded = load_named_state(cfg.ckpt);
  const ckpt::CheckpointState& c = loaded.state;
  const Model model(parse_model(c.model));
  FlatTensors params(model.params()), momentum(model.params()), stats(model.stats());
  restore_checkpoint(c, model, params, momentum, stats);

  std::map<std::string, Entry> tensors;
  const auto slice = [](const FlatTensors& flat, const auto& e) {
    const float* v = flat.flat().data() + e.offset;
    return std::vector<float>(v, v + e.size);
  };
  for (const auto& e : model.params().entries()) tensors[torch_name(e.name)] = f32(e.dims, slice(params, e));
  for (const auto& e : model.stats().entries()) {
    tensors[e.name] = f32(e.dims, slice(stats, e));
    // PyTorch's BatchNorm2d keeps a step counter beside its statistics; load_state_dict wants it.
    if (ends_with(e.name, ".running_mean")) {
      const std::string counter = e.name.substr(0, e.name.size() - 13) + ".num_batches_tracked";
      Entry n{"I64", {}, std::string(sizeof(std::int64_t), '\0')};
      const std::int64_t step = c.progress.global_step;
      std::memcpy(n.bytes.data(), &step, sizeof step);
      tensors[counter] = n;
    }
  }
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"model", c.model},
                                          {"global_step", std::to_string(c.progress.global_step)},
                                          {"source", loaded.file.string()},
                                          {"module", "ckpt/pytorch_model.py: ResNet(\"" + c.model + "\")"}};
  // The job's identity and input, as the checkpoint records them (those it records).
  const ckpt::JobIdentity& job = c.job;
  if (!job.data.empty()) meta["data"] = job.data;
  if (!job.input_normalization.empty()) {
    meta["input_normalization"] = job.input_normalization;
    meta["input_mean"] = nlohmann::json(job.input_mean).dump();
    meta["input_std"] = nlohmann::json(job.input_std).dump();
    meta["label_names"] = nlohmann::json(job.label_names).dump();
  }
  write_file_atomically(cfg.out, safetensors(tensors, meta), 0644);  // made to be shared
  log << "wrote " << cfg.out << ": " << tensors.size() << " tensors of " << c.model << " at global step "
      << c.progress.global_step << " (safetensors; PyTorch: ckpt/pytorch_model.py)\n";
  return kExitOk;
}

}  // namespace mt
