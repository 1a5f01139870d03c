#!/usr/bin/env bash
# Eager messages against MPI's rendezvous on a real link, side by side (issue 60): the trainer
# raises Open MPI's TCP eager limit to its model's largest message before MPI starts
# (ps/wire/mpi_env.hpp, tcp_eager_up_to), so that a push or a reply leaves whole; with
# OMPI_MCA_btl_tcp_eager_limit=65536 in the environment (a user's setting, which it keeps) it goes
# by Open MPI's default rendezvous instead. Runs bench/perf/link_plan.sh (root: a namespace
# cluster, the shards' links shaped) alternately without and with that setting, --runs times
# each, then prints per shape the medians of the measured global steps/s and link efficiency of
# both and their ratio, eager over rendezvous, and the median ratio per worker count.
#   --rates "50 200"   --shards "1 2"   --precisions "fp32 bf16"   --workers 3   (link_plan.sh's)
#   --runs 2           each variant's runs, alternated
#   --seconds 8        measured seconds per link_plan.sh run
#   bench/perf/eager_ab.sh --rates 50 --workers 3 --runs 2   # about 7 minutes
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --rates rates "50 200"
bench_opt --shards shards "1 2"
bench_opt --precisions precisions "fp32 bf16"
bench_opt --workers workers 3
bench_opt --runs runs 2
bench_opt --seconds seconds 8
bench_parse "[--rates R..] [--shards S..] [--precisions P..] [--workers N] [--runs N] [--seconds S]" "$@"
[[ $runs =~ ^[1-9][0-9]*$ ]] || bench_usage_error "--runs takes a count from 1"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 1; i <= runs; i++)); do
  for variant in eager rendezvous; do
    env=()
    [[ $variant == rendezvous ]] && env=(OMPI_MCA_btl_tcp_eager_limit=65536)
    rc=0
    env "${env[@]}" bench/perf/link_plan.sh --rates "$rates" --shards "$shards" --precisions "$precisions" \
      --workers "$workers" --seconds "$seconds" --out "$out/$variant$i.json" >"$out/$variant$i.log" 2>&1 || rc=$?
    if ((rc != 0)); then
      tail -5 "$out/$variant$i.log" >&2
      echo "eager_ab.sh: link_plan.sh ($variant, run $i) failed (exit $rc)" >&2
      exit "$rc"
    fi
    grep '^per-message overhead' "$out/$variant$i.log" | sed "s/^/$variant run $i: /"
  done
done
/usr/bin/python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def rows(variant):
    return [{(r["rate"], r["shards"], r["push"], r["workers"]): r for r in json.load(open(f"{out}/{variant}{i}.json"))["rows"]}
            for i in range(1, runs + 1)]
eager, rdv = rows("eager"), rows("rendezvous")
med = lambda runs, k, key: statistics.median(r[k][key] for r in runs)
print(f"{'Mbit/s':>6} {'shards':>6} {'push':>5} {'workers':>7} {'rendezvous':>10} {'eager':>7} {'eager/rdv':>9} "
      f"{'link eff. rdv':>13} {'eager':>6}")
ratios = {}
for k in sorted(eager[0]):
    e, r = med(eager, k, "measured"), med(rdv, k, "measured")
    ratios.setdefault(k[3], []).append(e / r)
    print(f"{k[0]:6.0f} {k[1]:6d} {k[2]:>5} {k[3]:7d} {r:10.2f} {e:7.2f} {e / r:9.3f} "
          f"{med(rdv, k, 'efficiency'):13.2f} {med(eager, k, 'efficiency'):6.2f}")
print(f"{runs} run(s) each, alternated; steps/s eager over rendezvous, the median shape: " +
      ", ".join(f"{n} worker(s) {statistics.median(v):.3f}" for n, v in sorted(ratios.items())))
PY
