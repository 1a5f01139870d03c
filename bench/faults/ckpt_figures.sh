#!/usr/bin/env bash
# Issue 17's figures, all measured in one run of this script (bench/README.md, "Never lose work"):
#  1. checkpoint durable time vs `dd conv=fsync` of the same bytes on the same disk: a resnet32
#     checkpoint (3.8 MB) published ROUNDS times by build/release/bench/ckpt_bench, each after an
#     untimed one (as the trainer publishes: HDF5 image in memory, write, fsync, rename, directory
#     fsync), alternating with dd writing the same file (bs=4M conv=fsync, dd's own time); medians
#     and their ratio (goal ≤ 1.5);
#  2. SIGTERM to a durable checkpoint, resnet32: one process, and the PS of 1 PS + 2 workers;
#     the stop_checkpoint_durable event (seconds from the signal handler to the checkpoint
#     fsync'ed and renamed), median over REPEATS each (goal < 1 s);
#  3. the chaos suite (bench/faults/chaos.sh --kill-runs K --other-runs M): runs finished / runs, per
#     scenario, and work lost per PS kill (goal: at most one checkpoint interval);
#  4. work lost per PS kill with --ckpt-sync on (chaos.sh --sync, the PS-kill scenarios, K runs),
#  5. and with --ckpt-sync off (chaos.sh --async): the default, auto, is part 3.
#   bench/faults/ckpt_figures.sh [--rounds 15] [--repeats 3] [--kill-runs 20] [--other-runs 3] [--disk DIR]
# --disk: a directory on the disk to measure (default: build/ckpt-figures in this checkout).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --rounds rounds 15
bench_opt --repeats repeats 3
bench_opt --kill-runs kill_runs 20
bench_opt --other-runs other_runs 3
bench_opt --disk disk build/ckpt-figures
bench_parse "[--rounds R] [--repeats R] [--kill-runs K] [--other-runs M] [--disk DIR]" "$@"
bench_env
bench=build/release/bench/ckpt_bench
[[ -x $bench ]] || { echo "build first: launch/build.sh release (no $bench)" >&2; exit 1; }
mkdir -p "$disk"
disk=$(mktemp -d "$disk/run.XXXXXX")
trap 'pkill -9 -f "mpi_trainer train .*$dir/" 2>/dev/null || true; rm -rf "$dir" "$disk"' EXIT
"$trainer" gen-data "$dir/data" --train 1024 --test 128 --seed 5 >/dev/null

echo "== 1. checkpoint durable vs dd conv=fsync (resnet32, $rounds rounds, $(df --output=source,fstype "$disk" | tail -1))"
"$trainer" train --model resnet32 --data "$dir/data" --batch-size 8 --train-steps 1 --threads 1 \
  --ckpt-dir "$dir/src" --quiet >/dev/null
src=$(ls "$dir"/src/ckpt-*.h5 | tail -1)
: >"$dir/publish.jsonl" && : >"$dir/dd.txt"
for ((r = 1; r <= rounds; r++)); do
  one() { "$bench" --from "$src" --dir "$disk/ck" --rounds 1 >>"$dir/publish.jsonl"; }
  two() {
    LC_ALL=C dd if="$src" of="$disk/dd.bin" bs=4M conv=fsync 2>&1 | sed -n 's/.*copied, \([0-9.e-]*\) s.*/\1/p' >>"$dir/dd.txt"
    rm -f "$disk/dd.bin"
  }
  if ((r % 2)); then one; two; else two; one; fi
done
/usr/bin/python3 - "$dir/publish.jsonl" "$dir/dd.txt" <<'PY'
import json, statistics, sys
pub = [json.loads(l) for l in open(sys.argv[1])]
dd = [float(l) for l in open(sys.argv[2]) if l.strip()]
med = lambda k: statistics.median(p[k] for p in pub)
d = statistics.median(dd)
print(f"checkpoint {pub[0]['bytes'] / 1e6:.2f} MB: durable {med('durable_s') * 1e3:.1f} ms median "
      f"(in memory {med('image_s') * 1e3:.1f}, write + fsync {med('file_s') * 1e3:.1f}, rename + directory fsync "
      f"{(med('durable_s') - med('image_s') - med('file_s')) * 1e3:.1f}; LATEST after: published "
      f"{med('published_s') * 1e3:.1f})")
print(f"dd conv=fsync of the same bytes: {d * 1e3:.1f} ms median "
      f"(range {min(dd) * 1e3:.1f}-{max(dd) * 1e3:.1f}; durable range "
      f"{min(p['durable_s'] for p in pub) * 1e3:.1f}-{max(p['durable_s'] for p in pub) * 1e3:.1f})")
print(f"durable / dd: {med('durable_s') / d:.2f}x (goal <= 1.5x)")
PY

echo "== 2. SIGTERM -> durable checkpoint (resnet32, $repeats repeats each)"
wait_progress() {  # wait_progress METRICS: until the first progress event (120 s at most)
  for ((t = 0; t < 1200; t++)); do
    grep -q '"event":"progress"' "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no progress in $1" >&2; exit 1
}
for ((r = 1; r <= repeats; r++)); do
  "$trainer" train --model resnet32 --data "$dir/data" --batch-size 32 --train-steps 100000 --threads 1 \
    --ckpt-dir "$dir/single$r" --ckpt-every-steps 100000 --log-every-steps 1 --metrics "$dir/single$r.jsonl" \
    --quiet >"$dir/single$r.txt" 2>&1 &
  pid=$!
  wait_progress "$dir/single$r.jsonl"
  sleep 1
  kill -TERM "$pid"
  rc=0; wait "$pid" || rc=$?
  [[ $rc == 75 ]] || { echo "one process: exit $rc after SIGTERM, expected 75"; cat "$dir/single$r.txt"; exit 1; }
  mpirun --enable-recovery -np 3 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet32 \
    --data "$dir/data" --batch-size 32 --train-steps 100000 --threads 1 --ckpt-dir "$dir/ps$r" \
    --ckpt-every-steps 100000 --log-every-steps 1 --metrics "$dir/ps$r.jsonl" --quiet >"$dir/ps$r.txt" 2>&1 &
  job=$!
  wait_progress "$dir/ps$r.jsonl"
  sleep 1
  pspid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$dir/ps$r/run-status.json")
  kill -TERM "$pspid"
  wait "$job" || true
done
/usr/bin/python3 - "$dir" "$repeats" <<'PY'
import json, statistics, sys
d, repeats = sys.argv[1], int(sys.argv[2])
for kind, what in (("single", "one process"), ("ps", "parameter server (1 PS + 2 workers)")):
    dur = []
    for r in range(1, repeats + 1):
        ev = [json.loads(l) for l in open(f"{d}/{kind}{r}.jsonl")]
        got = [e["seconds_after_stop"] for e in ev if e["event"] == "stop_checkpoint_durable"]
        if not got:
            sys.exit(f"{what}: no stop_checkpoint_durable event in run {r}")
        dur += got
    print(f"{what}: SIGTERM -> durable checkpoint median {statistics.median(dur):.3f} s "
          f"(runs: {', '.join(f'{x:.3f}' for x in dur)}; goal < 1 s)")
PY

echo "== 3. chaos (bench/faults/chaos.sh --kill-runs $kill_runs --other-runs $other_runs; the default --ckpt-sync auto)"
bash bench/faults/chaos.sh --kill-runs "$kill_runs" --other-runs "$other_runs" --trainer "$trainer" | tee "$dir/chaos.txt" |
  grep -v "^run [0-9]* .*: finished in" || true

echo "== 4. work lost per PS kill with --ckpt-sync on (bench/faults/chaos.sh --sync --only ps-kill,ps-kill-mid --kill-runs $kill_runs)"
bash bench/faults/chaos.sh --sync --only ps-kill,ps-kill-mid --kill-runs "$kill_runs" --trainer "$trainer" | tee "$dir/sync.txt" |
  grep -v "^run [0-9]* .*: finished in" || true

echo "== 5. the same with --ckpt-sync off (bench/faults/chaos.sh --async --only ps-kill,ps-kill-mid --kill-runs $kill_runs)"
bash bench/faults/chaos.sh --async --only ps-kill,ps-kill-mid --kill-runs "$kill_runs" --trainer "$trainer" | tee "$dir/async.txt" |
  grep -v "^run [0-9]* .*: finished in" || true
for f in chaos sync async; do grep -q "^chaos: " "$dir/$f.txt" && ! grep -q "FAILED" "$dir/$f.txt"; done
