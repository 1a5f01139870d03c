#!/usr/bin/env bash
# --tensorboard DIR read back by TensorBoard's own reader (its EventAccumulator, from the Python
# package index in the project venv .venv that launch/setup.sh makes):
#  1. one process, 20 steps, then resumed to 40 from its checkpoint: one run of two files, every
#     progress line's loss, lr and throughput and every evaluation at its step, the same values as
#     the --metrics file's (float32), the steps in order across the resume;
#  2. 1 parameter server + 2 workers under mpirun, 80 steps, worker rank 2 revoked (SIGKILL) at step 20:
#     workers/active 2 then 1, each worker's own throughput and staleness, written by the
#     parameter server alone.
# Usage: test_tensorboard.sh MPIEXEC MPI_TRAINER PYTHON (exit 77, a skip, without tensorboard)
set -euo pipefail
mpiexec=$1 trainer=$2 python=$3
"$python" -c 'import tensorboard' 2>/dev/null || {
  echo "skip: $python cannot import tensorboard (launch/setup.sh installs it into .venv)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 512 --test 64 --seed 3 >/dev/null
common=(--data "$dir/data" --model resnet8 --batch-size 16 --threads 1 --lr-schedule constant --lr 0.05
        --augment off --log-every-steps 5 --eval-every-steps 10)
"$trainer" train "${common[@]}" --train-steps 20 --ckpt-dir "$dir/ck" --ckpt-every-steps 10 \
  --metrics "$dir/one.jsonl" --tensorboard "$dir/tb-one" >"$dir/one.txt" 2>&1 || { cat "$dir/one.txt"; exit 1; }
sleep 1  # the resumed run's file is named by the second it starts in, after the first's
"$trainer" train "${common[@]}" --train-steps 40 --ckpt-dir "$dir/ck" --ckpt-every-steps 10 --resume auto \
  --metrics "$dir/one.jsonl" --tensorboard "$dir/tb-one" >>"$dir/one.txt" 2>&1 || { cat "$dir/one.txt"; exit 1; }
# Each step padded to 44 ms (an emulated K80 at scale 0.2): the 60 steps after the kill outlast the
# 1.5 s the parameter server waits before it calls the worker lost, on any machine. (mpirun
# --enable-recovery exits 0 whatever the ranks did: the metrics' summary is checked below.)
"$mpiexec" --enable-recovery -np 3 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train "${common[@]}" \
  --train-steps 80 --revoke rank=2@step=20 --emulate-device k80 --emulate-scale 0.2 --metrics "$dir/ps.jsonl" \
  --tensorboard "$dir/tb-ps" >"$dir/ps.txt" 2>&1 || { cat "$dir/ps.txt"; exit 1; }
grep -q '"event":"summary"' "$dir/ps.jsonl" || { echo "FAIL: the parameter server's run did not finish"; cat "$dir/ps.txt"; exit 1; }
ls "$dir/tb-one" "$dir/tb-ps"
"$python" - "$dir" <<'PY'
import json, math, os, sys
from tensorboard.backend.event_processing import event_accumulator
d = sys.argv[1]

def board(name):
    ea = event_accumulator.EventAccumulator(f"{d}/{name}", size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    return ea

def same(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)

def check(ea, tag, events, key):
    got = [(s.step, s.value) for s in ea.Scalars(tag)]
    want = [(e["global_step"], e[key]) for e in events]
    assert [s for s, _ in got] == [s for s, _ in want], (tag, got, want)
    assert all(same(g, w) for (_, g), (_, w) in zip(got, want)), (tag, got, want)

# 1. one process, resumed: two files, one run
files = sorted(os.listdir(f"{d}/tb-one"))
assert len(files) == 2 and all(".tfevents." in f for f in files), files
ev = [json.loads(l) for l in open(f"{d}/one.jsonl")]
prog = [e for e in ev if e["event"] == "progress"]
evals = [e for e in ev if e["event"] == "eval"]
assert [e["global_step"] for e in prog] == list(range(5, 45, 5)), prog
ea = board("tb-one")
for tag, key in (("train/loss", "loss"), ("train/lr", "lr"), ("train/accuracy", "train_accuracy"),
                 ("throughput/images_per_second", "images_per_second")):
    check(ea, tag, prog, key)
check(ea, "test/accuracy", evals, "test_accuracy")
check(ea, "test/loss", evals, "test_loss")
print(f"ok: one process resumed: {len(files)} files, {len(prog)} progress points, evaluations at "
      f"{[e['global_step'] for e in evals]}, tags {sorted(ea.Tags()['scalars'])}")

# 2. the parameter server's run with a revocation
ev = [json.loads(l) for l in open(f"{d}/ps.jsonl")]
prog = [e for e in ev if e["event"] == "progress"]
assert len(os.listdir(f"{d}/tb-ps")) == 1, os.listdir(f"{d}/tb-ps")  # the parameter server's alone
ea = board("tb-ps")
check(ea, "train/loss", prog, "loss")
active = [(s.step, s.value) for s in ea.Scalars("workers/active")]
assert active[0][1] == 2 and active[-1][1] == 1, active
rev = [e for e in ev if e["event"] == "revocation"]
assert len(rev) == 1 and (rev[0]["global_step"], 1.0) in active, (rev, active)
for rank in (1, 2):
    assert f"worker/{rank}/images_per_second" in ea.Tags()["scalars"], ea.Tags()
    assert f"worker/{rank}/staleness" in ea.Tags()["scalars"], ea.Tags()
s = [e for e in ev if e["event"] == "summary"][-1]
assert [x.value for x in ea.Scalars("cost/usd")] and same(ea.Scalars("cost/usd")[-1].value, s["cost_usd"])
print(f"ok: 1 PS + 2 workers: workers/active {active}, per-worker throughput and staleness, cost {s['cost_usd']:.4f}")
PY
