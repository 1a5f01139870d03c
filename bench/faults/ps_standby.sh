#!/usr/bin/env bash
# Standby replicas of the parameter server (--ps-standby, docs/fault-model.md), two measurements:
# 1. what they cost: updates/s of 1 PS + N workers pushing a fixed gradient (--synthetic-gradients:
#    the PS is the bottleneck, the worst case for the replica's copy) with --ps-standby 0 and 1
#    alternated run by run; goal (issue 21) >= 0.95x;
# 2. what they save: K PS kills (SIGKILL at a random step of 300, resnet8, 3 workers, a periodic
#    checkpoint every 100 steps) under launch/restart_loop.sh, with and without a standby in turn:
#    updates lost (the kill's step minus the step resumed from) and the seconds from the kill to
#    the restarted job's first applied step (a full restart: detection, process and MPI start,
#    data, resume).
#   bench/faults/ps_standby.sh [--model resnet32] [--workers 4] [--steps 2000] [--repeats 5]
#                       [--replica-interval 10] [--replica-budget 0.01] [--kills 10]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --model model resnet32
bench_opt --workers workers 4
bench_opt --steps steps 2000
bench_opt --repeats repeats 5
bench_opt --replica-interval interval 10
bench_opt --replica-budget budget 0.01
bench_opt --kills kills 10
bench_parse "[--model M] [--workers N] [--steps N] [--repeats R] [--replica-interval K] [--replica-budget B] [--kills K]" "$@"
bench_env
"$trainer" gen-data "$dir/data" --train 1024 --test 256 --seed 1 >/dev/null
for ((r = 0; r < repeats; ++r)); do
  for standby in 0 1; do
    rm -rf "$dir/ck"
    mpirun --enable-recovery -np $((workers + 1)) --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train \
      --model "$model" --data "$dir/data" --train-steps "$steps" --synthetic-gradients --quiet --ckpt-dir "$dir/ck" \
      --ps-standby $standby --replica-interval "$interval" --replica-budget "$budget" --metrics "$dir/m.$standby.$r.jsonl" > "$dir/out.txt" 2>&1 ||
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

((kills > 0)) || exit 0
for ((k = 0; k < 2 * kills; ++k)); do
  standby=$((k % 2)) at=$((60 + RANDOM % 140))
  rm -rf "$dir/ck" "$dir/k.jsonl"
  cat > "$dir/job.sh" <<JOB
#!/usr/bin/env bash
extra=()
[[ \$MT_RESTART_ATTEMPT == 1 ]] && extra=(--revoke rank=0@step=$at:KILL)
exec mpirun --enable-recovery -np 4 --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT "$trainer" train \
  --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off --data "$dir/data" --train-steps 300 \
  --ckpt-dir "$dir/ck" --ckpt-every-steps 100 --ps-standby $standby --replica-interval $interval \
  --replica-budget $budget --metrics "$dir/k.jsonl" --quiet "\${extra[@]}"
JOB
  chmod +x "$dir/job.sh"
  launch/restart_loop.sh --attempts 3 --delay 0 --status "$dir/ck/run-status.json" -- "$dir/job.sh" > "$dir/loop.txt" 2>&1 ||
    { cat "$dir/loop.txt"; exit 1; }
  grep -q "attempt 2/" "$dir/loop.txt" || { echo "the parameter server was not killed"; cat "$dir/loop.txt"; exit 1; }
  killed=$(grep -o "SIGKILL to itself at unix [0-9.]*" "$dir/loop.txt" | grep -o "[0-9.]*$")
  /usr/bin/python3 - "$dir/k.jsonl" "$standby" "$at" "$killed" >> "$dir/kills.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
s = events[-1]
# (attempts stays 1 when the kill came before any checkpoint: the rerun starts afresh)
assert s["event"] == "summary" and s["global_step"] == 300, s
first = [e for e in events if e["event"] == "first_step"][-1]
print(json.dumps({"standby": int(sys.argv[2]), "killed_at": int(sys.argv[3]), "resumed": s["resumed_from_step"],
                  "lost": int(sys.argv[3]) - s["resumed_from_step"], "restart_s": first["unix_time"] - float(sys.argv[4])}))
PY
done
/usr/bin/python3 - "$dir/kills.jsonl" "$interval" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"PS SIGKILLed at a random step of 300, {len(runs) // 2} kills each way (resnet8, 3 workers, checkpoint every 100 steps, "
      f"replica every {sys.argv[2]} updates)")
for standby, name in ((1, "with a standby"), (0, "without      ")):
    r = [x for x in runs if x["standby"] == standby]
    lost = [x["lost"] for x in r]
    print(f"  {name}: updates lost median {statistics.median(lost):g} (max {max(lost)}; {lost}); "
          f"kill to first applied step after the restart: median {statistics.median(x['restart_s'] for x in r):.2f} s")
PY
