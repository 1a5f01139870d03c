#!/usr/bin/env bash
# The ULFM build under Slurm (issue 18), on a real local Slurm cluster: slurm/train.sbatch starts
# it with its own mpirun inside the allocation (Open MPI 5 with --with-ft ulfm; srun cannot start a
# ULFM build). A worker SIGKILLs itself (--revoke): MPI reports it, within 0.5 s of the kill, and
# training goes on; then a spot node is reclaimed: SIGUSR1, a checkpoint, requeue, resume at the
# step it stopped at, done. MT_LAUNCHER=srun with a ULFM build fails at once with a clear line.
# Skipped (77) for a build without ULFM (Debian's Open MPI 4.1: tests/test_slurm_preempt.sh).
# Usage: test_slurm_ulfm.sh TRAINER
set -uo pipefail
# (not `--version | grep -q` under pipefail: grep leaves at its match, the trainer's next line then
# meets a closed pipe and the pipeline fails: a ULFM build was once skipped that way)
grep -q '^failure detection: ULFM' <<<"$("$1" --version)" || { echo "SKIP: $1 is not a ULFM build"; exit 77; }
source "$(dirname "$0")/slurm_lib.sh" "$1"
# Open MPI 5's runtime channel on loopback (PMIx's; 4.1's oob variable only draws a warning there).
unset OMPI_MCA_oob_tcp_if_include
export PMIX_MCA_ptl_base_if_include=lo
steps=800 every=100

echo "== MT_LAUNCHER=srun with a ULFM build"
job=$(MT_LAUNCHER=srun MT_CKPT_DIR="$dir/ck-srun" sbatch --parsable --chdir "$dir" --output "$dir/srun.out" \
      "$repo/slurm/train.sbatch") || fail "sbatch"
wait_job "$job" FAILED 60 2>/dev/null || true
[[ $(job_field "$job" JobState) == FAILED ]] || fail "job $job is $(job_field "$job" JobState), expected FAILED"
grep -q "is a ULFM build.*srun cannot start it; use MT_LAUNCHER=mpirun" "$dir/srun.out" || fail "no clear line for srun + ULFM"
grep "srun cannot start it" "$dir/srun.out"

echo "== train.sbatch: mpirun --with-ft ulfm inside the allocation, a worker killed, a node reclaimed"
job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=$every MT_CKPT_DIR="$dir/ck" \
      MT_TRAIN_ARGS="$MT_TRAIN_ARGS --failure-timeout 3 --revoke rank=3@step=60" \
      sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$repo/slurm/train.sbatch") || fail "sbatch"
wait_job "$job" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 250 120
nodes=$(scontrol show job "$job" | tr ' ' '\n' | sed -n 's/^NodeList=//p' | xargs -n 1 scontrol show hostnames)
victim=$(tail -n 1 <<<"$nodes")
echo "job $job on $(echo $nodes), reclaiming $victim"
reclaim=$(sbatch --parsable -p reclaim -w "$victim" --exclusive --output "$dir/reclaim.out" --wrap "sleep 5") || fail "sbatch reclaim"
wait_job "$job" COMPLETED 240
[[ $(job_field "$job" Restarts) == 1 ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected 1"
grep -q "attempt 1/.*mpirun --enable-recovery --with-ft ulfm" "$dir/job.out" || fail "not started by mpirun --with-ft ulfm"
grep -q "SIGUSR1 at" "$dir/job.out" || fail "the batch script never got SIGUSR1"
killed_at=$(sed -n "s/.*rank 3: revoked.*SIGKILL to itself at unix \([0-9.]*\).*/\1/p" "$dir/job.out" | head -n 1)
[[ -n $killed_at ]] || fail "worker rank 3 did not revoke itself"
/usr/bin/python3 - "$dir/ck/metrics.jsonl" "$steps" "$every" "$killed_at" <<'PY' || fail "checks of the metrics"
import json, sys
path, steps, every, killed_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ev = [json.loads(l) for l in open(path)]
assert ev[0]["failure_detection"] == "ulfm+heartbeat", ev[0]
rev = [e for e in ev if e["event"] == "revocation"]
assert rev and rev[0]["rank"] == 3 and rev[0]["detected_by"] == "mpi", rev
latency = rev[0]["unix_time"] - killed_at
assert latency < 0.5, f"worker loss noticed {latency:.3f} s after the kill"
kinds = [e["event"] for e in ev]
stop = next(e for e in ev if e["event"] == "stop")
assert stop["reason"] == "SIGUSR1", stop
durable = next(e for e in ev if e["event"] == "stop_checkpoint_durable")
assert durable["global_step"] == stop["global_step"], (durable, stop)
resume = next(e for e in ev if e["event"] == "resume")
assert resume["global_step"] == stop["global_step"], (resume, stop)
summary = [e for e in ev if e["event"] == "summary"][-1]
assert summary["global_step"] == steps and summary["exit_code"] == 0, summary
print(f"worker loss reported by MPI {latency * 1e3:.1f} ms after the kill; SIGUSR1 at step {stop['global_step']}, "
      f"checkpoint durable {durable['seconds_after_stop']:.3f} s after it; resumed there, done at {steps}, "
      f"test accuracy {summary['test_accuracy']:.3f}")
PY
echo "PASS"
