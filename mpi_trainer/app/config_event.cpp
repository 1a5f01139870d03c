// The runs' "config" event (app/config_event.hpp).
#include "app/config_event.hpp"

#include "app/version.hpp"

namespace mt {

nlohmann::ordered_json config_event(const TrainConfig& c, const RunSetup& s, std::int64_t parameters,
                                    const std::vector<Emulation>& emulated) {
  return nlohmann::ordered_json{{"event", "config"},
                                {"version", kVersion},
                                {"metrics_schema", kMetricsSchema},
                                {"model", s.spec.name},
                                {"parameters", parameters},
                                {"data", s.data_dir},
                                {"data_format", s.data.format},
                                {"train_steps", c.train_steps},
                                {"batch_size", c.batch_size},
                                {"lr_schedule", s.schedule.describe()},
                                {"momentum", c.momentum},
                                {"nesterov", s.nesterov},
                                {"weight_decay", c.weight_decay},
                                {"seed", c.seed},
                                {"pricing", c.pricing},
                                {"prices", s.prices.source()},
                                {"emulation", emulation_json(c, emulated)}};
}

void add_policy_fields(nlohmann::ordered_json& event, const TrainConfig& c, const std::vector<std::string>& types) {
  event["momentum_auto"] = c.momentum_auto;
  event["lr_scaling"] = c.lr_scaling;
  event["momentum_correction"] = c.momentum_correction;
  event["join_warmup"] = c.join_warmup;
  event["spike_guard"] = c.spike_guard;
  event["max_staleness"] = c.max_staleness;
  event["push_precision"] = c.push_precision;
  event["push_journal"] = c.push_journal;
  event["worker_types"] = types;
  event["ps_type"] = c.ps_type;
  event["ps_pricing"] = c.ps_pricing;
}

}  // namespace mt
