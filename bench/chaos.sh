#!/usr/bin/env bash
# Chaos: real processes and real signals, nothing mocked (issue 17). Each run is 1 PS + 3 workers
# (resnet8, generated data, a checkpoint every 20 global steps) under launch/restart_loop.sh,
# with one fault in its first attempt, at a random moment:
#   worker-kill  1 or 2 workers SIGKILL themselves at random global steps
#   ps-kill      the PS SIGKILLs itself at a random global step
#   ps-kill-mid  the PS is SIGKILLed in the middle of writing a random checkpoint (a torn write)
#   ps-term-mid  SIGTERM reaches the PS in the middle of writing a random checkpoint
# After each run: the job finished (restart loop exit 0, summary at the last step), the global step
# never went back past a checkpoint that was durable when the PS was lost (the next attempt
# resumed from the newest one), every checkpoint left verifies, no temporary file is left. Work
# lost per PS kill: the last step the PS reported before the kill minus the step resumed from (at
# most one interval plus the steps applied while the newest checkpoint was being written, which a
# kill in the middle of that write loses too).
#
#   bench/chaos.sh [--runs N] [--seed S] [--trainer PATH]
#   --runs N   runs, the scenarios in turn (default 40: 10 of each); CTest's `chaos` label runs 4
# Prints one line per run and the figures: runs finished / runs, work lost per PS kill (median,
# max, in steps and as a fraction of the interval). Exit 0 when every run passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=40 seed=1 trainer="$here/../build/release/mpi_trainer"
while (($#)); do
  case $1 in
    --runs) runs=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --trainer) trainer=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $trainer ]] || { echo "chaos.sh: no mpi_trainer at $trainer (launch/build.sh release)" >&2; exit 2; }
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'pkill -9 -f "mpi_trainer train .*$dir/" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 128 --seed 3 >/dev/null
steps=200 interval=20
RANDOM=$seed
scenarios=(worker-kill ps-kill ps-kill-mid ps-term-mid)
passed=0
: >"$dir/lost.txt"
for ((r = 1; r <= runs; r++)); do
  scenario=${scenarios[$(((r - 1) % 4))]}
  case $scenario in
    worker-kill)
      revoke="rank=$((1 + RANDOM % 3))@step=$((10 + RANDOM % 150))"
      ((RANDOM % 2)) && revoke+=",rank=$((1 + RANDOM % 3))@step=$((10 + RANDOM % 150))" ;;
    ps-kill) revoke="rank=0@step=$((25 + RANDOM % 150))" ;;
    ps-kill-mid) revoke="rank=0@ckpt=$((1 + RANDOM % 8))" ;;
    ps-term-mid) revoke="rank=0@ckpt=$((1 + RANDOM % 8)):TERM" ;;
  esac
  rm -rf "$dir/ck" "$dir/m.jsonl"
  cat >"$dir/cmd.sh" <<EOS
#!/usr/bin/env bash
extra=()
[[ \$MT_RESTART_ATTEMPT == 1 ]] && extra=(--revoke "$revoke")
exec mpirun --enable-recovery -np 4 --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT \\
  "$trainer" train --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --train-steps $steps \\
  --ckpt-every-steps $interval --log-every-steps 1 --failure-timeout 1 --data "$dir/data" --ckpt-dir "$dir/ck" \\
  --metrics "$dir/m.jsonl" --quiet --seed $r "\${extra[@]}"
EOS
  chmod +x "$dir/cmd.sh"
  rc=0
  t0=$SECONDS
  timeout 300 "$here/../launch/restart_loop.sh" --attempts 4 --delay 0 --status "$dir/ck/run-status.json" \
    -- "$dir/cmd.sh" >"$dir/loop.txt" 2>&1 || rc=$?
  why=""
  [[ $rc == 0 ]] || why="restart loop exit $rc"
  if [[ -z $why ]]; then
    why=$(/usr/bin/python3 - "$dir/m.jsonl" "$steps" "$scenario" "$interval" <<'PY' 2>&1 || true
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps, scenario, interval = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = events[-1]
if s["event"] != "summary" or s["global_step"] != steps or s["exit_code"] != 0:
    print(f"did not finish: {s}"); sys.exit()
# Each later attempt (a "config" event) resumed from a "resume" event just before it, or from 0.
# The step never goes back past what was durable: a resume starts at or after the newest
# checkpoint published (a "checkpoint" event) before the PS was lost. Work lost: the last step
# the PS reported before it was lost minus the step the next attempt resumed from.
lost, last, durable, resumed, configs = [], 0, 0, None, 0
for e in events:
    kind, step = e["event"], e.get("global_step")
    if kind == "resume":
        resumed = step
    elif kind == "config":
        configs += 1
        if configs > 1:
            start = resumed if resumed is not None else 0
            if start < durable:
                print(f"resumed from step {start}, older than the checkpoint of step {durable} published before"); sys.exit()
            lost.append(max(0, last - start))
            last = start
        resumed = None
    elif kind in ("progress", "checkpoint") and step is not None:
        last = max(last, step)
        if kind == "checkpoint":
            durable = max(durable, step)
if scenario.startswith("ps-kill"):
    if not lost:
        print("the PS kill did not lead to a second attempt"); sys.exit()
    open(sys.argv[1] + ".lost", "w").write(" ".join(map(str, lost)))
PY
)
  fi
  if [[ -z $why ]]; then
    ls "$dir/ck" | grep -q '\.tmp$' && why="a temporary file was left: $(ls "$dir/ck" | grep '\.tmp$')"
  fi
  if [[ -z $why ]]; then
    "$trainer" ckpt verify "$dir/ck" >"$dir/verify.txt" 2>&1 || why="ckpt verify: $(grep -v '^ok' "$dir/verify.txt" | head -1)"
  fi
  lost=""
  [[ -f $dir/m.jsonl.lost ]] && lost=$(cat "$dir/m.jsonl.lost") && echo "$lost" >>"$dir/lost.txt" && rm -f "$dir/m.jsonl.lost"
  attempts=$(grep -c "attempt [0-9]*/" "$dir/loop.txt" || true)
  if [[ -z $why ]]; then
    passed=$((passed + 1))
    echo "run $r $scenario ($revoke): finished in $((SECONDS - t0)) s, $attempts attempt(s)${lost:+, lost $lost step(s)}"
  else
    echo "run $r $scenario ($revoke): FAILED: $why"
    tail -20 "$dir/loop.txt"
  fi
done
/usr/bin/python3 - "$dir/lost.txt" "$interval" "$passed" "$runs" <<'PY'
import statistics, sys
lost = [int(x) for line in open(sys.argv[1]) for x in line.split()]
interval, passed, runs = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"chaos: {passed}/{runs} runs finished")
if lost:
    print(f"work lost per PS kill: median {statistics.median(lost):g} steps, max {max(lost)} "
          f"(checkpoint interval {interval}; {len(lost)} kills)")
PY
((passed == runs))
