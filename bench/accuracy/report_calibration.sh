#!/usr/bin/env bash
# Is `mpi_trainer plan`'s forecast calibrated? Scores its p10-p90 band against real runs: real
# processes under mpirun --enable-recovery and launch/restart_loop.sh, real SIGKILLs drawn from a
# revocation model (--revocation-model), device speeds emulated (--emulate-device: each step
# padded to the table's time), billed as transient K80s at the paper's prices. Not against
# virtual runs: they share plan's simulator. Each run is scored by `mpi_trainer report --plan`
# (report.json: time, cost and revocations inside the band or not); prints how often each
# outcome fell inside, over how many runs, and writes one report of every run overlaid.
#   bench/accuracy/report_calibration.sh [--runs 20] [--workers 4] [--steps 400] [--step-seconds 0.4] [--out DIR]
# The lifetimes are compressed so that a 40-60 s run sees about one revocation (a GCE-like
# shape: 30% revoked within 40 s, all within 12 min); the workers train resnet8 at batch 32 with
# one thread each, whose compute (~0.05 s here) stays below the padded step, so the device table,
# not this machine, sets the speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --runs runs 20
bench_opt --workers workers 4
bench_opt --steps steps 400
bench_opt --step-seconds step_seconds 0.4
bench_opt --out out runs/report-calibration
bench_parse "[--runs N] [--workers N] [--steps N] [--step-seconds S] [--out DIR]" "$@"
bench_env
mkdir -p "$out"
printf 'k80 %s 0.02\n' "$step_seconds" > "$out/devices.txt"
cat > "$out/lifetimes.csv" <<'CSV'
# hours,fraction revoked by then: GCE-like, compressed for a short calibration run
0,0
0.005,0.15
0.0111,0.3
0.0222,0.5
0.05,0.8
0.2,1.0
CSV
"$trainer" gen-data "$dir/data" --train 1024 --test 256 --seed 1 >/dev/null
common=(--model resnet8 --worker-types k80 --ckpt-every-steps 100)
"$trainer" plan --workers "$workers" --steps "$steps" --devices "$out/devices.txt" \
  --revocation-model "$out/lifetimes.csv" --restart-seconds 5 --draws 1000 --json --per-draw "${common[@]}" > "$out/plan.json"
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
files=()
for ((i = 1; i <= runs; ++i)); do
  rm -rf "$dir/ck"
  launch/restart_loop.sh --attempts 10 --delay 1 -- mpirun --enable-recovery -np $((workers + 1)) --oversubscribe \
    --bind-to none "${root[@]}" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x OMP_WAIT_POLICY=passive \
    "$trainer" train "${common[@]}" --batch-size 32 --threads 1 --data "$dir/data" --train-steps "$steps" \
    --emulate-device "$out/devices.txt" --pricing transient --revocation-model "$out/lifetimes.csv" --seed "$i" \
    --ckpt-dir "$dir/ck" --quiet --metrics "$out/run$i.jsonl" > "$out/run$i.log" 2>&1 || true
  "$trainer" report "$out/run$i.jsonl" --plan "$out/plan.json" -o "$out/run$i" > /dev/null 2>> "$out/run$i.log" || true
  files+=("$out/run$i.jsonl")
  echo "run $i: $(tail -n 1 "$out/run$i.jsonl" | cut -c1-120)"
done
"$trainer" report "${files[@]}" --plan "$out/plan.json" -o "$out/all" > /dev/null || true
/usr/bin/python3 - "$out" "$runs" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
plan = json.load(open(f"{out}/plan.json"))
tally = {}
for i in range(1, n + 1):
    try:
        rep = json.load(open(f"{out}/run{i}/report.json"))
    except OSError:
        print(f"run {i}: no report"); continue
    score = rep["runs"][0]["plan"]
    for k in ("time_seconds", "cost_usd", "revocations"):
        inside = score[k]["inside_band"]
        if inside is not None:
            tally.setdefault(k, []).append(inside)
print(f"plan: {plan['workers']} workers, {plan['global_steps']} steps; time p10/median/p90 "
      f"{plan['seconds']['p10']:.1f}/{plan['seconds']['median']:.1f}/{plan['seconds']['p90']:.1f} s, "
      f"cost p10/p90 ${plan['cost_usd']['p10']:.4f}/${plan['cost_usd']['p90']:.4f}, revocations mean {plan['revocations_mean']:.2f}")
for k, v in tally.items():
    print(f"{k}: inside the p10-p90 band in {sum(v)} of {len(v)} runs ({100 * sum(v) / len(v):.0f}%; a calibrated band: 80%)")
PY
