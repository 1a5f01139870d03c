#!/usr/bin/env bash
# Parameter-server throughput (updates/s) against the bound "one MPI round trip of the
# parameters + one optimizer update", both measured in the same MPI job (bench/perf/ps_bench.cpp),
# for 4 and 8 workers pushing a precomputed gradient, with 1 and 2 shards, through shared memory
# (the default on one node) and through plain MPI messages (MT_PS_SHM=0), alternated run by run.
# Each configuration runs REPEATS times; the table shows medians.
#   bench/perf/ps_throughput.sh [--model resnet32] [--steps 2000] [--repeats 3]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --model model resnet32
bench_opt --steps steps 2000
bench_opt --repeats repeats 3
bench_parse "[--model M] [--steps N] [--repeats R]" "$@"
bench_env
bench=build/release/bench/ps_bench
out=$dir/results.jsonl
for workers in 4 8; do
  for shards in 1 2; do
    for ((r = 0; r < repeats; ++r)); do
      for shm in 1 0; do
        mpirun -np $((workers + shards)) --oversubscribe -x MT_PS_SHM=$shm "$bench" --model "$model" --num-ps $shards \
          --steps "$steps" | sed "s/^{/{\"transport\": \"$([[ $shm == 1 ]] && echo shm || echo messages)\", /" | tee -a "$out"
      done
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"\n{'workers':>7} {'shards':>6} {'transport':>9} {'round trip ms':>13} {'update ms':>9} {'bound/s':>8} {'updates/s':>9} {'ratio':>6}")
for w in (4, 8):
    for s in (1, 2):
        for t in ("shm", "messages"):
            g = [r for r in rows if r["workers"] == w and r["num_ps"] == s and r.get("transport") == t]
            if not g: continue
            m = lambda k: statistics.median(r[k] for r in g)
            print(f"{w:>7} {s:>6} {t:>9} {m('round_trip_ms'):>13.3f} {m('update_ms'):>9.3f} {m('bound_updates_per_second'):>8.1f} "
                  f"{m('updates_per_second'):>9.1f} {m('ratio_to_bound'):>6.2f}")
PY
