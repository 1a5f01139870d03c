// Asynchronous parameter-server training over MPI (DESIGN.md §2): ranks 0..S-1 are
// parameter-server shards, the others workers. Each push a shard applies is one global step.
#pragma once

#include <iosfwd>

#include "app/config.hpp"
#include "app/train.hpp"

namespace mt {

class MpiSession;

// Runs this rank's role. Returns the result on PS shard 0 (the one that reports); other ranks
// return what they know of it.
TrainResult train_distributed(const TrainConfig& config, MpiSession& mpi, std::ostream& log);

}  // namespace mt
