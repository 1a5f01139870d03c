#!/usr/bin/env bash
# Runs mpi_trainer with Open MPI's mpirun on an ad-hoc cluster (machines you can ssh into, no
# scheduler): rank 0 is the parameter server, the other ranks are workers, under
# launch/restart_loop.sh so that a lost parameter server is restarted from the newest checkpoint.
#
#   launch/mpirun.sh [options] -- TRAIN_FLAGS...
#
#   --hostfile FILE   Open MPI hostfile ("node1 slots=1", "gpu1 slots=4", ...); the first
#                     host gets rank 0, the parameter server. Default: this machine only.
#   --np N            processes (1 PS + N-1 workers with --num-ps 1). Default: the hostfile's
#                     slots, or 4 without a hostfile.
#   --attempts N      restarts from the newest checkpoint before giving up (default 3)
#   --grace S         seconds mpirun may run on once the run's status is final before the restart
#                     loop ends it (default 30; Open MPI 4.1's mpirun never exits after a rank on
#                     another node was killed: docs/fault-model.md, "Across nodes")
#   --iface IF        the network interface MPI uses (e.g. eth0, ib0); --loopback is lo only
#   --launch-agent P  start the daemons on the hostfile's hosts with P instead of ssh (Open MPI
#                     4.1's plm_rsh_agent, 5's plm_ssh_agent; each daemon started from mpirun's
#                     host, no tree spawn), e.g. the namespace cluster's agent
#                     (launch/netns-cluster/cluster.sh up prints its path)
#   --oversubscribe   allow more processes than cores (off unless asked)
#   --bind-to WHAT    mpirun's process binding (default none: each rank may use every core of
#                     its node, and the trainer divides them itself, --threads 0; mpirun's own
#                     default pins each rank to one core when there are 2 or fewer, which left a
#                     worker beside the parameter server one core of two: bench/perf/ps_cpu.sh)
#   --allow-root      let mpirun run as root (off unless asked; containers often need it)
#   --trainer PATH    the mpi_trainer binary, the same path on every host
#                     (default: build/release/mpi_trainer of this checkout; build/ulfm/mpi_trainer
#                     with MT_MPI=ulfm)
#   --mpirun PATH     the mpirun to start (default: $MPIRUN, else the one the trainer was built
#                     with, from `mpi_trainer --version`, else mpirun on PATH)
#   --dry-run         print the command and exit
#   TRAIN_FLAGS       `mpi_trainer train` flags; --ckpt-dir is required (shared storage on a
#                     cluster: a restarted parameter server may land on another host)
#
# mpirun runs with --enable-recovery (a dead worker does not end the job), with --with-ft ulfm when
# the trainer is a ULFM build (`mpi_trainer --version`: "failure detection: ULFM ..."; Open MPI 5:
# a dead process is reported by MPI within milliseconds, docs/fault-model.md), and
# odls_base_sigkill_timeout 30 (when mpirun itself is signalled, its ranks get SIGCONT at once,
# which the trainer takes as the notice, SIGTERM 30 s later and SIGKILL 60 s later). SIGTERM or
# SIGUSR1 to this script or its process group checkpoints and stops with exit 75, SIGINT (Ctrl-C)
# with 130; rerun the same command to resume (docs/fault-model.md, "Signals").
# Exit: 0 done, 75 stopped (resume by rerunning), 130 interrupted, 2 usage, else the trainer's code.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hostfile="" np="" attempts=3 grace=30 iface="" agent="" oversub=0 root=0 dry=0 mpirun=${MPIRUN:-} bind=none
trainer="$here/../build/release/mpi_trainer"
[[ ${MT_MPI:-} == ulfm ]] && trainer="$here/../build/ulfm/mpi_trainer"
# Installed (<prefix>/share/mpi_trainer/launch, no build tree beside it): the mpi_trainer on PATH.
[[ -x $trainer ]] || [[ -f $here/setup.sh ]] || trainer=$(command -v mpi_trainer || echo "$trainer")
usage() { sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "mpirun.sh: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --hostfile) hostfile=${2:?}; shift 2 ;;
    --np) np=${2:?}; shift 2 ;;
    --attempts) attempts=${2:?}; shift 2 ;;
    --grace) grace=${2:?}; shift 2 ;;
    --iface) iface=${2:?}; shift 2 ;;
    --loopback) iface=lo; shift ;;
    --launch-agent) agent=${2:?}; shift 2 ;;
    --oversubscribe) oversub=1; shift ;;
    --bind-to) bind=${2:?}; shift 2 ;;
    --allow-root) root=1; shift ;;
    --trainer) trainer=${2:?}; shift 2 ;;
    --mpirun) mpirun=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (training flags go after --; see --help)" ;;
  esac
done
(($#)) || die "no training flags after -- (at least --ckpt-dir DIR; see --help)"
[[ " $* " == *" --ckpt-dir "* || " $* " == *" --ckpt-dir="* ]] || die "the training flags need --ckpt-dir: there is nothing to restart from without it"
if [[ -n $hostfile ]]; then
  [[ -r $hostfile ]] || die "cannot read the hostfile '$hostfile'"
  slots=$(awk '!/^[[:space:]]*(#|$)/ { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) n = substr($i, 7); s += n } END { print s + 0 }' "$hostfile")
  ((slots > 0)) || die "no hosts in '$hostfile'"
  np=${np:-$slots}
fi
np=${np:-4}
[[ $np =~ ^[0-9]+$ ]] && ((np >= 2)) || die "--np must be at least 2 (a parameter server and a worker)"
[[ -x $trainer ]] || die "no mpi_trainer at '$trainer' (build it: launch/build.sh release, or pass --trainer)"
if ((root == 0 && dry == 0)) && [[ $(id -u) -eq 0 && -z ${OMPI_ALLOW_RUN_AS_ROOT:-} ]]; then
  die "running as root: Open MPI refuses that unless asked; pass --allow-root"
fi

# The mpirun the trainer was built with, and ULFM's run-time switch for a ULFM build.
source "$here/mpi_lib.sh"
MPIRUN=$mpirun mt_mpirun_for "$trainer" ${iface:+--iface "$iface"} || die "cannot start the trainer's MPI (pass --mpirun PATH)"
cmd=("${MT_MPIRUN[@]}")
# When mpirun itself is signalled, its ranks get SIGTERM after this many seconds (Open MPI 5's
# runtime, PRRTE, takes it as a prtemca parameter).
if ((MT_MPI_ULFM)); then cmd+=(--prtemca odls_base_sigkill_timeout 30); else cmd+=(--mca odls_base_sigkill_timeout 30); fi
if [[ -n $agent ]]; then
  [[ -x $agent ]] || die "the launch agent '$agent' is not an executable file"
  if ((MT_MPI_ULFM)); then
    cmd+=(--prtemca plm_ssh_agent "$agent" --prtemca plm_ssh_no_tree_spawn 1)
  else
    cmd+=(--mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1)
  fi
fi
cmd+=(-np "$np")
[[ -n $hostfile ]] && cmd+=(--hostfile "$hostfile")
((oversub)) && cmd+=(--oversubscribe)
cmd+=(--bind-to "$bind")
((root)) && cmd+=(--allow-run-as-root)
cmd+=(-x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT "$trainer" train "$@")
if ((dry)); then printf '%q ' "$here/restart_loop.sh" --attempts "$attempts" --grace "$grace" -- "${cmd[@]}"; echo; exit 0; fi
# exec: a signal to this script reaches the restart loop itself.
exec "$here/restart_loop.sh" --attempts "$attempts" --grace "$grace" -- "${cmd[@]}"
