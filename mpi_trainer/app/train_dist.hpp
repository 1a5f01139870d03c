// Asynchronous parameter-server training over MPI (docs/architecture.md): ranks 0..S-1 are
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

// `mpi_trainer join`: this process (its own MPI job, sharing an ompi-server with the training
// job) connects to shard 0 through the port in the port file and works until the job ends.
// Needs the job's --max-workers and --num-ps 1. Returns the exit code (10: no parameter server),
// how long its MPI_Finalize may wait and whether to skip it (TrainResult).
TrainResult join_running_job(const TrainConfig& config, std::ostream& log);

}  // namespace mt
