#!/usr/bin/env bash
# On a real local Slurm cluster: slurm/train.sbatch on the spot partition; one of its nodes is
# reclaimed by a job in the hidden high-priority partition (a provider revoking a spot VM). The
# job must get SIGUSR1, checkpoint, be requeued, resume at the global step it stopped at, and
# finish. Prints the figures: preemption signal -> training again, steps lost.
# Usage: test_slurm_preempt.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
steps=1200 every=100
job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=$every MT_CKPT_DIR="$dir/ck" \
      sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$repo/slurm/train.sbatch") || fail "sbatch"
wait_job "$job" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 150 120
nodes=$(scontrol show hostnames "$(job_field "$job" NodeList)")
victim=$(tail -n 1 <<<"$nodes")
echo "job $job on $(echo $nodes), reclaiming $victim"
reclaim=$(sbatch --parsable -p reclaim -w "$victim" --exclusive --output "$dir/reclaim.out" --wrap "sleep 5") || fail "sbatch reclaim"
wait_job "$job" COMPLETED 240
[[ $(job_field "$job" Restarts) == 1 ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected 1"
grep -q "train.sbatch: SIGUSR1 at" "$dir/job.out" || fail "the batch script never got SIGUSR1"
grep -q "start 2 on" "$dir/job.out" || fail "the job did not start a second time"
[[ $(job_field "$reclaim" JobState) == COMPLETED ]] || wait_job "$reclaim" COMPLETED 60
/usr/bin/python3 - "$dir" "$steps" "$every" <<'PY' || fail "checks of the metrics"
import datetime, json, re, sys
d, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ev = [json.loads(l) for l in open(f"{d}/ck/metrics.jsonl")]
kinds = [e["event"] for e in ev]
stop = next(e for e in ev if e["event"] == "stop")
assert stop["reason"] == "SIGUSR1", stop
durable = next(e for e in ev if e["event"] == "stop_checkpoint_durable")
assert durable["global_step"] == stop["global_step"], (durable, stop)
resume = next(e for e in ev if e["event"] == "resume")
lost = stop["global_step"] - resume["global_step"]
assert 0 <= lost <= every, f"lost {lost} steps (checkpoint interval {every})"
after = ev[kinds.index("resume"):]
prog = [e["global_step"] for e in after if e["event"] == "progress"]
assert prog and min(prog) > resume["global_step"], "the global step did not continue after the resume"
summary = [e for e in ev if e["event"] == "summary"][-1]
assert summary["global_step"] == steps and summary["exit_code"] == 0, summary
assert summary["test_accuracy"] > 0.5, summary
status = json.load(open(f"{d}/ck/run-status.json"))
assert status["state"] == "done" and status["global_step"] == steps, status
first = next(e for e in after if e["event"] == "first_step")
m = re.search(r"train.sbatch: SIGUSR1 at (\S+)", open(f"{d}/job.out").read())
t_sig = datetime.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
print(f"figure: preemption signal -> training again {first['unix_time'] - t_sig:.1f} s "
      f"(checkpoint durable {durable['seconds_after_stop']:.3f} s after the notice), steps lost {lost}, "
      f"stopped at {stop['global_step']}, finished {steps}")
PY
echo "PASS: preempted at a reclaim of $victim, requeued, resumed and finished"
