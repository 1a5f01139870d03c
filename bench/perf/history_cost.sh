#!/usr/bin/env bash
# The cost of the run's history (--push-log: a line per push at shard 0, one per acknowledged push
# at each worker, each one write(2); docs/fault-model.md, "The history and its checker"): the same
# job of 1 PS + 3 workers (resnet8, batch 32, generated data) without and with --push-log,
# alternated round by round, side by side in one run. Two loads: synthetic gradients (the
# parameter server's update rate at its highest, ~10,000 updates/s here: the worst case) and real
# gradients. Prints each round's global steps/s and, per load, the median ratio with / without;
# then checks one history with bench/faults/history_check.py.
#   bench/perf/history_cost.sh [--rounds 5] [--steps 20000] [--real-steps 600]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --rounds rounds 5
bench_opt --steps steps 20000
bench_opt --real-steps real_steps 600
bench_parse "[--rounds R] [--steps N] [--real-steps N]" "$@"
bench_env
"$trainer" gen-data "$dir/data" --train 2048 --test 128 --seed 3 >/dev/null
run() {  # run LOAD MODE STEPS: prints global steps/s of the run's summary
  local load=$1 mode=$2 n=$3 extra=()
  rm -rf "$dir/push.csv" "$dir/push.csv.acks" "$dir/m.jsonl"
  [[ $load == synthetic ]] && extra+=(--synthetic-gradients)
  [[ $mode == on ]] && extra+=(--push-log "$dir/push.csv")
  mpirun -np 4 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 --batch-size 32 \
    --train-steps "$n" --data "$dir/data" --metrics "$dir/m.jsonl" --eval-every-steps 0 --quiet "${extra[@]}" \
    >"$dir/out.txt" 2>&1 || { echo "history_cost: a $load run ($mode) failed:" >&2; tail -5 "$dir/out.txt" >&2; exit 1; }
  /usr/bin/python3 -c 'import json,sys; s=[json.loads(l) for l in open(sys.argv[1])][-1]; print(round(s["global_step"]/s["train_seconds"],1))' "$dir/m.jsonl"
}
for load in synthetic real; do
  n=$steps; [[ $load == real ]] && n=$real_steps
  ratios=()
  for ((r = 1; r <= rounds; r++)); do
    off=$(run "$load" off "$n")
    on=$(run "$load" on "$n")
    ratio=$(/usr/bin/python3 -c "print(round($on / $off, 3))")
    ratios+=("$ratio")
    echo "$load round $r: without $off steps/s, with --push-log $on steps/s: $ratio"
  done
  echo "$load: median ratio with / without --push-log $(/usr/bin/python3 -c 'import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))' "${ratios[@]}") ($rounds rounds, $n steps each)"
done
/usr/bin/python3 bench/faults/history_check.py "$dir/push.csv" --metrics "$dir/m.jsonl" | tail -1
