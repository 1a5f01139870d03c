#!/usr/bin/env bash
# What a standby replica (--ps-standby, docs/fault-model.md) costs the parameter server: updates/s
# of 1 PS + N workers pushing a fixed gradient (--synthetic-gradients: the PS is the bottleneck,
# the worst case for the replica's copy) with --ps-standby 0 and 1 alternated run by run, and
# the replica's bytes. Goal (issue 21): with a standby >= 0.95x the throughput without.
#   bench/ps_standby.sh [--model resnet32] [--workers 4] [--steps 2000] [--repeats 5] [--replica-interval 10]
set -euo pipefail
cd "$(dirname "$0")/.."
model=resnet32 workers=4 steps=2000 repeats=5 interval=10
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --replica-interval) interval=$2; shift 2 ;;
    *) echo "usage: $0 [--model M] [--workers N] [--steps N] [--repeats R] [--replica-interval K]" >&2; exit 2 ;;
  esac
done
source bench/lib.sh
"$trainer" gen-data "$dir/data" --train 1024 --test 256 --seed 1 >/dev/null
for ((r = 0; r < repeats; ++r)); do
  for standby in 0 1; do
    rm -rf "$dir/ck"
    mpirun --enable-recovery -np $((workers + 1)) --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train \
      --model "$model" --data "$dir/data" --train-steps "$steps" --synthetic-gradients --quiet --ckpt-dir "$dir/ck" \
      --ps-standby $standby --replica-interval "$interval" --metrics "$dir/m.$standby.$r.jsonl" > "$dir/out.txt" 2>&1 ||
      { cat "$dir/out.txt"; exit 1; }
  done
done
/usr/bin/python3 - "$dir" "$repeats" "$model" "$workers" "$steps" "$interval" <<'PY'
import json, statistics, sys
d, repeats, model, workers, steps, interval = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
def rate(standby, r):
    s = [json.loads(l) for l in open(f"{d}/m.{standby}.{r}.jsonl")][-1]
    return s["global_step"] / s["train_seconds"]
without = [rate(0, r) for r in range(repeats)]
with_ = [rate(1, r) for r in range(repeats)]
ratios = [b / a for a, b in zip(without, with_)]
print(f"{model}, 1 PS + {workers} workers, {steps} steps of synthetic gradients, replica every {interval} updates, "
      f"{repeats} alternated rounds")
print(f"  updates/s without a standby: median {statistics.median(without):.1f} ({', '.join(f'{x:.1f}' for x in without)})")
print(f"  updates/s with one standby:  median {statistics.median(with_):.1f} ({', '.join(f'{x:.1f}' for x in with_)})")
print(f"  ratio (same round): median {statistics.median(ratios):.3f}, min {min(ratios):.3f}  (goal >= 0.95)")
PY
