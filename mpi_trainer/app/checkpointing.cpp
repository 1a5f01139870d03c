#include "app/checkpointing.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace mt {

namespace {

constexpr const char* kParams = "params";
constexpr const char* kMomentum = "optimizer/momentum";
constexpr const char* kBnStats = "bn_stats";

void add_group(ckpt::Checkpoint& c, const std::string& group, const FlatTensors& flat) {
  for (const auto& e : flat.layout().entries()) {
    ckpt::Array a;
    a.path = array_path(group, e.name);
    a.dims = e.dims;
    const float* src = flat.flat().data() + e.offset;
    a.data.assign(src, src + e.size);
    c.arrays.push_back(std::move(a));
  }
}

void check_group(const ckpt::Checkpoint& c, const std::string& group, const ParamLayout& layout,
                 const std::string& model) {
  for (const auto& e : layout.entries()) {
    const std::string path = array_path(group, e.name);
    const ckpt::Array* a = c.find(path);
    if (!a)
      throw CheckpointError("checkpoint of model '" + c.model + "' lacks /" + path + " of model '" +
                            model + "'");
    if (a->dims != e.dims)
      throw CheckpointError("checkpoint array /" + path + " has shape " + dims_to_string(a->dims) +
                            ", model '" + model + "' needs " + dims_to_string(e.dims));
  }
}

void restore_group(const ckpt::Checkpoint& c, const std::string& group, FlatTensors& flat) {
  for (const auto& e : flat.layout().entries()) {
    const ckpt::Array* a = c.find(array_path(group, e.name));
    std::memcpy(flat.flat().data() + e.offset, a->data.data(), a->data.size() * sizeof(float));
  }
}

}  // namespace

std::string array_path(const std::string& group, const std::string& dotted_name) {
  std::string p = dotted_name;
  std::replace(p.begin(), p.end(), '.', '/');
  return group + "/" + p;
}

ckpt::Checkpoint make_checkpoint(const Model& model, const FlatTensors& params,
                                 const FlatTensors& momentum, const FlatTensors& bn_stats,
                                 const TrainProgress& p, const std::string& config_json) {
  ckpt::Checkpoint c;
  c.global_step = p.global_step;
  c.model = model.spec().name;
  c.param_count = model.param_count();
  c.epoch = p.epoch;
  c.config_json = config_json;
  c.ints["data_cursor_epoch"] = p.epoch;
  c.ints["data_cursor_position"] = p.position;
  c.ints["attempts"] = p.attempts;
  c.reals["train_seconds"] = p.train_seconds;
  c.reals["cost_usd"] = p.cost_usd;
  c.reals["lr"] = p.lr;
  add_group(c, kParams, params);
  add_group(c, kMomentum, momentum);
  add_group(c, kBnStats, bn_stats);
  return c;
}

void check_compatible(const ckpt::Checkpoint& c, const Model& model) {
  const std::string& name = model.spec().name;
  if (c.model != name)
    throw CheckpointError("checkpoint is of model '" + c.model + "', this run trains '" + name + "'");
  if (c.param_count != model.param_count())
    throw CheckpointError("checkpoint has " + std::to_string(c.param_count) + " parameters, model '" +
                          name + "' has " + std::to_string(model.param_count()));
  check_group(c, kParams, model.params(), name);
  check_group(c, kMomentum, model.params(), name);
  check_group(c, kBnStats, model.stats(), name);
  for (const char* key : {"data_cursor_epoch", "data_cursor_position"})
    if (!c.ints.count(key)) throw CheckpointError(std::string("checkpoint lacks attribute ") + key);
}

TrainProgress restore_checkpoint(const ckpt::Checkpoint& c, const Model& model, FlatTensors& params,
                                 FlatTensors& momentum, FlatTensors& bn_stats) {
  check_compatible(c, model);
  restore_group(c, kParams, params);
  restore_group(c, kMomentum, momentum);
  restore_group(c, kBnStats, bn_stats);
  TrainProgress p;
  p.global_step = c.global_step;
  p.epoch = c.ints.at("data_cursor_epoch");
  p.position = c.ints.at("data_cursor_position");
  auto real = [&](const char* k) { const auto i = c.reals.find(k); return i == c.reals.end() ? 0.0 : i->second; };
  p.train_seconds = real("train_seconds");
  p.cost_usd = real("cost_usd");
  p.lr = real("lr");
  const auto a = c.ints.find("attempts");
  p.attempts = a == c.ints.end() ? 1 : a->second;
  return p;
}

}  // namespace mt
