#!/usr/bin/env bash
# Chaos: RUNS jobs of 1 PS + 4 workers whose workers SIGKILL themselves at lifetimes drawn from
# the GCE revocation model, compressed (--time-scale 3600: a model hour per second) and drawn
# anew for every run (seed) and attempt, under launch/restart_loop.sh. Every run must finish
# its global steps within the time bound; revocations must have happened.
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
runs=${3:-3} steps=240 total=0
for ((r = 1; r <= runs; r++)); do
  rm -rf "$dir/ck" "$dir/m.jsonl"
  cmd=$(train_cmd 5 --train-steps $steps --ckpt-every-steps 30 --failure-timeout 1 --seed $((r + 10)) \
        --revocation-model gce --time-scale 3600)
  timeout 150 "$restart_loop" --attempts 8 --delay 0 -- $cmd > "$dir/loop.txt" 2>&1 ||
    { echo "run $r did not finish"; cat "$dir/loop.txt"; exit 1; }
  n=$(/usr/bin/python3 - "$dir/m.jsonl" "$steps" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == int(sys.argv[2]) and s["exit_code"] == 0, s
print(sum(e["revocations"] for e in events if e["event"] == "summary"))
PY
)
  attempts=$(grep -c "attempt [0-9]*/" "$dir/loop.txt")
  echo "run $r: finished, $n revocation(s), $attempts attempt(s)"
  total=$((total + n))
done
echo "chaos: $runs/$runs runs finished, $total revocations"
[[ $total -ge 1 ]]
