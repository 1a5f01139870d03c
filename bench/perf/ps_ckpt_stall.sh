#!/usr/bin/env bash
# Parameter-server checkpoint cost: how long shard 0 stops serving pushes per checkpoint (the
# in-memory snapshot and hand-over to the writer thread: `stall_seconds` of the
# checkpoint_snapshot events), the background write and sync times, and the file size.
# 1 worker, 1 and 2 shards, a checkpoint every EVERY global steps, REPEATS runs each.
#   bench/perf/ps_ckpt_stall.sh [--model resnet32] [--steps 60] [--every 3] [--repeats 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --model model resnet32
bench_opt --steps steps 60
bench_opt --every every 3
bench_opt --repeats repeats 2
bench_parse "[--model M] [--steps N] [--every K] [--repeats R]" "$@"
bench_env
for shards in 1 2; do
  for ((r = 0; r < repeats; ++r)); do
    mpirun -np $((shards + 1)) --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train \
      --model "$model" --num-ps "$shards" --train-steps "$steps" --threads 1 --quiet \
      --ckpt-dir "$dir/ck-$shards-$r" --ckpt-every-steps "$every" --ckpt-keep 2 \
      --metrics "$dir/ps$shards-$r.jsonl" > /dev/null
  done
done
/usr/bin/python3 - "$dir" "$repeats" <<'PY'
import json, statistics, sys
d, repeats = sys.argv[1], int(sys.argv[2])
print(f"{'shards':>6} {'checkpoints':>11} {'stall ms median':>15} {'p90':>6} {'max':>6} {'first':>6} "
      f"{'write ms':>8} {'sync ms':>7} {'MB':>6}")
for s in (1, 2):
    snaps, writes = [], []
    first = []
    for r in range(repeats):
        ev = [json.loads(l) for l in open(f"{d}/ps{s}-{r}.jsonl")]
        sn = [e for e in ev if e["event"] == "checkpoint_snapshot"]
        first.append(sn[0]["stall_seconds"] * 1e3)
        snaps += [e["stall_seconds"] * 1e3 for e in sn]
        writes += [e for e in ev if e["event"] == "checkpoint"]
    snaps.sort()
    med = lambda k: statistics.median(w[k] for w in writes)
    print(f"{s:>6} {len(snaps):>11} {statistics.median(snaps):>15.2f} {snaps[int(0.9 * (len(snaps) - 1))]:>6.2f} "
          f"{snaps[-1]:>6.2f} {statistics.median(first):>6.2f} {med('write_seconds') * 1e3:>8.1f} "
          f"{med('sync_seconds') * 1e3:>7.1f} {med('bytes') / 1e6:>6.2f}")
PY
