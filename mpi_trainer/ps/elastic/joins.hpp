// Elastic joins (--max-workers; the paper's "sparse mapping": slots filled later). Shard 0 opens
// an MPI port, publishes it in a port file, and accepts connections from `mpi_trainer join`
// processes on a thread; the update loop takes the new communicators when it polls. Joiners read
// the port file and connect one at a time (a file lock: simultaneous connects through ompi-server
// hung 4 of 5 times here, docs/fault-model.md). Only a joiner that proves the job's secret gets in
// (ps/elastic/join_auth.hpp): the accept thread runs the handshake, so the update loop never waits on it.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace mt {

class JoinListener {
 public:
  // Opens the port and writes `port_file` atomically: {"port": ..., "pid": ..., plus `about`
  // (a JSON object's members: model, batch size, slots)}. Starts the accept thread, which admits a
  // connection only when it proves `secret` within `auth_seconds`.
  JoinListener(const std::string& port_file, const std::string& about_json, std::string secret, double auth_seconds);
  // A connection (or an accept error) is waiting to be taken. Cheap: an atomic load.
  bool pending() const;
  // The connections admitted since the last call; `refused` gets why each refused one was (for
  // the log); `error` is set when accepting failed (no more joins will come).
  std::vector<MPI_Comm> take(std::vector<std::string>* refused, std::string* error);

  struct Queue;

 private:
  // Shared with the accept thread, which is never joined: it stays blocked in MPI_Comm_accept
  // until the process ends (MPI_Finalize returns with it blocked, measured with Open MPI 4.1;
  // connecting to one's own port to wake it hangs), so what it uses outlives the listener.
  std::shared_ptr<Queue> queue_;
};

}  // namespace mt
