#!/usr/bin/env bash
# Preemption notices to the parameter server under launch/restart_loop.sh:
#  attempt 1: SIGTERM to the PS process -> checkpoint at once, workers stopped, exit 75 (status
#             file), the loop reruns the job;
#  attempt 2: SIGUSR1 to mpirun (forwarded to every rank, as Slurm --signal=B:USR1 does through
#             the batch script) -> the same; workers leave on their own notice;
#  attempt 3: resumes and finishes.
# The global step continues across attempts and never goes back. Attempt 1 runs with
# --ps-handover off: under ULFM a notice to the PS alone is otherwise handed over to the standby
# (test_fault_ps_standby.sh, "notice"); attempt 2's notice reaches every rank, so the standby
# refuses the handover (it has a notice too) and the job stops as here, with the default.
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
steps=300
status="$dir/ck/run-status.json"
cmd=$(train_cmd 4 --train-steps $steps --ckpt-every-steps 50)
cat > "$dir/job.sh" <<JOB
#!/usr/bin/env bash
extra=()
[[ \$MT_RESTART_ATTEMPT == 1 ]] && extra=(--ps-handover off)
exec $cmd "\${extra[@]}"
JOB
chmod +x "$dir/job.sh"
"$restart_loop" --attempts 4 --delay 0 --status "$status" -- "$dir/job.sh" > "$dir/loop.txt" 2>&1 &
loop=$!

ps_pid() {  # the PS pid of the running attempt, from its status file
  /usr/bin/python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1]))
    print(s["pid"] if s["state"] == "running" else "")
except Exception:
    print("")' "$status"
}
notice() {  # notice ATTEMPT FROM_STEP SIGNAL TARGET(ps|mpirun)
  local i p
  for ((i = 0; i < 1200; i++)); do
    p=$(ps_pid)
    if [[ -n "$p" ]] && grep -q "attempt $1/" "$dir/loop.txt" && wait_for_step "$2" 1 >/dev/null; then break; fi
    sleep 0.1
  done
  [[ -n "$p" ]] || { echo "attempt $1 never ran"; cat "$dir/loop.txt"; exit 1; }
  if [[ $4 == mpirun ]]; then p=$(ps -o ppid= -p "$p" | tr -d ' '); fi
  echo "sending SIG$3 to $4 (pid $p) in attempt $1"
  kill "-$3" "$p"
  for ((i = 0; i < 600; i++)); do grep -q "attempt $1 ended" "$dir/loop.txt" && return 0; sleep 0.1; done
  echo "attempt $1 did not end"; cat "$dir/loop.txt"; exit 1
}
notice 1 60 TERM ps
notice 2 160 USR1 mpirun
wait $loop || { echo "restart loop failed"; cat "$dir/loop.txt"; exit 1; }
cat "$dir/loop.txt"
grep -q "attempt 1 ended: exit 75 (SIGTERM)" "$dir/loop.txt"
grep -q "attempt 2 ended: exit 75 (SIGUSR1)" "$dir/loop.txt"
grep -q "attempt 3 finished training at global step $steps" "$dir/loop.txt"
if [[ $("$trainer" --version) == *"failure detection: ULFM"* ]]; then
  # (the standby may have left on its own notice first: then another worker refuses, or none is left;
  # or its leave crossed the handover, which it never answers: late. Either way no handover, exit 75.)
  grep -qE "parameter server: SIGUSR1: no handover \((the standby \(worker rank [0-9]+\) has a notice too \(SIGUSR1\): the whole job is being stopped|no standby is left to take it|the standby did not take the handover within --failure-timeout)\)" "$dir/loop.txt"
fi
/usr/bin/python3 - "$dir/m.jsonl" "$steps" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
summaries = [e for e in events if e["event"] == "summary"]
resumes = [e for e in events if e["event"] == "resume"]
durable = [e for e in events if e["event"] == "stop_checkpoint_durable"]
assert len(summaries) == 3 and len(resumes) == 2 and len(durable) == 2, (summaries, resumes, durable)
assert [s["exit_code"] for s in summaries] == [75, 75, 0], summaries
assert [s["stopped_by"] for s in summaries[:2]] == ["SIGTERM", "SIGUSR1"], summaries
for stop, res in zip(summaries[:2], resumes):
    # Nothing applied after the notice was lost: the resume starts at the stop's global step.
    assert res["global_step"] == stop["global_step"], (stop, res)
assert resumes[0]["global_step"] < resumes[1]["global_step"] < steps, resumes
assert summaries[-1]["global_step"] == steps and summaries[-1]["attempts"] == 3, summaries[-1]
assert summaries[-1]["test_accuracy"] > 0.3, summaries[-1]
for d in durable:
    assert d["seconds_after_stop"] < 30, d   # inside GCE's 30 s grace period
print("ok: stops at", [s["global_step"] for s in summaries[:2]], "checkpoint durable after",
      [round(d["seconds_after_stop"], 3) for d in durable], "s; finished at", steps)
PY

# SIGTERM to the loop itself (Slurm's batch-step notice): it reaches mpirun as SIGUSR1, the PS
# checkpoints and exits 75, and the loop stops with 75 instead of rerunning (Slurm requeues).
rm -rf "$dir/ck" "$dir/m.jsonl"
"$restart_loop" --attempts 4 --delay 0 -- $cmd > "$dir/loop.txt" 2>&1 &
loop=$!
wait_for_step 40
kill -TERM $loop
rc=0
wait $loop || rc=$?
cat "$dir/loop.txt"
[[ $rc -eq 75 ]] || { echo "loop exit $rc, expected 75"; exit 1; }
grep -q "stopping on a notice (SIGTERM, forwarded as SIGUSR1) after attempt 1" "$dir/loop.txt"
grep -q '"state":"requeue"' "$dir/ck/run-status.json"
echo "ok: SIGTERM to the loop: checkpoint, exit 75, no rerun"
