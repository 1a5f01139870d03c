# rank_pid R: the pid of MPI rank R of our job, empty until it runs (or when it is gone): a
# process of `$trainer train` whose environment says that rank and whose command line names the
# job's directory `$dir`. Sourced by tests/fault_lib.sh and bench/faults/chaos.sh.
rank_pid() {
  local p
  for p in $(pgrep -f "$trainer train" 2>/dev/null); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
       tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "$dir/"; then
      echo "$p"; return
    fi
  done
}
