// The flags of the commands besides train and join: plan, calibrate, eval, export and gen-data
// (app/cli.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "plan/calibrate.hpp"
#include "app/evaluate.hpp"
#include "app/export.hpp"
#include "plan/plan.hpp"

namespace mt::cli {

// gen-data's arguments.
struct GenDataConfig {
  std::string dir;
  std::int64_t train = 5000, test = 1000;
  std::uint64_t seed = 1;
};

// `deadline`: --deadline as given (a duration; run_cli parses it into c.deadline_seconds).
void add_plan_options(CLI::App& cmd, PlanConfig& c, std::string& deadline);
// --deadline (a duration such as 2h or 90m) into c.deadline_seconds; throws UsageError.
void resolve_deadline(const std::string& deadline, PlanConfig& c);
void add_calibrate_options(CLI::App& cmd, CalibrateConfig& c);
void add_eval_options(CLI::App& cmd, EvalConfig& c);
void add_export_options(CLI::App& cmd, ExportConfig& c);
void add_gen_data_options(CLI::App& cmd, GenDataConfig& c);

}  // namespace mt::cli
