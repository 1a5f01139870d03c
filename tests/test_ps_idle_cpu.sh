#!/usr/bin/env bash
# A parameter server sleeps while it waits (issue 23). Mode `idle`: one rank waiting for workers
# to join (--max-workers) and nothing else; mode `one-worker`: 1 PS + 1 worker pushing at an
# emulated K80's pace (about 4.5 pushes a second). Either way the PS uses under 10% of a core over
# 5 s: loose on purpose (bench/perf/ps_cpu.sh holds the real figures, 0.6% and 1.1%; the napping loop
# this replaced took 67% of a core idle).
# Usage: test_ps_idle_cpu.sh MPIEXEC MPI_TRAINER idle|one-worker
set -euo pipefail
mpiexec=$1 trainer=$2 mode=$3
dir=$(mktemp -d)
mp=""
trap '[[ -n $mp ]] && kill -TERM $mp 2>/dev/null; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 512 --test 64 --seed 5 >/dev/null
flags=(--model resnet8 --batch-size 16 --data "$dir/data" --threads 1 --log-every-steps 1000000)
if [[ $mode == idle ]]; then
  "$mpiexec" -np 1 "$trainer" train "${flags[@]}" --train-steps 100 --max-workers 2 --ckpt-dir "$dir/ck" \
    >"$dir/out" 2>&1 &
  mp=$!
  for ((i = 0; i < 300; i++)); do [[ -s $dir/ck/ps-port ]] && break; sleep 0.1; done  # ready for joins
  [[ -s $dir/ck/ps-port ]] || { echo "FAIL: the parameter server did not open its port"; cat "$dir/out"; exit 1; }
else
  "$mpiexec" -np 2 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train "${flags[@]}" --train-steps 1000000 \
    --emulate-device k80 --metrics "$dir/m.jsonl" >"$dir/out" 2>&1 &
  mp=$!
  for ((i = 0; i < 300; i++)); do grep -q '"event":"first_step"' "$dir/m.jsonl" 2>/dev/null && break; sleep 0.1; done
  grep -q '"event":"first_step"' "$dir/m.jsonl" || { echo "FAIL: no first step"; cat "$dir/out"; exit 1; }
fi
ps=""
for p in $(pgrep -P "$mp"); do
  [[ $(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') == 0 ]] && ps=$p
done
[[ -n $ps ]] || { echo "FAIL: no rank 0 under mpirun"; exit 1; }
sleep 1
t0=$(awk '{print $14 + $15}' "/proc/$ps/stat")
sleep 5
t1=$(awk '{print $14 + $15}' "/proc/$ps/stat")
share=$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.4f", (b - a) / hz / 5 }')
kill -TERM "$mp"
wait "$mp" || true
mp=""
awk -v s="$share" 'BEGIN { exit !(s < 0.10) }' || { echo "FAIL: the $mode parameter server used $share of a core (limit 0.10)"; exit 1; }
echo "ok: the $mode parameter server used $share of a core over 5 s"
