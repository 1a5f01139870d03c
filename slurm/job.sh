#!/bin/bash
# The body of the sbatch templates (train.sbatch, hetjob.sbatch), which `exec` it so that Slurm's
# signal to the batch shell (--signal=B:USR1@...) reaches this script. Runs the training under
# launch/restart_loop.sh, passes the signal on as SIGUSR1, and requeues the job when the
# parameter server stopped with a durable checkpoint (exit 75) or was lost. The MT_* variables
# are described in train.sbatch.
set -uo pipefail
me=${MT_JOB_NAME:-job.sh}

here=$(cd "$(dirname "$0")" && pwd)
loop=${MT_RESTART_LOOP:-$here/../launch/restart_loop.sh}
[[ -x $loop ]] || { echo "$me: $loop not found: set MT_RESTART_LOOP to launch/restart_loop.sh" >&2; exit 2; }
trainer=${MT_TRAINER:-mpi_trainer}
ckpt=${MT_CKPT_DIR:-$SLURM_SUBMIT_DIR/runs/$SLURM_JOB_ID}
launcher=${MT_LAUNCHER:-srun}
mkdir -p "$ckpt"
nodes=$SLURM_JOB_NODELIST
for ((g = 1; g < ${SLURM_HET_SIZE:-0}; g++)); do v=SLURM_JOB_NODELIST_HET_GROUP_$g; nodes+=" + ${!v}"; done
echo "$me: job $SLURM_JOB_ID start $((${SLURM_RESTART_COUNT:-0} + 1)) on $nodes" \
  "($SLURM_NTASKS tasks) at $(date -u +%FT%T.%NZ), checkpoints in $ckpt"

# A heterogeneous job (slurm/hetjob.sbatch) is one MPI job over all its components.
het=()
if [[ -n ${SLURM_HET_SIZE:-} ]]; then
  het=(--het-group="0-$((SLURM_HET_SIZE - 1))")
  [[ $launcher == srun ]] || { echo "$me: a heterogeneous job needs MT_LAUNCHER=srun" >&2; exit 2; }
fi
case $launcher in
  srun) launch=(srun "${het[@]}" --mpi=pmix --no-kill --kill-on-bad-exit=0 --export=ALL) ;;
  # Open MPI's mpirun reads the allocation itself; TERM reaches the ranks 30 s before SIGKILL.
  mpirun) launch=(mpirun --enable-recovery --mca odls_base_sigkill_timeout 30 -x MT_RESTART_ATTEMPT -x OMP_WAIT_POLICY) ;;
  *) echo "$me: MT_LAUNCHER must be srun or mpirun, not '$launcher'" >&2; exit 2 ;;
esac
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# The batch shell gets Slurm's signal (--signal=B:...): pass it on to the restart loop, which
# forwards it to the launcher as SIGUSR1. The loop runs in the background so the trap runs at once.
child=0
notice() { echo "$me: SIG$1 at $(date -u +%FT%T.%NZ): checkpoint and requeue"; ((child)) && kill -USR1 "$child" 2>/dev/null; }
trap 'notice USR1' USR1
trap 'notice TERM' TERM
# shellcheck disable=SC2086  # MT_TRAIN_ARGS is a list of flags
"$loop" --attempts "${MT_ATTEMPTS:-2}" --status "$ckpt/run-status.json" -- \
  "${launch[@]}" "$trainer" train \
  --model "${MT_MODEL:-resnet32}" --train-steps "${MT_TRAIN_STEPS:-64000}" --batch-size "${MT_BATCH_SIZE:-128}" \
  ${MT_DATA:+--data "$MT_DATA"} --ckpt-dir "$ckpt" --resume auto \
  --ckpt-every-steps "${MT_CKPT_EVERY_STEPS:-500}" --ckpt-every-seconds "${MT_CKPT_EVERY_SECONDS:-300}" \
  --metrics "$ckpt/metrics.jsonl" ${MT_TRAIN_ARGS:-} &
child=$!
wait "$child"; rc=$?
while ((rc > 128)) && kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done  # a trap interrupted wait
echo "$me: job $SLURM_JOB_ID training ended with $rc at $(date -u +%FT%T.%NZ)"
state=$(grep -o '"state": *"[a-z]*"' "$ckpt/run-status.json" 2>/dev/null | grep -o '[a-z]*"$' | tr -d '"')
if ((rc == 75)) && [[ $state == requeue || $state == running ]]; then
  # Stopped on a notice with a durable checkpoint (requeue), or the parameter server was lost
  # after it started (running): run again later from the newest checkpoint. Under a preemption
  # Slurm requeues the job itself and refuses this request, which is fine.
  if ((${SLURM_RESTART_COUNT:-0} >= ${MT_MAX_REQUEUES:-20})); then
    echo "$me: not requeueing: already restarted ${SLURM_RESTART_COUNT} times (MT_MAX_REQUEUES)"
  else
    scontrol requeue "$SLURM_JOB_ID" 2>&1 | sed "s/^/$me: scontrol requeue: /"
  fi
elif ((rc == 75)); then
  echo "$me: the training never started (no status in $ckpt): not requeueing; see the errors above"
  rc=1
fi
exit "$rc"
