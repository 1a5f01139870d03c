#!/usr/bin/env bash
# Real training throughput through the parameter server on this machine: the single process,
# then 1 PS + 1, 2 and 4 workers (mpirun on loopback), `resnet32` on the default data, STEPS
# global steps each, REPEATS runs each; prints the median aggregate images/s of each. All ranks
# share this machine's cores, so more workers do not mean more compute: the table shows what
# the parameter server costs, not the speed-up of separate GPU servers.
#   bench/perf/ps_scaling.sh [--steps 60] [--repeats 2] [--model resnet32]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --steps steps 60
bench_opt --repeats repeats 2
bench_opt --model model resnet32
bench_parse "[--steps N] [--repeats R] [--model M]" "$@"
bench_env
args=(train --model "$model" --train-steps "$steps" --quiet)
for ((r = 0; r < repeats; ++r)); do
  "$trainer" "${args[@]}" --metrics "$dir/single-$r.jsonl"
  for workers in 1 2 4; do
    mpirun -np $((workers + 1)) --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" "${args[@]}" \
      --metrics "$dir/ps$workers-$r.jsonl"
  done
done
/usr/bin/python3 - "$dir" "$repeats" <<'PY'
import json, statistics, sys
d, repeats = sys.argv[1], int(sys.argv[2])
def last(path): return [json.loads(l) for l in open(path)][-1]
print(f"{'setup':>22} {'images/s (median)':>18} {'runs':>30}")
for name, label in [("single", "1 process"), ("ps1", "1 PS + 1 worker"), ("ps2", "1 PS + 2 workers"), ("ps4", "1 PS + 4 workers")]:
    v = [last(f"{d}/{name}-{r}.jsonl")["images_per_second"] for r in range(repeats)]
    print(f"{label:>22} {statistics.median(v):>18.1f} {' '.join(f'{x:.1f}' for x in v):>30}")
PY
