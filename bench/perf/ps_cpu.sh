#!/usr/bin/env bash
# The parameter server's CPU use (issue 23), this build against a baseline build side by side in
# one run (each measurement alternates the two builds, round by round), on Fashion-MNIST:
#  1. A PS's CPU use in cores (CPU seconds per wall second, /proc/PID/stat, over --window seconds
#     once the job runs): idle (one rank waiting for workers to join, --max-workers), and with 1,
#     2, 4 and 8 workers pushing at an emulated K80's pace (resnet32 gradients computed for real
#     at batch 8, each step padded to the K80's 0.22 s: about 4.5 pushes a second per worker),
#     with the mean worker's cores beside it.
#  2. Images/s of resnet32 at batch 128, every process with OMP_WAIT_POLICY=passive: one process
#     with --threads 1 and 2; 1 PS + 1 worker under mpirun --bind-to none with --threads 1, 0
#     (auto) and 2; and 1 PS + 1 worker with mpirun's default binding (each rank on one core) and
#     --threads 0. A run's figure is the median of its progress lines' rates after the first; the
#     ratio to one process with 2 threads is taken within each round (this machine's speed drifts
#     by a third from one minute to the next), then the median over rounds.
#  3. With --baseline: updates/s with 4 and 8 workers, both transports (bench/perf/ps_ab.sh).
#   bench/perf/ps_cpu.sh [--baseline DIR] [--rounds 3] [--window 8] [--steps 60] [--data DIR]
#                   [--parts cpu,speed,updates]
# DIR holds the baseline's mpi_trainer and ps_bench (built from an older commit); without it only
# this build is measured. Run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --baseline baseline ""
bench_opt --rounds rounds 3
bench_opt --window window 8
bench_opt --steps steps 60
bench_opt --data data /usr/share/datasets/fashion-mnist
bench_opt --parts parts cpu,speed,updates
bench_parse "[--baseline DIR] [--rounds R] [--window S] [--steps N] [--data DIR] [--parts LIST]" "$@"
[[ -z $baseline ]] || baseline=$(realpath "$baseline")
bench_env
[[ -z $baseline || (-x $baseline/mpi_trainer && -x $baseline/ps_bench) ]] ||
  { echo "--baseline $baseline: needs mpi_trainer and ps_bench there" >&2; exit 2; }
builds=(new) ; [[ -n $baseline ]] && builds=(old new)
bin() { [[ $1 == old ]] && echo "$baseline/mpi_trainer" || realpath "$trainer"; }
out=$dir/results.jsonl
rank_pid() {  # MPIRUN_PID RANK: the rank's process (a child of mpirun on this node)
  local p r
  for ((t = 0; t < 100; ++t)); do
    for p in $(pgrep -P "$1" || true); do
      r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      [[ $r == "$2" ]] && { echo "$p"; return; }
    done
    sleep 0.1
  done
  echo "no rank $2 under mpirun $1" >&2; return 1
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# cpu BUILD WORKERS: starts the job, waits for it to run, samples every rank over the window.
cpu() {
  local build=$1 workers=$2 np log=$dir/cpu.out mp pids=() t0=() t1=() i
  rm -rf "$dir/ck"
  if ((workers == 0)); then
    mpirun -np 1 "$(bin "$build")" train --model resnet32 --data "$data" --max-workers 2 --ckpt-dir "$dir/ck" \
      --train-steps 100 >"$log" 2>&1 &
  else
    mpirun -np $((workers + 1)) --oversubscribe --bind-to none -x OMP_WAIT_POLICY=passive "$(bin "$build")" train \
      --model resnet32 --batch-size 8 --threads 1 --emulate-device k80 --data "$data" --train-steps 100000 \
      --log-every-steps 100000 >"$log" 2>&1 &
  fi
  mp=$!
  sleep 6  # start-up: data, model, the workers' joins
  for ((i = 0; i <= workers; ++i)); do pids+=("$(rank_pid "$mp" "$i")"); done
  for p in "${pids[@]}"; do t0+=("$(ticks "$p")"); done
  sleep "$window"
  for p in "${pids[@]}"; do t1+=("$(ticks "$p")"); done
  kill -TERM "$mp"
  wait "$mp" || true
  local hz; hz=$(getconf CLK_TCK)
  /usr/bin/python3 - "$build" "$workers" "$window" "$hz" "${t0[*]}" "${t1[*]}" "$log" >>"$out" <<'PY'
import json, sys
build, workers, window, hz = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
t0, t1 = [float(x) for x in sys.argv[5].split()], [float(x) for x in sys.argv[6].split()]
cores = [(b - a) / hz / window for a, b in zip(t0, t1)]
summary = next((json.loads(l[len("summary: "):]) for l in open(sys.argv[7]) if l.startswith("summary: ")), {})
ups = summary.get("global_step", 0) / max(summary.get("train_seconds", 0) or 1e-9, 1e-9)
print(json.dumps({"part": "cpu", "build": build, "workers": workers, "ps_cores": cores[0],
                  "worker_cores": sum(cores[1:]) / workers if workers else None, "updates_per_second": ups}))
PY
}
# speed ROUND BUILD NAME ARGS...: images/s of one run (NAME labels the row).
speed() {
  local round=$1 build=$2 name=$3 log=$dir/speed.out; shift 3
  "$@" --model resnet32 --batch-size 128 --data "$data" --train-steps "$steps" --log-every-steps 10 >"$log" 2>&1 ||
    { echo "run failed: $*"; cat "$log"; exit 1; }
  /usr/bin/python3 - "$round" "$build" "$name" "$log" >>"$out" <<'PY'
import json, re, statistics, sys
rates = [float(m.group(1)) for l in open(sys.argv[4]) if (m := re.match(r"step \d+/\d+ .* img/s ([0-9.]+)", l))]
print(json.dumps({"part": "speed", "round": int(sys.argv[1]), "build": sys.argv[2], "name": sys.argv[3],
                  "images_per_second": statistics.median(rates[1:])}))
PY
}
# One speed configuration: BUILD THREADS BINDING (one: a single process).
speed_run() {
  local r=$1 b=$2 t=$3 how=$4
  case $how in
    one) OMP_WAIT_POLICY=passive speed "$r" new "one process, --threads $t" "$(bin new)" train --threads "$t" ;;
    none) speed "$r" "$b" "1 PS + 1 worker, --bind-to none, --threads $t" mpirun -np 2 --bind-to none \
            -x OMP_WAIT_POLICY=passive "$(bin "$b")" train --threads "$t" ;;
    default) speed "$r" "$b" "1 PS + 1 worker, default binding, --threads $t" mpirun -np 2 \
               -x OMP_WAIT_POLICY=passive "$(bin "$b")" train --threads "$t" ;;
  esac
}
configs=("new 1 one" "new 2 one")
for b in "${builds[@]}"; do configs+=("$b 1 none" "$b 0 none" "$b 2 none" "$b 0 default"); done
for ((r = 0; r < rounds; ++r)); do
  order=("${builds[@]}"); ((r % 2 == 1 && ${#builds[@]} == 2)) && order=(new old)
  if [[ ,$parts, == *,cpu,* ]]; then
    for w in 0 1 2 4 8; do for b in "${order[@]}"; do cpu "$b" "$w"; done; done
  fi
  if [[ ,$parts, == *,speed,* ]]; then
    # Forwards in even rounds, backwards in odd ones: no configuration always runs first.
    for ((i = 0; i < ${#configs[@]}; ++i)); do
      k=$i; ((r % 2 == 1)) && k=$((${#configs[@]} - 1 - i))
      speed_run "$r" ${configs[$k]}
    done
  fi
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
builds = [b for b in ("old", "new") if any(r["build"] == b for r in rows)]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"\nA parameter server's CPU use (cores), median of {sys.argv[2]} round(s); workers at an emulated K80's pace:")
print("| workers | " + " | ".join(f"PS cores, {b}" for b in builds) + " | " +
      " | ".join(f"updates/s, {b}" for b in builds) + " | mean worker cores, " + builds[-1] + " |")
print("|---" * (2 + 2 * len(builds)) + "|")
for w in (0, 1, 2, 4, 8) if any(r["part"] == "cpu" for r in rows) else ():
    g = {b: [r for r in rows if r["part"] == "cpu" and r["build"] == b and r["workers"] == w] for b in builds}
    wc = med([r["worker_cores"] for r in g[builds[-1]]]) if w else None
    print(f"| {'idle' if w == 0 else w} | " + " | ".join(f"{med([r['ps_cores'] for r in g[b]]):.3f}" for b in builds) + " | " +
          " | ".join(f"{med([r['updates_per_second'] for r in g[b]]):.1f}" if w else "-" for b in builds) +
          f" | {'-' if wc is None else f'{wc:.3f}'} |")
print(f"\nImages/s, resnet32 batch 128, median of {sys.argv[2]} round(s):")
speed = [r for r in rows if r["part"] == "speed"]
one = {r["round"]: r["images_per_second"] for r in speed if r["name"] == "one process, --threads 2"}
print("| run | " + " | ".join(builds) + " | " + " | ".join(f"vs one process with 2 threads, {b}" for b in builds) + " |")
print("|---" * (1 + 2 * len(builds)) + "|")
for n in dict.fromkeys(r["name"] for r in speed):
    g = {b: [r for r in speed if r["name"] == n and r["build"] == b] for b in builds}
    v = {b: med([r["images_per_second"] for r in g[b]]) for b in builds}
    q = {b: med([r["images_per_second"] / one[r["round"]] for r in g[b] if r["round"] in one]) for b in builds}
    print(f"| {n} | " + " | ".join("" if v[b] != v[b] else f"{v[b]:.1f}" for b in builds) + " | " +
          " | ".join("" if q[b] != q[b] else f"{q[b]:.2f}" for b in builds) + " |")
PY
if [[ -n $baseline && ,$parts, == *,updates,* ]]; then
  echo
  bash bench/perf/ps_ab.sh "$baseline/ps_bench" build/release/bench/ps_bench --rounds "$rounds" --steps 10000
fi
