#!/usr/bin/env bash
# A worker gets a preemption notice (SIGTERM): it finishes its step, pushes it, sends LEAVE and
# exits 0; the parameter server records a revocation with cause "notice" and goes on. Once
# through --revoke (the worker signals itself), once from outside (kill -TERM to its pid). Then
# a step that outlasts --drain-deadline: the worker's agent sends LEAVE at the deadline, the
# worker drops that step's gradient when it ends and returns (exit 0, through main).
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
steps=160
check() {
  /usr/bin/python3 - "$dir/m.jsonl" "$steps" "$1" "$2" "${3:-2}" <<'PY'
import json, sys
path, steps, victim, sig, workers_end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
events = [json.loads(l) for l in open(path)]
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == steps and s["exit_code"] == 0, s
assert s["revocations"] == 1 and s["left_workers"] == 1 and s["lost_workers"] == 0, s
assert s["workers_end"] == workers_end, s
r = [e for e in events if e["event"] == "revocation"]
assert len(r) == 1 and r[0]["rank"] == victim and r[0]["cause"] == "notice" and r[0]["signal"] == sig, r
assert r[0]["work_lost_steps"] == 0, r
print(f"ok: rank {victim} left on {sig} at step {r[0]['global_step']}")
PY
  if grep -i "error" "$dir/out.txt"; then echo "an error was printed"; exit 1; fi
  grep -q "worker rank $1: $2: ${4:-pushed its last step and left}" "$dir/out.txt"
}
train 4 --train-steps $steps --revoke "rank=2@step=30:TERM" || { echo "mpirun failed"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
check 2 SIGTERM

rm -rf "$dir/ck" "$dir/m.jsonl"
$(train_cmd 4 --train-steps $steps) > "$dir/out.txt" 2>&1 &
job=$!
wait_for_step 40
pid=$(rank_pid 3)
[[ -n "$pid" ]] || { echo "no pid for rank 3"; kill $job; exit 1; }
kill -TERM "$pid"
wait $job || { echo "mpirun failed"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
check 3 SIGTERM

# The drain deadline: steps padded to 0.88 s (a K80's, x4), the notice 3 s into the worker's run
# (on its agent's thread, so in the middle of a step), a deadline of 0.1 s.
rm -rf "$dir/ck" "$dir/m.jsonl"
steps=12
train 3 --train-steps $steps --emulate-device k80 --emulate-scale 4 --revoke "rank=2@3s:TERM" --drain-deadline 0.1 ||
  { echo "mpirun failed"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
check 2 SIGTERM 1 "the step did not finish within --drain-deadline 0\.10* s: abandoned it and left"
if grep -q "worker rank 2: SIGTERM: pushed its last step" "$dir/out.txt"; then echo "left twice"; exit 1; fi
