#!/usr/bin/env bash
# Signals under Slurm (issue 17, defect 5), on a real local Slurm cluster with slurm/train.sbatch:
#   batch   scancel --batch --signal=TERM: the batch shell only (what --signal=B:... does, or an
#           operator signalling the job script);
#   full    scancel --full --signal=TERM: every process of the job at once (batch shell, its
#           restart loop, srun and every rank), as a shutdown that signals the whole job does;
#   steps   scancel --signal=TERM: the job's srun steps only (every rank), not the batch shell.
# Each: the parameter server's checkpoint is durable within 1 s of the signal (its
# stop_checkpoint_durable event); then the job continues from exactly that step and completes:
# batch and full by requeueing itself (exit 75, Restarts=1), steps by the restart loop's next
# attempt in the same allocation (the batch shell was not told to stop). No periodic checkpoint
# comes before the signal, so the resume proves the stop's checkpoint was the one used.
# Usage: test_slurm_signals.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
steps=300  # the signal comes at step 100 or a little later
for how in batch full steps; do
  rm -rf "$dir/ck" "$dir/job.out"
  job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=100000 MT_CKPT_DIR="$dir/ck" \
        sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$repo/slurm/train.sbatch") || fail "sbatch"
  wait_job "$job" RUNNING 30
  wait_step "$dir/ck/metrics.jsonl" 100 120
  case $how in
    batch) scancel --batch --signal=TERM "$job" ;;
    full) scancel --full --signal=TERM "$job" ;;
    steps) scancel --signal=TERM "$job" ;;
  esac || fail "$how: scancel"
  wait_job "$job" COMPLETED 180
  restarts=$(job_field "$job" Restarts)
  want=1; [[ $how == steps ]] && want=0
  [[ $restarts == "$want" ]] || fail "$how: job $job restarted $restarts times, expected $want"
  [[ $how == steps ]] && { grep -q "attempt 2/" "$dir/job.out" || fail "steps: the restart loop did not run a second attempt"; }
  [[ $how == steps ]] || { grep -q "SIGTERM at" "$dir/job.out" || fail "$how: the batch script did not get SIGTERM"; }
  /usr/bin/python3 - "$dir/ck/metrics.jsonl" "$steps" "$how" <<'PY' || fail "$how: checks of the metrics"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
steps, how = int(sys.argv[2]), sys.argv[3]
stop = [e for e in ev if e["event"] == "stop_checkpoint_durable"]
assert stop, "no checkpoint after the signal"
dt, at = stop[0]["seconds_after_stop"], stop[0]["global_step"]
assert dt < 1.0, f"checkpoint durable {dt:.3f} s after the signal (goal < 1 s)"
resume = next(e for e in ev if e["event"] == "resume")
assert resume["global_step"] == at, f"resumed at {resume['global_step']}, the stop's checkpoint is step {at}"
s = ev[-1]
assert s["event"] == "summary" and s["global_step"] == steps and s["exit_code"] == 0, s
print(f"ok: {how}: checkpoint of step {at} durable {dt:.3f} s after SIGTERM, resumed there, finished at {steps}")
PY
done
