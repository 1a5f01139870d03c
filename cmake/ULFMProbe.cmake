# ULFM (User-Level Failure Mitigation) probe, included right after find_package(MPI).
#
#   MT_ULFM           AUTO (default): use ULFM when the probe passes; ON: fail configuration when
#                     it does not; OFF: do not probe.
#   MT_HAVE_ULFM      result, 0 or 1 (compile definition of mt_ps).
#   MT_ULFM_SPELLING  "get_failed" (MPIX_Comm_get_failed + MPIX_Comm_ack_failed: the MPI-4 ULFM
#                     proposal, Open MPI 5, MPICH >= 4.1) or "failure_ack" (MPIX_Comm_failure_ack +
#                     MPIX_Comm_failure_get_acked: Open MPI 4.x ULFM builds, older MPICH); empty
#                     without ULFM.
#
# A symbol check is not enough: Debian's MPICH 4.0.2 exports MPIX_Comm_* stubs that abort at run
# time even when no process failed. So the probe (below) is built and run once per
# spelling, at most two try_run in all, as a singleton (no mpirun), and ULFM counts as available
# only when the calls return MPI_SUCCESS. Results are cached (MT_ULFM_PROBE_*): delete them, or
# the cache, after changing the MPI library.

set(MT_ULFM AUTO CACHE STRING "Use ULFM failure reporting: AUTO (when the probe passes), ON (required), OFF")
set_property(CACHE MT_ULFM PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${MT_ULFM}" _mt_ulfm_mode)
if(NOT _mt_ulfm_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "MT_ULFM must be AUTO, ON or OFF, not '${MT_ULFM}'")
endif()

# The probe program, written into the build tree (kept here so the probe is one file).
set(_mt_ulfm_probe_source [=[
// Configure-time ULFM probe (written by cmake/ULFMProbe.cmake): built with MT_PROBE_GET_FAILED or
// MT_PROBE_FAILURE_ACK and run as a singleton without mpirun. Exits 0 only when the ULFM calls
// return MPI_SUCCESS and report no failed process (there is none).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI declares MPIX_ there
#endif
#include <unistd.h>

#ifndef MPIX_ERR_PROC_FAILED
#error "MPIX_ERR_PROC_FAILED is not defined: this MPI has no ULFM"
#endif

int main(int argc, char** argv) {
  alarm(30);  // a singleton MPI_Init that hangs must not stall the configuration
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 2;
  int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Group failed = MPI_GROUP_NULL;
#if defined(MT_PROBE_GET_FAILED)
  if (rc == MPI_SUCCESS) rc = MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed);
  int acked = -1;
  if (rc == MPI_SUCCESS) rc = MPIX_Comm_ack_failed(MPI_COMM_WORLD, 0, &acked);
  if (rc == MPI_SUCCESS && acked != 0) rc = MPI_ERR_OTHER;
#elif defined(MT_PROBE_FAILURE_ACK)
  if (rc == MPI_SUCCESS) rc = MPIX_Comm_failure_ack(MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) rc = MPIX_Comm_failure_get_acked(MPI_COMM_WORLD, &failed);
#else
#error "define MT_PROBE_GET_FAILED or MT_PROBE_FAILURE_ACK"
#endif
  int n = -1;
  if (rc == MPI_SUCCESS) rc = MPI_Group_size(failed, &n);
  if (failed != MPI_GROUP_NULL && failed != MPI_GROUP_EMPTY) MPI_Group_free(&failed);
  MPI_Finalize();
  return rc == MPI_SUCCESS && n == 0 ? 0 : 1;
}
]=])

# The MPI library and its version, from mpi.h, for the status line.
function(_mt_mpi_library_name out)
  set(name "MPI ${MPI_CXX_VERSION}")
  find_file(_mt_mpi_h mpi.h PATHS ${MPI_CXX_HEADER_DIR} ${MPI_CXX_INCLUDE_DIRS} ${MPI_CXX_COMPILER_INCLUDE_DIRS}
            NO_DEFAULT_PATH NO_CACHE)
  if(_mt_mpi_h)
    file(STRINGS "${_mt_mpi_h}" defs REGEX "^#define[ \t]+(OMPI_(MAJOR|MINOR|RELEASE)_VERSION|MPICH_VERSION|I_MPI_VERSION)[ \t]")
    set(ompi "")
    foreach(part MAJOR MINOR RELEASE)
      if(defs MATCHES "OMPI_${part}_VERSION[ \t]+([0-9]+)")
        list(APPEND ompi ${CMAKE_MATCH_1})
      endif()
    endforeach()
    list(LENGTH ompi n)
    if(n EQUAL 3)
      list(JOIN ompi "." v)
      set(name "Open MPI ${v}")
    elseif(defs MATCHES "I_MPI_VERSION[ \t]+\"([^\"]+)\"")
      set(name "Intel MPI ${CMAKE_MATCH_1}")
    elseif(defs MATCHES "MPICH_VERSION[ \t]+\"([^\"]+)\"")
      set(name "MPICH ${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out} "${name}" PARENT_SCOPE)
endfunction()

# Builds and runs the probe for one spelling once; caches "ok", "no_symbols" or "run_failed".
function(_mt_ulfm_try spelling define)
  set(var MT_ULFM_PROBE_${spelling})
  if(DEFINED CACHE{${var}})
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/mt_ulfm_probe_${spelling})
  file(WRITE ${dir}/ulfm_probe.cpp "${_mt_ulfm_probe_source}")
  try_run(run_rc compile_ok ${dir} ${dir}/ulfm_probe.cpp
          COMPILE_DEFINITIONS -D${define}=1
          LINK_LIBRARIES MPI::MPI_CXX
          COMPILE_OUTPUT_VARIABLE compile_out
          RUN_OUTPUT_VARIABLE run_out)
  if(NOT compile_ok)
    set(result no_symbols)
  elseif("${run_rc}" STREQUAL "0")
    set(result ok)
  else()
    set(result run_failed)
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/CMakeFiles/mt_ulfm_probe_${spelling}.log
       "result: ${result}\ncompiled: ${compile_ok}\nexit: ${run_rc}\n--- run output\n${run_out}\n--- compile output\n${compile_out}\n")
  set(${var} ${result} CACHE INTERNAL "ULFM probe result for the ${spelling} spelling")
  unset(run_rc CACHE)
  unset(compile_ok CACHE)
endfunction()

set(_mt_ulfm_have 0)
set(_mt_ulfm_spelling "")
if(_mt_ulfm_mode STREQUAL "OFF")
  set(_mt_ulfm_why "MT_ULFM=OFF")
elseif(CMAKE_CROSSCOMPILING)
  set(_mt_ulfm_why "cross-compiling: the probe cannot run here")
else()
  _mt_mpi_library_name(_mt_mpi_name)
  _mt_ulfm_try(get_failed MT_PROBE_GET_FAILED)
  if(MT_ULFM_PROBE_get_failed STREQUAL "ok")
    set(_mt_ulfm_have 1)
    set(_mt_ulfm_spelling get_failed)
  else()
    _mt_ulfm_try(failure_ack MT_PROBE_FAILURE_ACK)
    if(MT_ULFM_PROBE_failure_ack STREQUAL "ok")
      set(_mt_ulfm_have 1)
      set(_mt_ulfm_spelling failure_ack)
    endif()
  endif()
  if(_mt_ulfm_have)
    if(_mt_ulfm_spelling STREQUAL "get_failed")
      set(_mt_ulfm_why "${_mt_mpi_name}, MPIX_Comm_get_failed/MPIX_Comm_ack_failed")
    else()
      set(_mt_ulfm_why "${_mt_mpi_name}, MPIX_Comm_failure_ack/MPIX_Comm_failure_get_acked")
    endif()
  elseif(MT_ULFM_PROBE_get_failed STREQUAL "run_failed" OR MT_ULFM_PROBE_failure_ack STREQUAL "run_failed")
    set(_mt_ulfm_why "${_mt_mpi_name}: MPIX_Comm_* build but fail at run time; see CMakeFiles/mt_ulfm_probe_*.log")
  else()
    set(_mt_ulfm_why "${_mt_mpi_name} without ULFM")
  endif()
endif()

set(MT_HAVE_ULFM ${_mt_ulfm_have} CACHE INTERNAL "1 when the MPI library passed the ULFM probe")
set(MT_ULFM_SPELLING "${_mt_ulfm_spelling}" CACHE INTERNAL "ULFM API spelling: get_failed or failure_ack")

if(MT_HAVE_ULFM)
  message(STATUS "ULFM: available (${_mt_ulfm_why}): failed ranks reported by MPI, heartbeats kept")
elseif(_mt_ulfm_mode STREQUAL "ON")
  message(FATAL_ERROR "ULFM: MT_ULFM=ON but not available (${_mt_ulfm_why})")
elseif(_mt_ulfm_mode STREQUAL "OFF")
  message(STATUS "ULFM: off (${_mt_ulfm_why}): failure detection by heartbeats only")
else()
  message(STATUS "ULFM: not available (${_mt_ulfm_why}): failure detection by heartbeats only")
endif()

# PMIx, the runtime interface of the MPI library itself (ULFM builds only): a worker reports a
# parameter server that is hung (stopped, not dead; no worker on its node to see it) failed
# through it, so that every survivor's ULFM excludes it and the runtime ends it (ps/wire/ulfm.cpp,
# docs/fault-model.md). The header may come from another PMIx release than the library (Debian's
# libpmix-dev beside the ULFM Open MPI's own libpmix): PMIx keeps its interface stable across
# releases. The library is the one the MPI library loads, found beside libmpi.
# Set MT_PMIX_LIBRARY and MT_PMIX_INCLUDE_DIR to choose them.
set(MT_HAVE_PMIX 0)
if(MT_HAVE_ULFM)
  set(_mt_mpi_lib_dirs "")
  set(_mt_mpi_include_hints "")
  foreach(_lib IN LISTS MPI_C_LIBRARIES MPI_CXX_LIBRARIES)
    if(_lib MATCHES "libmpi[.]")
      get_filename_component(_dir "${_lib}" DIRECTORY)
      list(APPEND _mt_mpi_lib_dirs "${_dir}" "${_dir}/openmpi")
      list(APPEND _mt_mpi_include_hints "${_dir}/../include")
    endif()
  endforeach()
  find_library(MT_PMIX_LIBRARY NAMES pmix libpmix.so.2 PATHS ${_mt_mpi_lib_dirs} NO_DEFAULT_PATH)
  find_path(MT_PMIX_INCLUDE_DIR pmix.h HINTS ${_mt_mpi_include_hints}
            PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/pmix2/include /usr/include/pmix)
  if(MT_PMIX_LIBRARY AND MT_PMIX_INCLUDE_DIR)
    set(MT_HAVE_PMIX 1)
    message(STATUS "ULFM: PMIx ${MT_PMIX_LIBRARY} (pmix.h in ${MT_PMIX_INCLUDE_DIR}): a hung parameter server is reported failed")
  else()
    message(WARNING "ULFM: no PMIx found (libpmix beside libmpi: '${MT_PMIX_LIBRARY}', pmix.h: "
                    "'${MT_PMIX_INCLUDE_DIR}'; install libpmix-dev): a hung parameter server with no worker on "
                    "its node is restarted, not taken over")
  endif()
endif()
