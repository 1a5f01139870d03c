#include "dist/mpi_env.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace mt {

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw LibraryError("MPI", std::string(text, static_cast<std::size_t>(len)), call, file, line);
}

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var); v && *v) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  MT_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as return codes, checked by MT_MPI, instead of aborting the job.
  MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiSession::~MpiSession() { MPI_Finalize(); }

}  // namespace mt
