#!/usr/bin/env bash
# Parameter-server updates/s, old build vs new, side by side in one run: for each configuration
# (workers, shards, transport) the two ps_bench binaries alternate (old, new, new, old, ...) so
# both see the same machine state; the table shows medians and new/old.
#   bench/perf/ps_ab.sh OLD_PS_BENCH NEW_PS_BENCH [--rounds 4] [--steps 10000] [--model resnet32]
#                  [--configs "4/1/shm 8/1/shm 4/2/shm 4/1/messages 8/1/messages"]  (workers/shards/transport)
#                  [--old-flags "..."] [--new-flags "..."]  (more ps_bench flags for each side)
# One binary against itself with other flags, e.g. bf16 pushes against fp32:
#   bench/perf/ps_ab.sh build/release/bench/ps_bench build/release/bench/ps_bench --new-flags "--push-precision bf16"
# Runs shorter than a few seconds are too noisy here to show a few percent.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_arg old
bench_arg new
bench_opt --rounds rounds 4
bench_opt --steps steps 10000
bench_opt --model model resnet32
bench_opt --configs configs "4/1/shm 8/1/shm 4/2/shm 4/1/messages 8/1/messages"
bench_opt --old-flags old_flags ""
bench_opt --new-flags new_flags ""
bench_parse "OLD_PS_BENCH NEW_PS_BENCH [--rounds R] [--steps N] [--model M] [--configs LIST] [--old-flags F] [--new-flags F]" "$@"
old=$(realpath "$old") new=$(realpath "$new")
bench_env
out=$dir/results.jsonl
run() {  # which binary workers shards shm
  local bin=$old flags=$old_flags; [[ $1 == new ]] && bin=$new flags=$new_flags
  # shellcheck disable=SC2086 # the flags are words
  mpirun -np $(($2 + $3)) --oversubscribe -x MT_PS_SHM=$4 "$bin" --model "$model" --num-ps "$3" --steps "$steps" $flags |
    grep '^{' | sed "s/^{/{\"build\": \"$1\", \"transport\": \"$([[ $4 == 1 ]] && echo shm || echo messages)\", /" >>"$out"
}
for cfg in $configs; do
  IFS=/ read -r workers shards transport <<<"$cfg"
  case $transport in shm) shm=1 ;; messages) shm=0 ;; *) echo "bad transport in $cfg" >&2; exit 2 ;; esac
  for ((r = 0; r < rounds; ++r)); do
    if ((r % 2 == 0)); then run old $workers $shards $shm; run new $workers $shards $shm
    else run new $workers $shards $shm; run old $workers $shards $shm; fi
  done
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'workers':>7} {'shards':>6} {'transport':>9} {'old updates/s':>13} {'new updates/s':>13} {'new/old':>7} "
      f"{'round trip ms old/new':>21}  each run")
keys = sorted({(r["workers"], r["num_ps"], r["transport"]) for r in rows}, key=lambda k: (k[2] != "shm", k[1], k[0]))
for w, s, t in keys:
    g = lambda b, k: [r[k] for r in rows if (r["workers"], r["num_ps"], r["transport"], r["build"]) == (w, s, t, b)]
    o, n = g("old", "updates_per_second"), g("new", "updates_per_second")
    trip = f"{statistics.median(g('old', 'round_trip_ms')):.3f} / {statistics.median(g('new', 'round_trip_ms')):.3f}"
    print(f"{w:>7} {s:>6} {t:>9} {statistics.median(o):>13.0f} {statistics.median(n):>13.0f} "
          f"{statistics.median(n) / statistics.median(o):>7.3f} {trip:>21}  old {' '.join(f'{v:.0f}' for v in o)}"
          f" | new {' '.join(f'{v:.0f}' for v in n)}")
PY
