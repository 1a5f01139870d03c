#include "ps/wire/ulfm.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"

// Set by mpi_trainer/CMakeLists.txt from the probe; 0 when built some other way.
#ifndef MT_HAVE_ULFM
#define MT_HAVE_ULFM 0
#endif

#ifndef MT_HAVE_PMIX
#define MT_HAVE_PMIX 0
#endif
#if MT_HAVE_ULFM && MT_HAVE_PMIX
#include <pmix.h>
#endif

#if MT_HAVE_ULFM && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI declares the MPIX_ functions and error classes there
#endif

namespace mt {

#ifndef MT_MPIEXEC
#define MT_MPIEXEC ""
#endif

bool ulfm_available() { return MT_HAVE_ULFM != 0; }

std::string mpi_library_name() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  // One of the calls allowed before MPI_Init; its text up to the first comma ("Open MPI v4.1.4").
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown MPI";
  std::string name(text, static_cast<std::size_t>(std::max(0, len)));
  name = name.substr(0, name.find_first_of(",\n"));
  while (!name.empty() && (name.back() == ' ' || name.back() == '\t'))
    name.pop_back();
  return name.empty() ? "unknown MPI" : name;
}

std::string failure_detection() { return ulfm_available() ? "ulfm+heartbeat" : "heartbeat"; }

std::string mpi_launcher_path() { return MT_MPIEXEC; }

#if MT_HAVE_ULFM
namespace {

// Frees a group on every path: checked (MT_MPI) by free(), best effort when unwinding.
struct GroupGuard {
  MPI_Group group = MPI_GROUP_NULL;
  GroupGuard() = default;
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;
  bool owns() const { return group != MPI_GROUP_NULL && group != MPI_GROUP_EMPTY; }
  void free() {
    if (owns()) MT_MPI(MPI_Group_free(&group));
    group = MPI_GROUP_NULL;
  }
  ~GroupGuard() {
    if (owns()) MPI_Group_free(&group);
  }
};

}  // namespace
#endif

std::vector<int> ulfm_failed_ranks(MPI_Comm comm) {
#if MT_HAVE_ULFM
  GroupGuard failed;
#if defined(MT_ULFM_GET_FAILED) && MT_ULFM_GET_FAILED
  // Acknowledge exactly the failures returned, so none is acknowledged unseen.
  MT_MPI(MPIX_Comm_get_failed(comm, &failed.group));
  int n = 0;
  MT_MPI(MPI_Group_size(failed.group, &n));
  int acked = 0;
  MT_MPI(MPIX_Comm_ack_failed(comm, n, &acked));
#else
  MT_MPI(MPIX_Comm_failure_ack(comm));
  MT_MPI(MPIX_Comm_failure_get_acked(comm, &failed.group));
  int n = 0;
  MT_MPI(MPI_Group_size(failed.group, &n));
#endif
  std::vector<int> ranks;
  if (n > 0) {
    GroupGuard all;
    MT_MPI(MPI_Comm_group(comm, &all.group));
    std::vector<int> in(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      in[static_cast<std::size_t>(i)] = i;
    std::vector<int> out(in.size(), MPI_UNDEFINED);
    MT_MPI(MPI_Group_translate_ranks(failed.group, n, in.data(), all.group, out.data()));
    all.free();
    for (int r : out)
      if (r != MPI_UNDEFINED) ranks.push_back(r);
    std::sort(ranks.begin(), ranks.end());
  }
  failed.free();
  return ranks;
#else
  (void)comm;
  return {};
#endif
}

bool ulfm_is_proc_failed(int mpi_error_code) {
#if MT_HAVE_ULFM
  if (mpi_error_code == MPI_SUCCESS) return false;
  // Before MPI_Init (or after MPI_Finalize) compare the code itself: predefined classes are codes.
  int initialized = 0;
  int finalized = 0;
  MT_MPI(MPI_Initialized(&initialized));
  MT_MPI(MPI_Finalized(&finalized));
  int error_class = mpi_error_code;
  if (initialized && !finalized) MT_MPI(MPI_Error_class(mpi_error_code, &error_class));
  if (error_class == MPIX_ERR_PROC_FAILED) return true;
#ifdef MPIX_ERR_REVOKED
  if (error_class == MPIX_ERR_REVOKED) return true;
#endif
  return false;
#else
  (void)mpi_error_code;
  return false;
#endif
}

void ulfm_revoke(MPI_Comm comm) {
#if MT_HAVE_ULFM
  MT_MPI(MPIX_Comm_revoke(comm));
#else
  (void)comm;
  throw Error(kExitInternal, "ulfm_revoke: this build has no ULFM");
#endif
}

bool ulfm_is_revoked(MPI_Comm comm) {
#if MT_HAVE_ULFM
  int flag = 0;
  MT_MPI(MPIX_Comm_is_revoked(comm, &flag));
  return flag != 0;
#else
  (void)comm;
  return false;
#endif
}

MPI_Comm ulfm_shrink(MPI_Comm comm) {
#if MT_HAVE_ULFM
  MPI_Comm shrunk = MPI_COMM_NULL;
  MT_MPI(MPIX_Comm_shrink(comm, &shrunk));
  MT_MPI(MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN));
  return shrunk;
#else
  (void)comm;
  throw Error(kExitInternal, "ulfm_shrink: this build has no ULFM");
#endif
}

namespace {

#if MT_HAVE_ULFM && MT_HAVE_PMIX
// A PMIx reference for one call (the MPI library initialised PMIx already: PMIx_Init takes a
// reference, PMIx_Finalize drops it) and the job's namespace.
struct PmixRef {
  pmix_proc_t me;
  pmix_status_t rc;
  PmixRef() { rc = PMIx_Init(&me, nullptr, 0); }
  ~PmixRef() {
    if (rc == PMIX_SUCCESS) PMIx_Finalize(nullptr, 0);
  }
  PmixRef(const PmixRef&) = delete;
  PmixRef& operator=(const PmixRef&) = delete;
};

bool pmix_ok(pmix_status_t rc) { return rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED; }
#endif

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

}  // namespace

bool ulfm_report_failed(MPI_Comm comm, int rank, int* world_rank, std::string* why) {
#if MT_HAVE_ULFM && MT_HAVE_PMIX
  // PMIx names a process by the job's namespace and its rank in MPI_COMM_WORLD.
  int w = MPI_UNDEFINED;
  try {
    GroupGuard in, world;
    MT_MPI(MPI_Comm_group(comm, &in.group));
    MT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world.group));
    MT_MPI(MPI_Group_translate_ranks(in.group, 1, &rank, world.group, &w));
    in.free();
    world.free();
  } catch (const Error& e) {
    return fail(why, e.what());
  }
  if (w == MPI_UNDEFINED) return fail(why, "rank " + std::to_string(rank) + " is not in MPI_COMM_WORLD");
  if (world_rank) *world_rank = w;
  PmixRef pmix;
  if (pmix.rc != PMIX_SUCCESS) return fail(why, std::string("PMIx_Init: ") + PMIx_Error_string(pmix.rc));
  pmix_proc_t target;
  PMIX_PROC_LOAD(&target, pmix.me.nspace, static_cast<pmix_rank_t>(w));
  // The event every ULFM process listens for (as when the runtime sees a process abort): each
  // marks the process failed. Delivered to the whole job (its namespace), this process included.
  pmix_info_t affected;
  PMIX_INFO_LOAD(&affected, PMIX_EVENT_AFFECTED_PROC, &target, PMIX_PROC);
  const pmix_status_t rc =
      PMIx_Notify_event(PMIX_ERR_PROC_ABORTED, &pmix.me, PMIX_RANGE_NAMESPACE, &affected, 1, nullptr, nullptr);
  PMIX_INFO_DESTRUCT(&affected);
  if (!pmix_ok(rc)) return fail(why, std::string("PMIx_Notify_event: ") + PMIx_Error_string(rc));
  return true;
#else
  (void)comm;
  (void)rank;
  (void)world_rank;
  return fail(why, MT_HAVE_ULFM ? "this build has no PMIx (cmake/ULFMProbe.cmake)" : "this build has no ULFM");
#endif
}

bool ulfm_end_process(int world_rank, std::string* why) {
#if MT_HAVE_ULFM && MT_HAVE_PMIX
  PmixRef pmix;
  if (pmix.rc != PMIX_SUCCESS) return fail(why, std::string("PMIx_Init: ") + PMIx_Error_string(pmix.rc));
  pmix_proc_t target;
  PMIX_PROC_LOAD(&target, pmix.me.nspace, static_cast<pmix_rank_t>(world_rank));
  pmix_info_t kill;
  PMIX_INFO_LOAD(&kill, PMIX_JOB_CTRL_KILL, nullptr, PMIX_BOOL);
  // Blocking: the caller may end right after, before a non-blocking request left.
  const pmix_status_t rc = PMIx_Job_control(&target, 1, &kill, 1, nullptr, nullptr);
  PMIX_INFO_DESTRUCT(&kill);
  if (!pmix_ok(rc)) return fail(why, std::string("PMIx_Job_control (kill): ") + PMIx_Error_string(rc));
  return true;
#else
  (void)world_rank;
  return fail(why, MT_HAVE_ULFM ? "this build has no PMIx (cmake/ULFMProbe.cmake)" : "this build has no ULFM");
#endif
}

}  // namespace mt
