#!/usr/bin/env bash
# --push-precision bf16 (issue 44): workers push bf16 gradients and receive bf16 parameters; the
# parameter server keeps and updates fp32 state.
#  1. Zero pushes (1 PS + 1 worker, every push all zeros, no weight decay): the final parameters
#     equal, bit for bit, the fp32 run's (the initial ones): the bf16 replies never rounded the
#     parameter server's own state. The initial parameters are not all bf16 values (else 1 would
#     prove nothing).
#  2. The same pushes (--synthetic-gradients: a fixed gradient; a linear update: plain momentum, no
#     staleness scaling, no weight decay): every parameter of the bf16 run is within bf16 rounding
#     of the fp32 run's, |bf16 - fp32| <= 2^-8 |fp32 - initial| (+ fp32 noise), and some differ.
#  3. Real training with 2 workers and 2 shards, shared memory and plain messages: the run
#     finishes, learns, and a NaN push in bf16 is still rejected.
# Usage: test_push_precision.sh MPIEXEC MPI_TRAINER
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
# linear STEPS NAME [flags]: 1 PS + 1 worker, a linear update (plain momentum, no scaling, no weight
# decay, no spike guard); the final checkpoint kept as $dir/NAME.h5.
linear() {
  local steps=$1 name=$2; shift 2
  rm -rf "$dir/ck"
  "$mpiexec" -np 2 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 --batch-size 32 \
    --data "$dir/data" --augment off --lr-schedule constant --lr-scaling none --momentum-correction none \
    --weight-decay 0 --spike-guard off --train-steps "$steps" --ckpt-dir "$dir/ck" "$@" > "$dir/out.txt" 2>&1 &&
    [[ -f $dir/ck/ckpt-$(printf %010d "$steps").h5 ]] || { echo "FAIL: run $name"; cat "$dir/out.txt"; exit 1; }
  cp "$dir/ck/ckpt-$(printf %010d "$steps").h5" "$dir/$name.h5"
}
for p in fp32 bf16; do
  linear 4 "zero-$p" --push-precision "$p" --lr 0.05 \
    --corrupt-push "rank=1@push=1:zero,rank=1@push=2:zero,rank=1@push=3:zero,rank=1@push=4:zero"
  linear 60 "same-$p" --push-precision "$p" --synthetic-gradients --lr 1000
done
grep -q "bf16 pushes" "$dir/out.txt" || { echo "FAIL: the start-up line does not say bf16"; cat "$dir/out.txt"; exit 1; }
/usr/bin/python3 - "$dir" <<'PY'
import sys
import h5py, numpy as np
d = sys.argv[1]
def params(name):
    out = {}
    with h5py.File(f"{d}/{name}.h5", "r") as f:
        f["params"].visititems(lambda k, o: out.__setitem__(k, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out
def bf16(a):  # round to nearest even, as ps/wire/precision.hpp
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
z32, z16 = params("zero-fp32"), params("zero-bf16")
assert z32.keys() == z16.keys() and z32
for k in z32:
    assert z32[k].tobytes() == z16[k].tobytes(), f"{k}: zero pushes in bf16 changed the fp32 state"
init = np.concatenate([a.ravel() for a in z32.values()])
off = int(np.count_nonzero(bf16(init) != init))
assert off > len(init) // 2, f"only {off} of {len(init)} initial parameters are not bf16 values"
print(f"ok: zero pushes in bf16 left all {len(init)} fp32 parameters bit for bit ({off} of them not bf16 values)")
s32, s16 = params("same-fp32"), params("same-bf16")
a32 = np.concatenate([s32[k].ravel() for k in z32]).astype(np.float64)
a16 = np.concatenate([s16[k].ravel() for k in z32]).astype(np.float64)
moved = np.abs(a32 - init)
assert np.median(moved / np.maximum(np.abs(init), 1e-30)) > 1e-2, "the synthetic pushes moved too little to tell"
gap = np.abs(a16 - a32)
bound = 2.0 ** -8 * moved + 1e-6 * np.abs(a32) + 1e-30
worst = float(np.max(gap / bound))
differ = int(np.count_nonzero(gap))
assert worst <= 1.0, f"bf16 state beyond bf16 rounding of the fp32 one: {worst:.3f} of the bound"
assert differ > len(init) // 10, f"only {differ} parameters differ: were the pushes rounded at all?"
print(f"ok: the same pushes in bf16 and fp32: {differ} of {len(init)} parameters differ, all within bf16 "
      f"rounding (worst {worst:.3f} of 2^-8 |moved|)")
PY

# Real training: 2 shards, 2 workers, shared memory and plain messages; a NaN push is rejected.
for shm in 1 0; do
  rm -rf "$dir/ck" "$dir/m.jsonl"
  export MT_PS_SHM=$shm
  train 4 --num-ps 2 --train-steps 160 --push-precision bf16 --corrupt-push "rank=3@push=20:nan" \
    --eval-every-steps 0 || { echo "FAIL: the bf16 run (MT_PS_SHM=$shm) failed"; cat "$dir/out.txt"; exit 1; }
  grep -q "push of worker rank 3 rejected, not applied" "$dir/out.txt" ||
    { echo "FAIL: the NaN push in bf16 was not rejected"; cat "$dir/out.txt"; exit 1; }
  /usr/bin/python3 - "$dir/m.jsonl" "$shm" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == 160 and s["exit_code"] == 0, s
assert s["rejected_pushes"] >= 1, s
assert s["shared_memory_workers"] == (2 if sys.argv[2] == "1" else 0), s
assert s["test_accuracy"] > 0.3, s
cfg = next(e for e in events if e["event"] == "config")
assert cfg["push_precision"] == "bf16", cfg
print(f"ok: bf16, 2 shards, MT_PS_SHM={sys.argv[2]}: 160 steps, accuracy {s['test_accuracy']:.3f}, the NaN push rejected")
PY
done
