// MPI for the trainer: initialised only when the process was started by an MPI launcher, so a
// plain `mpi_trainer train` never touches MPI. Every MPI call goes through MT_MPI, which turns a
// failure into a LibraryError naming the call, file and line.
#pragma once

#include <mpi.h>

#include <string>

namespace mt {

void check_mpi(int rc, const char* call, const char* file, int line);
#define MT_MPI(call) ::mt::check_mpi((call), #call, __FILE__, __LINE__)

// Size of the job as the launcher announced it in the environment (1 when not launched by one).
int launcher_world_size();

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);  // MPI_Init_thread(FUNNELED): only the main thread calls MPI
  ~MpiSession();                         // MPI_Finalize; never throws
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace mt
