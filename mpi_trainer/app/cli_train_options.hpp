// The train (and join) command's flags, each with its environment default MT_<FLAG>, and the
// validators the other commands share (app/cli.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "app/config.hpp"

namespace mt::cli {

extern const CLI::Validator kPositive;     // a number above 0, said plainly
extern const CLI::Validator kNonNegative;  // a number of 0 or more, said plainly
extern const CLI::Validator kSteps;        // a whole number of steps, 1 to 10^12
extern const CLI::Validator kStepsOrZero;  // the same, or 0 (every N steps: 0 for never or only at the end)
// --ps-link's help, for train's virtual runs and plan.
inline constexpr const char* kPsLinkHelp =
    "Each parameter-server shard's own link (its NIC, full duplex, shared by every worker), GBIT_PER_S or "
    "LATENCY_MS/GBIT_PER_S, or none (not modelled); default 8: the paper's 4-vCPU parameter server at Compute "
    "Engine's 2 Gbit/s per vCPU";

// Before a parse: the command line's tokens (a flag given there does not read its variable).
void begin_parse(int argc, char** argv);
// The option reads its environment default `name` (MT_<FLAG>), unless the flag is on the
// command line: then the variable is not read at all (an invalid value there is no error).
void env_default(CLI::Option* o, const char* name);
// A parse error about a value that came from the environment names the variable.
std::string name_the_variable(std::string what);
// Every flag of `train` (and `join`) into `c`.
void add_train_options(CLI::App& cmd, TrainConfig& c);

}  // namespace mt::cli
