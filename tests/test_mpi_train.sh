#!/usr/bin/env bash
# Asynchronous parameter-server training under mpirun on loopback (oversubscribed):
# NP processes, S parameter-server shards. The job must finish every global step, report the
# summary and reach well-above-chance accuracy on generated data.
# Usage: test_mpi_train.sh MPIEXEC MPI_TRAINER NP S
set -euo pipefail
mpiexec=$1 trainer=$2 np=$3 shards=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 512 --seed 3 >/dev/null
steps=120
"$mpiexec" -np "$np" --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 \
  --batch-size 32 --train-steps $steps --lr-schedule constant --lr 0.05 --augment off \
  --num-ps "$shards" --log-every-steps 40 --data "$dir/data" --metrics "$dir/m.jsonl" \
  > "$dir/out.txt" 2>&1 || { echo "mpirun failed"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
/usr/bin/python3 - "$dir/m.jsonl" "$np" "$shards" "$steps" <<'PY'
import json, sys
path, np_, shards, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
events = [json.loads(l) for l in open(path)]
s = events[-1]
assert s["event"] == "summary", s
assert s["global_step"] == steps, s
assert s["workers_start"] == np_ - shards == s["workers_end"], s
assert s["num_ps"] == shards, s
assert s["test_accuracy"] > 0.3, f"accuracy {s['test_accuracy']} not well above chance (0.1)"
assert s["cost_usd"] > 0, s
progress = [e for e in events if e["event"] == "progress"]
assert progress and all("mean_staleness" in e and "active_workers" in e for e in progress), progress
print(f"ok: np={np_} S={shards} accuracy {s['test_accuracy']:.3f} max staleness {s['max_staleness']}")
PY
