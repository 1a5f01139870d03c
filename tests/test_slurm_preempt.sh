#!/usr/bin/env bash
# On a real local Slurm cluster: slurm/train.sbatch on the spot partition; one of its nodes is
# reclaimed by a job in the hidden high-priority partition (a provider revoking a spot VM). The
# job must get SIGUSR1, checkpoint, be requeued, resume at the global step it stopped at, and
# finish. Prints the figures: preemption signal -> training again, steps lost.
# With HOW=down the node is set DOWN instead (a VM revoked with no notice): for
# hetjob.sbatch, whose heterogeneous job Slurm ends as a whole on a node failure even with
# --no-kill, the job must be requeued and resume from its newest periodic checkpoint, losing at
# most one checkpoint interval of steps. HOW=down-hung-ps: the same with the parameter server hung
# from that moment (tests/hold_processes.py: only SIGKILL ends it), so the job's teardown outlasts
# Slurm's KillWait and the batch script asks for the requeue itself in time (slurm/job.sh).
# With HOW=kill-ps the parameter server process is SIGKILLed (no notice, no checkpoint): the
# restart loop starts it again inside the same allocation, from the newest periodic checkpoint.
# Usage: test_slurm_preempt.sh TRAINER [SBATCH (default train.sbatch)] [HOW: reclaim|down|down-hung-ps|kill-ps]
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
template=${2:-train.sbatch} how=${3:-reclaim}
# Reclaim checks the accuracy at the end (1200 steps); the other two only where training resumed.
steps=1200 every=100
[[ $how == reclaim ]] || steps=600
job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=$every MT_CKPT_DIR="$dir/ck" \
      sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$repo/slurm/$template") || fail "sbatch"
wait_job "$job" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 150 120
# Every component's nodes; the last one is a spot (worker) node in both templates.
nodes=$(scontrol show job "$job" | tr ' ' '\n' | sed -n 's/^NodeList=//p' | xargs -n 1 scontrol show hostnames)
victim=$(tail -n 1 <<<"$nodes")
if [[ $how == reclaim ]]; then
  echo "job $job on $(echo $nodes), reclaiming $victim"
  reclaim=$(sbatch --parsable -p reclaim -w "$victim" --exclusive --output "$dir/reclaim.out" --wrap "sleep 5") || fail "sbatch reclaim"
elif [[ $how == kill-ps ]]; then
  pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$dir/ck/run-status.json")
  echo "job $job on $(echo $nodes), SIGKILL to the parameter server (pid $pid)"
  date -u +%s.%N > "$dir/down-at"
  kill -KILL "$pid" || fail "kill the parameter server"
else
  if [[ $how == down-hung-ps ]]; then
    # The parameter server hangs from here on (every thread stopped: Open MPI 4.1 can leave it
    # so after a peer's death, seen in CI), so the job's teardown outlasts Slurm's KillWait: the
    # batch script has to ask for the requeue itself before its own SIGKILL.
    pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$dir/ck/run-status.json")
    /usr/bin/python3 "$here/hold_processes.py" 300 "$pid" > "$dir/hold.out" 2>&1 &
    holder=$!
    trap 'kill "$holder" 2>/dev/null; cleanup' EXIT
    for _ in $(seq 50); do grep -q '^held' "$dir/hold.out" && break; kill -0 "$holder" 2>/dev/null || break; sleep 0.1; done
    grep -q '^held' "$dir/hold.out" || fail "could not hold the parameter server (pid $pid): $(cat "$dir/hold.out")"
    echo "job $job: the parameter server (pid $pid) held"
  fi
  echo "job $job on $(echo $nodes), setting $victim DOWN at $(date -u +%FT%T.%NZ)"
  date -u +%s.%N > "$dir/down-at"
  scontrol update NodeName="$victim" State=DOWN Reason=spot-revoked || fail "scontrol update"
fi
wait_job "$job" COMPLETED 240
[[ $how == down* ]] && scontrol update NodeName="$victim" State=RESUME 2>/dev/null
requeues=1; [[ $how == kill-ps ]] && requeues=0
[[ $(job_field "$job" Restarts) == "$requeues" ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected $requeues"
if [[ $how == reclaim ]]; then
  grep -q "sbatch: SIGUSR1 at" "$dir/job.out" || fail "the batch script never got SIGUSR1"
  [[ $(job_field "$reclaim" JobState) == COMPLETED ]] || wait_job "$reclaim" COMPLETED 60
fi
if [[ $how == kill-ps ]]; then
  grep -q "attempt 2/" "$dir/job.out" || fail "the restart loop did not start the training again"
else
  grep -q "start 2 on" "$dir/job.out" || fail "the job did not start a second time"
fi
if [[ $how == down-hung-ps ]]; then
  grep -q "requeueing now" "$dir/job.out" || fail "the batch script did not ask for the requeue while the job's teardown hung"
fi
/usr/bin/python3 - "$dir" "$steps" "$every" "$how" <<'PY' || fail "checks of the metrics"
import datetime, json, re, sys
d, steps, every, how = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ev = [json.loads(l) for l in open(f"{d}/ck/metrics.jsonl")]
kinds = [e["event"] for e in ev]
resume = next(e for e in ev if e["event"] == "resume")
before = [e["global_step"] for e in ev[:kinds.index("resume")] if "global_step" in e]
if how in ("down", "down-hung-ps", "kill-ps"):
    # No notice to the killed process: the newest periodic checkpoint is what survives.
    lost = max(before) - resume["global_step"]
    assert 0 <= lost <= every, f"lost {lost} steps (checkpoint interval {every})"
    first = next(e for e in ev[kinds.index("resume"):] if e["event"] == "first_step")
    t_down = float(open(f"{d}/down-at").read())
    what = {"down": "node DOWN", "down-hung-ps": "node DOWN, parameter server hung"}.get(how, "parameter server SIGKILLed")
    print(f"figure: {what} -> training again {first['unix_time'] - t_down:.1f} s, steps lost {lost} "
          f"(newest step seen {max(before)}, resumed at {resume['global_step']})")
    summary = [e for e in ev if e["event"] == "summary"][-1]
    assert summary["global_step"] == steps and summary["exit_code"] == 0, summary
    sys.exit(0)
stop = next(e for e in ev if e["event"] == "stop")
assert stop["reason"] == "SIGUSR1", stop
durable = next(e for e in ev if e["event"] == "stop_checkpoint_durable")
assert durable["global_step"] == stop["global_step"], (durable, stop)
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
m = re.search(r"\S+\.sbatch: SIGUSR1 at (\S+)", open(f"{d}/job.out").read())
t_sig = datetime.datetime.strptime(m.group(1)[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
print(f"figure: preemption signal -> training again {first['unix_time'] - t_sig:.1f} s "
      f"(checkpoint durable {durable['seconds_after_stop']:.3f} s after the notice), steps lost {lost}, "
      f"stopped at {stop['global_step']}, finished {steps}")
PY
echo "PASS: $template: $how of $victim, requeued, resumed and finished"
