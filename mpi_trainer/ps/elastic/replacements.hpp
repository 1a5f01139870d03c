// Replacement workers (--replace-workers): shard 0 starts a new worker process for each worker it
// drops (killed, revoked, cut off, hung past --failure-timeout), through MPI_Comm_spawn, so that a
// run keeps its worker count instead of shrinking until a restart. The spawned process runs
// `mpi_trainer join` with the job's flags; it finds its parameter server through
// MPI_Comm_get_parent instead of a port (no ompi-server: both MPI builds), and the shard takes its
// intercommunicator in as a late member exactly like an accepted joiner (shard_joins.cpp): it takes
// the free data slot, its cursor and the learning-rate policy's new count. MPI_Comm_spawn blocks
// (0.25 s with Open MPI 4.1, 1.1 s with 5.0 here): it runs on threads (kThreads, each spawning one
// process at a time, so that several slots are refilled at once), the update loop only polls.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace mt {

class WorkerSpawner {
 public:
  // `program` with `args` (argv[1..]) is what each replacement runs. At most `limit` spawns in
  // all (a replacement that keeps failing must not become a fork loop).
  WorkerSpawner(std::string program, std::vector<std::string> args, int limit);
  ~WorkerSpawner() { finish(); }
  static constexpr int kThreads = 4;  // spawns at once at most
  // No more spawns; waits for those under way (about a second; one that hangs is left behind),
  // whose connections take() then returns, for its caller to answer.
  void finish();
  WorkerSpawner(const WorkerSpawner&) = delete;
  WorkerSpawner& operator=(const WorkerSpawner&) = delete;

  // One more replacement, started on the thread. False: the limit is reached or spawning failed
  // 3 times in a row (`why_not` says which), nothing requested.
  bool request(std::string* why_not);
  // Spawned connections (or a failure) wait to be taken. Cheap: an atomic load.
  bool pending() const;
  // Requested and not yet taken: the shard waits for them before it calls the job over.
  int outstanding() const;
  // The connections spawned since the last call; `error` is set when a spawn failed
  // (MPI_Comm_spawn is not supported by every launcher, e.g. srun's PMI; or no slot was free).
  std::vector<MPI_Comm> take(std::string* error);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mt
