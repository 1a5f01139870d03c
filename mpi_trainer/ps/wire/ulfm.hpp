// ULFM (User-Level Failure Mitigation) when the MPI library has it, found at configure time by
// cmake/ULFMProbe.cmake (MT_HAVE_ULFM). Without it every function here is a no-op answer and the
// trainer detects failures by its heartbeats only (docs/fault-model.md).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace mt {

// Whether this build uses ULFM (the configure-time probe passed and MT_ULFM was not OFF).
bool ulfm_available();

// With ULFM: acknowledges the failures known locally on `comm` and returns the ranks in `comm` of
// the failed processes, ascending (world ranks when comm is MPI_COMM_WORLD). A local operation:
// another rank may know of more or fewer failures. Needs MPI initialised; throws LibraryError
// (MT_MPI) when a call fails. Without ULFM: an empty vector, no MPI call.
std::vector<int> ulfm_failed_ranks(MPI_Comm comm);

// Whether an MPI return code means a process failure: its error class is MPIX_ERR_PROC_FAILED or
// MPIX_ERR_REVOKED. Always false without ULFM, and for MPI_SUCCESS.
bool ulfm_is_proc_failed(int mpi_error_code);

// The takeover of a lost parameter server (docs/fault-model.md, "Takeover under ULFM"), ULFM only
// (an internal error without it). Revokes `comm`: every operation on it, pending or future, at
// every rank, fails with MPIX_ERR_REVOKED, so that each survivor learns of the loss at its next
// MPI call even if it had no business with the dead.
void ulfm_revoke(MPI_Comm comm);
// Collective over the survivors of `comm`: a new communicator of the processes alive, in the order
// of their ranks in `comm`, errors returned (MPI_ERRORS_RETURN). Throws ProcessFailed when another
// process fails during the shrink.
MPI_Comm ulfm_shrink(MPI_Comm comm);

// Reports the process at `rank` of `comm` failed, though it is alive (hung: stopped, a debugger, a
// stuck disk), through PMIx, the MPI library's own runtime interface: every process's ULFM then
// counts it failed (pending operations with it fail, a shrink leaves it out). Should it wake, its
// MPI library aborts it at its next call ("reported dead by someone else"). Its rank in
// MPI_COMM_WORLD goes to `world_rank`, for ulfm_end_process. Whether it was reported (`why`: why
// not). ULFM builds with PMIx only (cmake/ULFMProbe.cmake); never throws.
bool ulfm_report_failed(MPI_Comm comm, int rank, int* world_rank, std::string* why);
// Asks the runtime to end the process at `world_rank` (PMIX_JOB_CTRL_KILL: SIGCONT, SIGTERM, then
// SIGKILL), so that the job can end without it: a stopped process would keep the launcher waiting.
// Once the survivors have left it behind (a takeover): continued earlier, it could answer them.
// Whether the runtime took the request (`why`: why not); never throws.
bool ulfm_end_process(int world_rank, std::string* why);

// Whether `comm` was revoked (by any rank: a survivor that learned of a lost parameter-server
// shard). Local, never blocks. Always false without ULFM.
bool ulfm_is_revoked(MPI_Comm comm);

}  // namespace mt
