#!/bin/bash
# The body of the sbatch templates (train.sbatch, hetjob.sbatch, ps.sbatch, worker.sbatch), which
# `exec` it so that Slurm's signal to the batch shell (--signal=B:USR1@...) reaches this script.
# MT_ROLE says what the job runs:
#   all     the parameter server and the workers in one MPI job (train.sbatch, hetjob.sbatch)
#   ps      the parameter server alone, with --max-workers slots, and an ompi-server for joins
#   worker  one worker that joins a running parameter server (`mpi_trainer join`)
# The training runs in the background; a signal is passed on as SIGUSR1; afterwards the job
# requeues itself unless training is done. The MT_* variables are described in train.sbatch.
set -uo pipefail
me=${MT_JOB_NAME:-job.sh}
role=${MT_ROLE:-all}
here=$(cd "$(dirname "$0")" && pwd)
loop=${MT_RESTART_LOOP:-$here/../launch/restart_loop.sh}
trainer=${MT_TRAINER:-mpi_trainer}
say() { echo "$me: $*"; }
die() { echo "$me: $*" >&2; exit 2; }
[[ -x $loop ]] || die "$loop not found: set MT_RESTART_LOOP to launch/restart_loop.sh"
# shellcheck source=../launch/mpi_lib.sh
source "$(dirname "$loop")/mpi_lib.sh"
# The trainer build's own mpirun with fault tolerance on (--enable-recovery; for a ULFM build,
# Open MPI 5 with --with-ft ulfm). A ULFM build cannot be started by srun (Open MPI does not
# support ULFM under a direct srun launch): it is started by mpirun inside the allocation.
mt_mpirun_for "$trainer" || die "cannot run '$trainer --version' or find its mpirun: set MT_TRAINER (and MPIRUN)"
if ((MT_MPI_ULFM)); then
  launcher=${MT_LAUNCHER:-mpirun}
  [[ $launcher == srun ]] && die "$trainer is a ULFM build (Open MPI 5, --with-ft ulfm): srun cannot start it; use MT_LAUNCHER=mpirun (its default)"
else
  launcher=${MT_LAUNCHER:-srun}
fi
case $role in
  all|ps) ckpt=${MT_CKPT_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_ID} ;;
  # Workers use the parameter server's directory: its port file and status live there.
  worker) ckpt=${MT_CKPT_DIR:-${MT_PS_JOB:+$SLURM_SUBMIT_DIR/runs/$MT_PS_JOB}}
          [[ -n $ckpt ]] || die "a worker job needs MT_CKPT_DIR (the parameter server's) or MT_PS_JOB (its job id)" ;;
  *) die "MT_ROLE must be all, ps or worker, not '$role'" ;;
esac
mkdir -p "$ckpt"
status=$ckpt/run-status.json
# MT_REPORT=1: the loop writes the run's report when it ends (the parameter server's metrics).
[[ ${MT_REPORT:-0} == 1 && $role != worker ]] && export MT_REPORT_DIR=${MT_REPORT_DIR:-$ckpt/report}
# This job for scontrol: an array task by its own name (the array's id would requeue every task).
self=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID:-}}
self=${self:-$SLURM_JOB_ID}
nodes=$SLURM_JOB_NODELIST
for ((g = 1; g < ${SLURM_HET_SIZE:-0}; g++)); do v=SLURM_JOB_NODELIST_HET_GROUP_$g; nodes+=" + ${!v}"; done
say "job $self ($role) start $((${SLURM_RESTART_COUNT:-0} + 1)) on $nodes" \
  "($SLURM_NTASKS tasks) at $(date -u +%FT%T.%NZ), checkpoints in $ckpt"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# The model, data and batch flags every role shares (a joining worker must match the PS's).
# shellcheck disable=SC2206  # MT_TRAIN_ARGS is a list of flags
common=(--model "${MT_MODEL:-resnet32}" --train-steps "${MT_TRAIN_STEPS:-64000}" --batch-size "${MT_BATCH_SIZE:-128}"
        ${MT_DATA:+--data "$MT_DATA"} --ckpt-dir "$ckpt" ${MT_TRAIN_ARGS:-})
ps_flags=(--resume auto --ckpt-every-steps "${MT_CKPT_EVERY_STEPS:-500}"
          --ckpt-every-seconds "${MT_CKPT_EVERY_SECONDS:-300}" --metrics "$ckpt/metrics.jsonl")
mpirun=("${MT_MPIRUN[@]}" -x OMP_WAIT_POLICY)
# Open MPI 4.1's mpirun passes TERM on to the ranks only this long before its SIGKILL (the ranks
# checkpoint on the USR1 this script sends first); Open MPI 5's runtime has no such setting.
((MT_MPI_ULFM)) || mpirun+=(--mca odls_base_sigkill_timeout 30)
# ps and worker run one process on this node: Open MPI's Slurm support is turned off, so no
# daemon is started through srun (on the one-host test cluster, whose node names are not host
# names, it would try to reach this node as a remote one and fail).
alone=(--mca ras ^slurm --mca plm ^slurm -np 1)

# The parameter server's state in its status file: running, done, requeue, lost ("" when none yet).
ps_state() { grep -o '"state": *"[a-z]*"' "$status" 2>/dev/null | grep -o '[a-z]*"$' | tr -d '"'; }
server=0
uri=$ckpt/ompi-server.uri
case $role in
  all)
    # A heterogeneous job (slurm/hetjob.sbatch) is one MPI job over all its components.
    het=()
    if [[ -n ${SLURM_HET_SIZE:-} ]]; then
      het=(--het-group="0-$((SLURM_HET_SIZE - 1))")
      ((MT_MPI_ULFM)) && die "a heterogeneous job is started by srun, which cannot start a ULFM build: use slurm/train.sbatch"
      [[ $launcher == srun ]] || die "a heterogeneous job needs MT_LAUNCHER=srun"
    fi
    case $launcher in
      srun) launch=(srun "${het[@]}" --mpi=pmix --no-kill --kill-on-bad-exit=0 --export=ALL) ;;
      # Open MPI's mpirun reads the allocation itself; TERM reaches the ranks 30 s before SIGKILL.
      mpirun) launch=("${mpirun[@]}" -x MT_RESTART_ATTEMPT) ;;
      *) die "MT_LAUNCHER must be srun or mpirun, not '$launcher'" ;;
    esac
    cmd=("$loop" --attempts "${MT_ATTEMPTS:-3}" --status "$status" -- "${launch[@]}" "$trainer" train "${common[@]}" "${ps_flags[@]}") ;;
  ps|worker) ((MT_MPI_ULFM)) &&
      die "MT_ROLE=$role joins workers through Open MPI 4.1's ompi-server; the ULFM build (Open MPI 5) has none: use the default build for ps.sbatch/worker.sbatch"
    ;;&
  ps)
    # Joins go through an ompi-server that every worker job reaches (its URI on shared storage).
    rm -f "$uri" "$ckpt/ps-port"
    ompi-server --no-daemonize -r "$uri" &
    server=$!
    for ((i = 0; i < 100; i++)); do [[ -s $uri ]] && break; sleep 0.1; done
    [[ -s $uri ]] || die "ompi-server wrote no URI to $uri"
    cmd=("$loop" --attempts "${MT_ATTEMPTS:-3}" --status "$status" -- "${mpirun[@]}" -x MT_RESTART_ATTEMPT "${alone[@]}"
         --ompi-server "file:$uri" "$trainer" train "${common[@]}" "${ps_flags[@]}" --max-workers "${MT_MAX_WORKERS:-4}") ;;
  worker)
    [[ $(ps_state) == done ]] && { say "the parameter server's training is done: nothing to join"; exit 0; }
    for ((i = 0; i < ${MT_JOIN_WAIT:-600}; i++)); do [[ -s $uri ]] && break; sleep 1; done
    [[ -s $uri ]] || { say "no parameter server's ompi-server URI in $uri: requeueing"; scontrol requeue "$self"; exit 75; }
    cmd=("${mpirun[@]}" "${alone[@]}" --ompi-server "file:$uri" "$trainer" join "${common[@]}") ;;
esac

# The requeue request (MT_MAX_REQUEUES caps the restarts). Under a preemption Slurm requeues the
# job itself and refuses the request, which is fine.
request_requeue() {
  if ((${SLURM_RESTART_COUNT:-0} >= ${MT_MAX_REQUEUES:-20})); then
    say "not requeueing: already restarted ${SLURM_RESTART_COUNT:-0} times (MT_MAX_REQUEUES)"
  else
    scontrol requeue "$self" 2>&1 | sed "s/^/$me: scontrol requeue: /"
  fi
}
# After Slurm's SIGTERM (a node failure, a requeue, scancel), which it follows with SIGKILL
# KillWait seconds later, the parameter server's roles do not wait for the MPI job to end before
# they ask for the requeue: if it still runs at three quarters of KillWait (a parameter server hung
# in MPI after a peer's death, srun waiting for tasks on a lost node) they ask then, whatever the
# training is doing, and the restart resumes from the newest durable checkpoint. A heterogeneous
# job whose worker node failed needs it: Slurm requeues its first component itself, only this
# request requeues the others, and when this script was killed first the job stayed pending for
# ever (tests/test_slurm_preempt.sh, HOW=down-hung-ps; docs/fault-model.md, "Slurm"). Otherwise
# the request follows the MPI job's end, below: a requeue asked sooner would end its teardown.
marks=$(mktemp -d "${TMPDIR:-/tmp}/mt-job.XXXXXX") || die "mktemp failed"
watcher=0
trap '((watcher)) && kill "$watcher" 2>/dev/null; rm -rf "$marks"' EXIT
watch_requeue() {
  trap '' TERM USR1  # Slurm's SIGTERM reaches every process of the job: this one lives on to act on it
  local kill_wait by
  kill_wait=$(scontrol show config 2>/dev/null | sed -n 's/^KillWait *= *\([0-9]*\).*/\1/p')
  kill_wait=${kill_wait:-30}  # Slurm's default
  by=$(($(date +%s) + kill_wait * 3 / 4))
  while kill -0 "$child" 2>/dev/null; do
    if (($(date +%s) >= by)); then
      case $(ps_state) in
        running|lost|requeue)
          say "still training $((kill_wait * 3 / 4)) s after the SIGTERM (Slurm's SIGKILL follows ${kill_wait} s after it): requeueing now, to resume from the newest durable checkpoint"
          request_requeue
          touch "$marks/requested" ;;
      esac
      return
    fi
    sleep 0.2
  done
}
child=0 noticed=0
notice() {
  noticed=1
  say "SIG$1 at $(date -u +%FT%T.%NZ): checkpoint/leave and requeue"
  ((child)) && kill -USR1 "$child" 2>/dev/null
  if [[ $1 == TERM && $role != worker ]] && ((child && !watcher)); then
    watch_requeue &
    watcher=$!
  fi
}
trap 'notice USR1' USR1
trap 'notice TERM' TERM
"${cmd[@]}" &
child=$!
wait "$child"; rc=$?
while ((rc > 128)) && kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done  # a trap interrupted wait
if ((server)); then
  rm -f "$uri"  # no late worker connects to a server that is gone
  kill "$server" 2>/dev/null
fi
say "job $self training ended with $rc at $(date -u +%FT%T.%NZ)"

# The parameter server's state decides: done, or run again later (requeue). A worker that was
# told to stop without a notice of its own waits for the parameter server's final state.
state=$(ps_state)
# An attempt that failed before its parameter server wrote a status leaves the previous
# attempt's status in .prev (launch/restart_loop.sh): the training did start.
[[ -z $state && -f $status.prev ]] && state=$(status=$status.prev; ps_state)
if [[ $role == worker ]] && ((rc == 0 && ! noticed)); then
  for ((i = 0; i < 120; i++)); do [[ $state == running ]] || break; sleep 0.5; state=$(ps_state); done
fi
if [[ $state == done ]]; then
  exit 0
elif [[ $role == worker || ($rc == 75 && ($state == requeue || $state == running || $state == lost)) ]]; then
  # A notice with a durable checkpoint (requeue), a parameter server lost after it started
  # (running, or lost: its standby wrote its replica), or a worker that left or lost its
  # parameter server while training goes on.
  ((watcher)) && wait "$watcher" 2>/dev/null
  [[ -e $marks/requested ]] || request_requeue
  exit 75
elif ((rc == 75)); then
  say "the training never started (no status in $ckpt from any attempt): not requeueing; see the errors above"
  exit 1
fi
exit "$rc"
