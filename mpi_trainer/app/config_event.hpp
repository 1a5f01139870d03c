// The "config" event every training run writes first (the metrics file's first line after a
// start, and the `config` attribute of its checkpoints): one writer for the fields every kind of
// run shares, in one order, and one for the parameter server's policy, which distributed and
// virtual runs share. Each run adds its own fields after these (device and threads for one
// process, shards and the MPI library for a distributed run, links and joins for a virtual one).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "app/emulation.hpp"
#include "app/run_setup.hpp"

namespace mt {

// event, version, metrics_schema, model, parameters, data, data_format, train_steps, batch_size, lr_schedule, momentum,
// nesterov, weight_decay, seed, pricing, prices, emulation.
nlohmann::ordered_json config_event(const TrainConfig& c, const RunSetup& s, std::int64_t parameters,
                                    const std::vector<Emulation>& emulated);

// momentum_auto, lr_scaling, momentum_correction, join_warmup, max_staleness, worker_types,
// ps_type, ps_pricing: how the parameter server applies pushes, and what it runs on.
void add_policy_fields(nlohmann::ordered_json& event, const TrainConfig& c, const std::vector<std::string>& types);

}  // namespace mt
