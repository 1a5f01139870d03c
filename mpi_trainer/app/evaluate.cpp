#include "app/evaluate.hpp"

#include <filesystem>
#include <iomanip>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/checkpointing.hpp"
#include "app/device.hpp"
#include "app/run_setup.hpp"
#include "ckpt/state.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "nn/resnet.hpp"

namespace mt {

namespace {

// The input as the checkpoint's model was trained on it; a checkpoint from before the input was
// recorded: the trainer's default for the model, statistics from this data's training split.
LoaderOptions input_of(const ckpt::JobIdentity& job, const ModelSpec& spec, const DataSplit& data,
                       bool* from_checkpoint) {
  LoaderOptions lo;
  lo.shuffle = false;
  lo.augment = false;
  const std::string& kind = job.input_normalization;
  *from_checkpoint = !kind.empty();
  if (kind.empty()) {
    lo.normalization = parse_normalization("default", spec.kind == BlockKind::kPreActivation);
    lo.stats = compute_channel_stats(data.train);
    return lo;
  }
  if (kind == "channel-stats") {
    lo.normalization = Normalization::kChannelStats;
    lo.stats.mean = job.input_mean;
    lo.stats.std = job.input_std;
  } else if (kind == "per-image") {
    lo.normalization = Normalization::kPerImage;
  } else if (kind == "none") {
    lo.normalization = Normalization::kNone;
  } else {
    throw CheckpointError("checkpoint attribute input_normalization '" + kind + "' is not one this version knows");
  }
  return lo;
}

}  // namespace

int evaluate_checkpoint(const EvalConfig& cfg, std::ostream& out) {
  const LoadedState loaded = load_named_state(cfg.ckpt);
  const ckpt::CheckpointState& c = loaded.state;
  const Model model(parse_model(c.model));
  FlatTensors params(model.params()), momentum(model.params()), stats(model.stats());
  restore_checkpoint(c, model, params, momentum, stats);
  const std::string dir = cfg.data.empty() ? default_data_dir().string() : cfg.data;
  const DataSplit data = load_dataset(dir);
  bool from_checkpoint = false;
  LoaderOptions lo = input_of(c.job, model.spec(), data, &from_checkpoint);
  lo.batch_size = cfg.batch_size;
  const ResolvedDevice device = resolve_device(cfg.device);
  auto backend = make_backend(device, cfg.threads > 0 ? cfg.threads : usable_cores());
  Network net(model, *backend, cfg.batch_size);
  const EvalResult r = evaluate_test_set(net, data.test, lo, params, stats);
  const std::optional<std::string> trained_on = c.job.data.empty() ? std::nullopt : std::optional(c.job.data);
  const std::string identity = dataset_identity(data);
  if (cfg.json) {
    out << nlohmann::ordered_json{{"checkpoint", loaded.file.string()},
                                  {"model", c.model},
                                  {"global_step", c.progress.global_step},
                                  {"data", dir},
                                  {"data_identity", identity},
                                  {"trained_on_this_data", trained_on ? nlohmann::ordered_json(*trained_on == identity)
                                                                      : nlohmann::ordered_json()},
                                  {"normalization", normalization_name(lo.normalization)},
                                  {"normalization_from_checkpoint", from_checkpoint},
                                  {"test_images", data.test.count},
                                  {"test_accuracy", r.accuracy},
                                  {"test_loss", r.loss},
                                  {"device", device.name}}
               .dump()
        << '\n';
  } else {
    out << loaded.file.string() << " (" << c.model << ", global step " << c.progress.global_step << "): test accuracy "
        << std::fixed << std::setprecision(2) << 100.0 * r.accuracy << "%, loss " << std::setprecision(4) << r.loss
        << " on " << data.test.count << " " << data.format << " test images (" << dir << ")";
    if (trained_on && *trained_on != identity) out << "; not the data it was trained on";
    if (!from_checkpoint) out << "; normalization not recorded in the checkpoint: the model's default, from this data";
    out << '\n';
  }
  return kExitOk;
}

}  // namespace mt
