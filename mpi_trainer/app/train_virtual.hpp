// A virtual-clock run (`mpi_trainer train --virtual-workers N`): N logical workers train against
// an in-process parameter server on a virtual clock, in one process, without MPI. Each logical
// step computes its gradient for real, on real data, from the parameters that worker received
// with its last reply (so at the staleness its timing gives it), and the parameter server applies
// it when it arrives: the worker's step time comes from the device table (--emulate-device, by
// default each worker's --worker-types entry) with its jitter, plus the link time both ways
// (--worker-links) and the parameter server's time per update (--ps-update-seconds), queued
// first come, first served. Revocations (--revoke, --revocation-model), joins (--virtual-joins)
// and notices happen on the virtual clock. Deterministic per --seed. The metrics are a real
// run's, with `virtual_seconds` and the cost of the virtual cluster; evidence kind E (real
// gradients, emulated time).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "app/train.hpp"

namespace mt {

// One worker's network link: a message of B bytes takes latency + B * 8 / (gbit_per_s * 1e9).
struct Link {
  double latency_seconds = 0.0001;
  double gbit_per_s = 10;
  double seconds(double bytes) const { return latency_seconds + bytes * 8 / (gbit_per_s * 1e9); }
};
// "0.1/10" (milliseconds / Gbit/s) for every worker, or one per worker, comma-separated; empty:
// the default (0.1 ms, 10 Gbit/s: one cloud zone). Throws UsageError.
std::vector<Link> parse_links(const std::string& spec, int workers);

// A worker that joins on the virtual clock: "k80@step=16000" or "k80@2h" (s, m, h).
struct VirtualJoin {
  std::string type;
  std::int64_t step = -1;
  double seconds = -1;
};
std::vector<VirtualJoin> parse_virtual_joins(const std::string& spec);

// The parameter server's time per update when --ps-update-seconds is not given: 0.11 ms per
// ResNet-32 (464,154 parameters) update, measured with bench/ps_bench (one shard, shared memory,
// about 9,000 updates/s on the 2-core development machine), in proportion to the parameters.
double default_ps_update_seconds(std::int64_t params);

TrainResult train_virtual(const TrainConfig& cfg, std::ostream& log);

}  // namespace mt
