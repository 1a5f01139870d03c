#include "ps/wire/mpi_env.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "ps/wire/protocol.hpp"
#include "ps/wire/ulfm.hpp"

namespace mt {

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "error " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(len));
}

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  if (ulfm_is_proc_failed(rc)) throw ProcessFailed("MPI", mpi_error_text(rc), call, file, line);
  throw LibraryError("MPI", mpi_error_text(rc), call, file, line);
}

int launcher_world_size() {
  const auto positive = [](const char* var) {
    const char* v = std::getenv(var);
    return v && *v ? std::max(0, std::atoi(v)) : 0;
  };
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const int n = positive(var); n > 0) return n;
  // srun --mpi=pmix announces the step's size only in Slurm's own variables.
  if (const int n = positive("SLURM_STEP_NUM_TASKS"); n > 1) {
    if (std::getenv("PMIX_RANK") || std::getenv("PMI_RANK")) return n;
    throw UsageError("started by srun as one of " + std::to_string(n) +
                     " tasks without an MPI plugin: the tasks would train alone, side by side; launch with "
                     "`srun --mpi=pmix` (Open MPI) or `--mpi=pmi2` (MPICH)");
  }
  return 1;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return -1;
}

bool tcp_eager_up_to(std::int64_t payload_floats) {
  // Open MPI's defaults (4.1 and 5): btl_tcp_eager_limit 64 KB, btl_tcp_max_send_size 128 KB. The
  // limit counts the library's own headers too (a few dozen bytes): room for them.
  constexpr std::int64_t kEagerLimit = 64 * 1024, kMaxSendSize = 128 * 1024, kLibraryHeaders = 4096;
  const std::int64_t bytes = (payload_floats + kHeaderFloats) * std::int64_t(sizeof(float)) + kLibraryHeaders;
  const char* limit = "OMPI_MCA_btl_tcp_eager_limit";
  const char* fragment = "OMPI_MCA_btl_tcp_max_send_size";
  if (bytes <= kEagerLimit || std::getenv(limit) || std::getenv(fragment)) return false;
  MT_CHECK_POSIX(setenv(limit, std::to_string(bytes).c_str(), 0) == 0);
  MT_CHECK_POSIX(setenv(fragment, std::to_string(std::max(bytes, kMaxSendSize)).c_str(), 0) == 0);
  return true;
}

MpiSession::MpiSession(int* argc, char*** argv, int thread_level) {
  int provided = 0;
  MT_MPI(MPI_Init_thread(argc, argv, thread_level, &provided));
  if (provided < thread_level) {
    MPI_Finalize();
    throw Error(kExitInternal, "the MPI library gives thread level " + std::to_string(provided) +
                                   ", the trainer needs " + std::to_string(thread_level) +
                                   " (MPI_THREAD_SERIALIZED for the workers' heartbeats, "
                                   "MPI_THREAD_MULTIPLE for --max-workers)");
  }
  // Errors come back as return codes, checked by MT_MPI, instead of aborting the job.
  MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

int MpiSession::abort_job(int exit_code) {
  std::cout << std::flush;
  std::cerr << std::flush;
  leave_unfinalized();
  MPI_Abort(MPI_COMM_WORLD, exit_code);  // does not return in Open MPI 4.1 or 5
  return exit_code;
}

int MpiSession::finalize(int exit_code, double timeout_s) {
  if (finalized_) return exit_code;
  finalized_ = true;
  std::cout << std::flush;
  std::cerr << std::flush;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  // The one exit outside main: MPI_Finalize cannot be interrupted, so the watchdog ends the
  // process when it does not return (the last resort the MPI library forces; docs/fault-model.md).
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; })) return;
    std::cerr << "mpi_trainer: rank " << rank_ << ": MPI_Finalize did not return within " << timeout_s
              << " s (after a rank died it can wait for the dead rank, or for shard 0's final evaluation): exiting "
              << exit_code << " without it\n"
              << std::flush;
    std::_Exit(exit_code);
  });
  MPI_Finalize();
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  return exit_code;
}

namespace {
std::atomic<bool> left_unfinalized{false};
}  // namespace

bool mpi_left_unfinalized() { return left_unfinalized; }

void MpiSession::leave_unfinalized() {
  finalized_ = true;
  left_unfinalized = true;
}

MpiSession::~MpiSession() {
  if (!finalized_) MPI_Finalize();
}

}  // namespace mt
