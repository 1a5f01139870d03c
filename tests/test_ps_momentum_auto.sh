#!/usr/bin/env bash
# --momentum auto on a real parameter server (issue 19): 2 shards and 5 workers on loopback.
#  1. The default: both shards apply 1 - 0.4/5 = 0.92 (the start-up line and every progress event
#     say so, the config event records momentum_auto).
#  2. --momentum 0.9 given: applied as given with the same 5 workers.
# Synthetic gradients: what is checked is the policy the shards apply, not learning.
# Usage: test_ps_momentum_auto.sh MPIEXEC MPI_TRAINER
set -euo pipefail
mpiexec=$1 trainer=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 512 --test 64 --seed 3 >/dev/null
common=(--data "$dir/data" --model resnet8 --batch-size 8 --train-steps 40 --log-every-steps 10 --num-ps 2
        --synthetic-gradients --threads 1)
for m in auto 0.9; do
  flags=()
  [[ $m == auto ]] || flags=(--momentum "$m")
  "$mpiexec" -np 7 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train "${common[@]}" "${flags[@]}" \
    --metrics "$dir/$m.jsonl" >"$dir/$m.txt" 2>&1 || { echo "run with momentum $m failed:"; cat "$dir/$m.txt"; exit 1; }
  grep "parameter server:" "$dir/$m.txt"
done
grep -q "Nesterov momentum 0.92 per worker (dana; --momentum auto: 0.9, raised with 5 workers)" "$dir/auto.txt"
grep -q "Nesterov momentum 0.9 per worker (dana)" "$dir/0.9.txt"
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
for name, auto, applied in (("auto", True, 0.92), ("0.9", False, 0.9)):
    ev = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
    cfg = ev[0]
    assert cfg["event"] == "config" and cfg["momentum_auto"] is auto and cfg["momentum"] == 0.9, cfg
    progress = [e for e in ev if e["event"] == "progress"]
    assert progress and all(e["active_workers"] == 5 and abs(e["momentum"] - applied) < 1e-9 for e in progress), progress
    assert ev[-1]["event"] == "summary" and ev[-1]["global_step"] == 40, ev[-1]
print("ok: 5 workers apply momentum 0.92 under --momentum auto, 0.9 when given")
PY
