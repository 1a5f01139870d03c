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

#include "plan/cluster_sim.hpp"
#include "app/config.hpp"
#include "app/train.hpp"

namespace mt {

TrainResult train_virtual(const TrainConfig& cfg, std::ostream& log);

}  // namespace mt
