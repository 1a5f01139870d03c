// MPI for the trainer: initialised only when the process was started by an MPI launcher, so a
// plain `mpi_trainer train` never touches MPI. Every MPI call goes through MT_MPI, which turns a
// failure into a LibraryError naming the call, file and line.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace mt {

// An MPI call failed because a peer process died: the ULFM error classes MPIX_ERR_PROC_FAILED and
// MPIX_ERR_REVOKED (ps/wire/ulfm.hpp). Never thrown by an MPI without ULFM. Callers that know which peer
// the call was about drop that peer (a worker) or give up on it (the parameter server).
class ProcessFailed : public LibraryError {
 public:
  using LibraryError::LibraryError;
};

// The MPI library's text for error code `rc` ("error N" when it has none).
std::string mpi_error_text(int rc);
// Throws ProcessFailed for a peer's failure, LibraryError for any other error code.
void check_mpi(int rc, const char* call, const char* file, int line);
#define MT_MPI(call) ::mt::check_mpi((call), #call, __FILE__, __LINE__)

// Size of the job as the launcher announced it in the environment (1 when not launched by one):
// mpirun, PMI/PMIx launchers, or srun --mpi=pmix|pmi2 (UsageError for srun tasks with no MPI plugin).
int launcher_world_size();
// This process's rank as the launcher announced it, before MPI starts (-1: not launched by one).
int launcher_rank();

// Open MPI's TCP transport sends a message above its eager limit (64 KB by default) by rendezvous:
// the first fragment, then the rest once the receiver's answer came back. On a parameter server's
// link near saturation that answer crosses the other direction, queued behind replies or pushes,
// while the message's own direction idles: measured on namespace nodes with 25-200 Mbit/s links,
// 2-5 workers took 8-12% more global steps/s with every message sent at once (the median shape;
// up to 24% more; bench/README.md, "Eager messages"). Before MPI_Init: sets the TCP transport's
// eager limit and fragment size (OMPI_MCA_btl_tcp_eager_limit, OMPI_MCA_btl_tcp_max_send_size,
// read by both MPI builds; other transports and MPIs ignore them) so that messages of up to
// `payload_floats` go at once, their header and the library's beside them, unless the
// environment sets either already (the user's choice stands) or the defaults carry them already.
// Returns whether it set them.
bool tcp_eager_up_to(std::int64_t payload_floats);

// Whether an MpiSession of this process was left unfinalized (MpiSession::leave_unfinalized).
bool mpi_left_unfinalized();

class MpiSession {
 public:
  // MPI_Init_thread(SERIALIZED): a worker's heartbeat thread calls MPI too, one thread at a time
  // (a mutex); fails when the library cannot give that.
  // MPI_THREAD_MULTIPLE when asked (elastic joins: an accept thread on shard 0).
  MpiSession(int* argc, char*** argv, int thread_level = MPI_THREAD_SERIALIZED);
  ~MpiSession();  // MPI_Finalize unless finalize() ran; never throws
  // MPI_Finalize within `timeout_s`, else the process exits with `exit_code` without it: Open
  // MPI 4.1's finalize can wait forever in its PMIx fence after a rank of the job died
  // (measured here under mpirun --enable-recovery; docs/fault-model.md). Returns exit_code.
  int finalize(int exit_code, double timeout_s);
  // This process ends without MPI_Finalize (a lost parameter server, or a takeover: requests to the
  // dead are still posted and the finalize could wait for them): the destructor leaves MPI as it
  // is, and main ends the process with std::_Exit (mpi_left_unfinalized()), which runs no static
  // destructor of the MPI library.
  void leave_unfinalized();
  // Ends every process of the job (MPI_Abort on MPI_COMM_WORLD with `exit_code`), a stopped or hung
  // one included: the launcher kills them all. For a job that cannot end otherwise; returns only if
  // the abort does (then exit_code, and the process leaves without MPI_Finalize).
  int abort_job(int exit_code);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  bool finalized_ = false;
};

}  // namespace mt
