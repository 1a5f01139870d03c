#!/usr/bin/env bash
# Issue 18's figures: Debian's Open MPI 4.1 (heartbeats) and the ULFM build (Open MPI 5, MPI
# reports failed processes) side by side in one run, the builds alternated run by run:
#  1. worker-loss detection: 1 PS + 3 workers (resnet8), workers SIGKILL themselves (--revoke, two
#     per run at random global steps); latency = the PS's revocation event time minus the kill time
#     the victim printed; steps lost per kill (work_lost_steps: the victim's in-flight gradient);
#  2. PS-loss detection by the workers: the PS SIGKILLs itself at a random step; latency = each
#     worker's "parameter server is lost" line time minus the kill time; the job's end (mpirun's
#     exit) after the kill;
#  3. PS updates/s (bench/ps_bench, 4 workers, 1 shard, shared memory and plain messages) and the
#     single-worker step time (1 PS + 1 worker, resnet8, batch 32, train_seconds / steps).
# Medians over every kill / run. --failure-timeout is the quickstart's 1.5 s.
#   bench/faults/ulfm_bench.sh [--kills 10] [--rounds 3]
# Needs both builds: launch/build.sh release; launch/setup.sh --mpi ulfm && launch/build.sh ulfm.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --kills kills 10
bench_opt --rounds rounds 3
bench_parse "[--kills N] [--rounds R]" "$@"
bench_env
source launch/mpi_lib.sh
builds=(release ulfm)
for b in "${builds[@]}"; do
  [[ -x build/$b/mpi_trainer && -x build/$b/bench/ps_bench ]] ||
    { echo "build first: launch/build.sh $b (no build/$b/mpi_trainer or bench/ps_bench)" >&2; exit 1; }
done
"$trainer" gen-data "$dir/data" --train 4096 --test 256 --seed 3 >/dev/null
out=$dir/rows.jsonl
common=(--model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off --data "$dir/data"
        --failure-timeout 1.5 --log-every-steps 1000 --quiet)
job() {  # job BUILD NP OUTFILE TRAIN_FLAGS...: one mpirun job of that build, stdout+stderr to OUTFILE
  local b=$1 np=$2 o=$3; shift 3
  mt_mpirun_for "build/$b/mpi_trainer" --loopback
  "${MT_MPIRUN[@]}" -np "$np" --oversubscribe -x OMP_WAIT_POLICY=passive "build/$b/mpi_trainer" train "$@" >"$o" 2>&1
}
row() { echo "$1" >>"$out"; }

echo "== 1. worker loss: $kills kills per build (two per run)"
for ((r = 0; r < (kills + 1) / 2; r++)); do
  a=$((30 + RANDOM % 40)) c=$((110 + RANDOM % 40))
  for b in "${builds[@]}"; do
    rm -rf "$dir/ck" "$dir/m.jsonl"
    job "$b" 4 "$dir/o.txt" "${common[@]}" --train-steps 300 --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl" \
      --revoke "rank=3@step=$a,rank=2@step=$c" || true
    /usr/bin/python3 - "$b" "$dir/o.txt" "$dir/m.jsonl" >>"$out" <<'PY'
import json, re, sys
b, o, m = sys.argv[1:]
killed = {int(r): float(t) for r, t in re.findall(r"rank (\d+): revoked .* to itself at unix ([0-9.]+)", open(o).read())}
ev = [json.loads(l) for l in open(m)]
s = ev[-1]
for e in ev:
    if e["event"] == "revocation" and e["rank"] in killed:
        print(json.dumps({"kind": "worker_loss", "build": b, "latency": e["unix_time"] - killed[e["rank"]],
                          "detected_by": e["detected_by"], "work_lost_steps": e["work_lost_steps"],
                          "finished": s["event"] == "summary" and s["global_step"] == 300}))
PY
  done
done

echo "== 2. parameter-server loss: $kills kills per build"
for ((r = 0; r < kills; r++)); do
  a=$((40 + RANDOM % 100))
  for b in "${builds[@]}"; do
    rm -rf "$dir/ck"
    t0=$(date +%s.%N)
    # No standby: the workers detect the loss and exit 10 (under ULFM a standby would take the
    # parameter server over and training would go on; that is bench/faults/ps_takeover.sh's figure).
    job "$b" 4 "$dir/o.txt" "${common[@]}" --train-steps 100000 --ckpt-dir "$dir/ck" --ps-standby 0 \
      --revoke "rank=0@step=$a" || true
    t1=$(date +%s.%N)
    /usr/bin/python3 - "$b" "$dir/o.txt" "$t1" >>"$out" <<'PY'
import json, re, sys
b, o, t1 = sys.argv[1], open(sys.argv[2]).read(), float(sys.argv[3])
k = float(re.search(r"rank 0: revoked .* to itself at unix ([0-9.]+)", o).group(1))
seen = [float(t) for t in re.findall(r"worker rank \d+: parameter-server shard 0 .* at unix ([0-9.]+): the parameter server is lost", o)]
print(json.dumps({"kind": "ps_loss", "build": b, "workers_told": len(seen),
                  "latencies": [t - k for t in seen], "job_end": t1 - k}))
PY
  done
done

echo "== 3. PS updates/s (4 workers, 1 shard) and single-worker step time: $rounds rounds, builds alternated"
for ((r = 0; r < rounds; r++)); do
  for b in "${builds[@]}"; do
    mt_mpirun_for "build/$b/mpi_trainer" --loopback
    for shm in 1 0; do
      "${MT_MPIRUN[@]}" -np 5 --oversubscribe -x MT_PS_SHM=$shm "build/$b/bench/ps_bench" --model resnet32 --num-ps 1 \
        --steps 2000 | grep '^{' | sed "s/^{/{\"kind\": \"ps_bench\", \"build\": \"$b\", \"shm\": $shm, /" >>"$out"
    done
    rm -rf "$dir/ck" "$dir/m.jsonl"
    job "$b" 2 "$dir/o.txt" "${common[@]}" --train-steps 300 --threads 1 --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl"
    /usr/bin/python3 -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[2]) if "\"summary\"" in l][-1]
print(json.dumps({"kind": "step", "build": sys.argv[1], "step_ms": 1e3 * s["train_seconds"] / s["global_step"]}))' \
      "$b" "$dir/m.jsonl" >>"$out"
  done
done

/usr/bin/python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = lambda xs: st.median(xs) if xs else float("nan")
def sel(kind, b): return [r for r in rows if r["kind"] == kind and r["build"] == b]
names = {"release": "Open MPI 4.1 (heartbeats)", "ulfm": "Open MPI 5 ULFM"}
print(f"\n{'figure':<44} {names['release']:>26} {names['ulfm']:>26}")
def line(label, f):
    print(f"{label:<44} {f('release'):>26} {f('ulfm'):>26}")
def wl(b):
    x = sel("worker_loss", b); l = [r["latency"] * 1e3 for r in x]
    return f"{med(l):.1f} ms ({min(l):.1f}-{max(l):.1f}), n={len(l)}" if l else "-"
line("worker loss: detection latency, median", wl)
line("  detected by", lambda b: ", ".join(sorted({r["detected_by"] for r in sel("worker_loss", b)})))
line("  steps lost per kill (in-flight gradients)", lambda b: f"median {med([r['work_lost_steps'] for r in sel('worker_loss', b)])}, max {max(r['work_lost_steps'] for r in sel('worker_loss', b))}")
line("  runs finished", lambda b: f"{sum(r['finished'] for r in sel('worker_loss', b))}/{len(sel('worker_loss', b))} kills")
def pl(b):
    x = sel("ps_loss", b); l = [t * 1e3 for r in x for t in r["latencies"]]
    return f"{med(l):.1f} ms ({min(l):.1f}-{max(l):.1f}), n={len(l)}" if l else "-"
line("PS loss: each worker's exit 10, median", pl)
line("  workers that said so / workers", lambda b: f"{sum(r['workers_told'] for r in sel('ps_loss', b))}/{3 * len(sel('ps_loss', b))}")
line("  kill to mpirun's exit, median", lambda b: f"{med([r['job_end'] for r in sel('ps_loss', b)]):.2f} s")
for shm, t in ((1, "shared memory"), (0, "messages")):
    line(f"PS updates/s, 4 workers, {t}", lambda b: f"{med([r['updates_per_second'] for r in sel('ps_bench', b) if r['shm'] == shm]):.0f}")
line("single-worker step time (resnet8, 32)", lambda b: f"{med([r['step_ms'] for r in sel('step', b)]):.2f} ms")
u = lambda b, shm: med([r['updates_per_second'] for r in sel('ps_bench', b) if r['shm'] == shm])
print(f"\nULFM / Debian: PS updates/s {u('ulfm', 1) / u('release', 1):.3f} (shared memory), {u('ulfm', 0) / u('release', 0):.3f} (messages); "
      f"step time {med([r['step_ms'] for r in sel('step', 'release')]) / med([r['step_ms'] for r in sel('step', 'ulfm')]):.3f} (speed ratio)")
PY
