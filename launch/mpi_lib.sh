# Sourced by launch/mpirun.sh and the bench/ scripts: the mpirun that goes with a trainer build.
#
#   mt_mpirun_for TRAINER   sets the array MT_MPIRUN to that build's mpirun with fault tolerance
#                           on: --enable-recovery (a dead rank does not end the job), plus
#                           --with-ft ulfm for a ULFM build (Open MPI 5: MPI reports a dead
#                           process within milliseconds). The build is read from
#                           `TRAINER --version` ("failure detection: ULFM ...", "mpirun: PATH");
#                           $MPIRUN, when set, names the mpirun instead. Sets MT_MPI_ULFM to 1 or 0.
#                           Returns 1 (with a message) when no usable mpirun is found.
#   mt_mpirun_for TRAINER --iface IF   the same, with every MPI channel on interface IF: Open MPI
#                           4.1's oob or 5's PMIx channel (ptl), and the TCP transport.
#   mt_mpirun_for TRAINER --loopback   --iface lo (tests and benchmarks on one machine).
mt_mpirun_for() {
  local trainer=$1 iface="" version mpirun=${MPIRUN:-}
  case ${2:-} in
    --loopback) iface=lo ;;
    --iface) iface=${3:?mt_mpirun_for: --iface needs an interface} ;;
  esac
  version=$("$trainer" --version 2>/dev/null) || { echo "'$trainer --version' failed: not an mpi_trainer build?" >&2; return 1; }
  if [[ -z $mpirun ]]; then
    mpirun=$(sed -n 's/^mpirun: \(\/.*\)/\1/p' <<<"$version")
    [[ -n $mpirun && -x $mpirun ]] || mpirun=mpirun
  fi
  command -v "$mpirun" >/dev/null || { echo "no mpirun '$mpirun' (set MPIRUN to its path)" >&2; return 1; }
  MT_MPIRUN=("$mpirun" --enable-recovery)
  MT_MPI_ULFM=0
  if grep -q '^failure detection: ULFM' <<<"$version"; then
    # Open MPI 5's runtime ends the whole job when one rank exits non-zero, even with recovery on
    # (a worker's exit 10 killed the other workers before they said why): off, as in Open MPI 4.1.
    MT_MPIRUN+=(--with-ft ulfm --prtemca state_base_error_non_zero_exit 0)
    MT_MPI_ULFM=1
  fi
  if [[ -n $iface ]]; then
    if ((MT_MPI_ULFM)); then
      # Open MPI 5's runtime talks through PMIx's channel (ptl), 4.1's through its oob framework;
      # 5 warns about 4.1's OMPI_MCA_oob_tcp_if_include (deprecated): not passed on.
      MT_MPIRUN=(env -u OMPI_MCA_oob_tcp_if_include "${MT_MPIRUN[@]}" --pmixmca ptl_base_if_include "$iface")
    else
      MT_MPIRUN+=(--mca oob_tcp_if_include "$iface")
    fi
    MT_MPIRUN+=(--mca btl_tcp_if_include "$iface")
  fi
}
