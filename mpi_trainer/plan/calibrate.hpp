// `mpi_trainer calibrate`: measures this machine's (or this GPU's) step time of a model and the
// parameter server's time per update, and writes a device table file for `plan --devices` and
// `--emulate-device` (issue 20), so predictions use this hardware instead of the paper's.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace mt {

struct CalibrateConfig {
  std::string model = "resnet32";
  std::int64_t batch_size = 128;
  std::string device = "auto";
  int threads = 0;  // 0: the cores this process may use
  int steps = 20;   // timed training steps (after `warmup`)
  int warmup = 3;
  int updates = 200;  // timed parameter-server updates
  std::string name;   // the device's name in the table; empty: cpu or cuda
  std::string out;    // the file to write; empty: stdout only
};

// Prints what it measured; writes the table to `out` when given. Returns the exit code.
int calibrate_command(const CalibrateConfig& cfg, std::ostream& out);

}  // namespace mt
