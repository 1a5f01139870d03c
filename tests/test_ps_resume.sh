#!/usr/bin/env bash
# Bit-exact resume through the parameter server with one worker: 20 global steps straight must
# equal 10 steps, a checkpoint, a resumed run to 20 — every parameter, momentum and BN statistic
# identical, and the data cursor and step continued. Checked on the final checkpoints with h5py.
# Mode `transport`: instead, 20 steps with pushes and replies in shared memory (the default on one
# node) must equal 20 steps of plain MPI messages (MT_PS_SHM=0), bit for bit, the summaries must
# say which transport ran, and no segment may be left in /dev/shm.
# Mode `slots` (NP - S = 2 workers, the default policy dana): 30 steps, then a resume to 31. Each
# shard applies one push after the resume (the first to reach it: shards count steps on their own,
# so shard 0 may take worker A's and shard 1 worker B's), which changes one data slot's momentum
# in that shard's tensors; the other slot's must come out of the resumed run's checkpoint bit for
# bit as it went into the first one (each slot restored exactly, through every shard), and
# /optimizer/momentum is the slots' mean.
# Mode `gap` (NP - S = 2 workers, --lr-scaling gap): 30 steps, then a resume to 31. The gap-aware
# penalty's running mean steps C must be restored in every shard: after the one push each shard
# applies, each C is 0.99 C(30) + 0.01 |θ(31) − θ(30)| (had C started afresh it would be the step
# itself).
# Usage: test_ps_resume.sh MPIEXEC MPI_TRAINER NP S [resume|transport|slots|gap]   (NP - S: 1; slots, gap: 2)
set -euo pipefail
mpiexec=$1 trainer=$2 np=$3 shards=$4 mode=${5:-resume}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 512 --test 128 --seed 5 >/dev/null
policy=()
[[ $mode == gap ]] && policy=(--lr-scaling gap)
# The runs stop early by a shorter --train-steps, which would move a default schedule's boundaries
# (they scale with the run): given, one after the resume point (slots, gap: the rate constant).
schedule=(--lr-schedule step:15,25)
[[ $mode == gap || $mode == slots ]] && schedule=(--lr-schedule constant)
run() {  # run CKPT_DIR STEPS   (MT_PS_SHM from the environment)
  "$mpiexec" -np "$np" --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_PS_SHM="${MT_PS_SHM:-1}" "$trainer" train --model resnet8 \
    --batch-size 16 --train-steps "$2" --num-ps "$shards" --data "$dir/data" --ckpt-dir "$1" \
    --resume auto --log-every-steps 5 --metrics "$1.jsonl" "${policy[@]}" "${schedule[@]}" >"$1.out" 2>&1 || { echo "mpirun failed:"; cat "$1.out"; exit 1; }
}
if [[ $mode == gap ]]; then
  run "$dir/gap" 30
  cp "$dir/gap/ckpt-0000000030.h5" "$dir/saved30.h5"
  run "$dir/gap" 31
  grep -q "resumed from .*ckpt-0000000030.h5 at global step 30" "$dir/gap.out" || { cat "$dir/gap.out"; exit 1; }
  if grep -q "start afresh" "$dir/gap.out"; then cat "$dir/gap.out"; exit 1; fi
  exec /usr/bin/python3 - "$dir/saved30.h5" "$dir/gap/ckpt-0000000031.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert int(a.attrs["gap_mean_step"]) == 1 and int(b.attrs["gap_mean_step"]) == 1, dict(a.attrs)
names = []
a["optimizer/gap_mean_step"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert names and all(f"params/{n}" in a for n in names), "one mean step per parameter"
beta, rest = np.float32(0.99), np.float32(1.0 - 0.99)
history = apart = 0
for n in names:
    ca, cb = a[f"optimizer/gap_mean_step/{n}"][()], b[f"optimizer/gap_mean_step/{n}"][()]
    step = np.abs(b[f"params/{n}"][()] - a[f"params/{n}"][()])
    want = np.where(ca > 0, beta * ca + rest * step, step)
    assert np.allclose(cb, want, rtol=1e-5, atol=1e-12), f"{n}: max |C - expected| {np.abs(cb - want).max()}"
    history += int((ca > 0).sum())
    apart += int((np.abs(cb - step) > 1e-5 * np.maximum(step, 1e-12)).sum())
total = sum(a[f"params/{n}"].size for n in names)
assert history > total // 2, f"only {history} of {total} parameters had a mean step after 30 updates"
assert apart > total // 2, "the mean steps after the resume look afresh (C = the last step)"
print(f"ok: {len(names)} arrays, {history} of {total} mean steps carried through the resume and 2 shards, "
      f"each one push later 0.99 C + 0.01 |step|")
PY
fi
if [[ $mode == slots ]]; then
  run "$dir/slots" 30
  cp "$dir/slots/ckpt-0000000030.h5" "$dir/saved30.h5"
  run "$dir/slots" 31
  grep -q "resumed from .*ckpt-0000000030.h5 at global step 30" "$dir/slots.out" || { cat "$dir/slots.out"; exit 1; }
  exec /usr/bin/python3 - "$dir/saved30.h5" "$dir/slots/ckpt-0000000031.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert int(a.attrs["slot_momenta"]) == 2 and int(b.attrs["slot_momenta"]) == 2, dict(a.attrs)
names = []
a["optimizer/momentum"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for j in (0, 1):
    assert any(np.abs(a[f"optimizer/slot_momentum/{j}/{n}"][()]).max() > 0 for n in names), f"slot {j} momentum is zero"
# Tensors live whole on one shard: in each, exactly one slot moved and the other is identical.
kept = [0, 0]
for n in names:
    same = [np.array_equal(a[f"optimizer/slot_momentum/{j}/{n}"][()], b[f"optimizer/slot_momentum/{j}/{n}"][()])
            for j in (0, 1)]
    assert same.count(True) == 1, f"{n}: slots identical after one more push: {same} (want exactly one)"
    kept[same.index(True)] += 1
for n in names:
    mean = (b[f"optimizer/slot_momentum/0/{n}"][()] + b[f"optimizer/slot_momentum/1/{n}"][()]) / 2
    assert np.allclose(b[f"optimizer/momentum/{n}"][()], mean, rtol=1e-6, atol=1e-7), n
print(f"ok: in each of {len(names)} arrays one slot's momentum identical across a resume (slot 0 in {kept[0]}, "
      f"slot 1 in {kept[1]}), the other moved by the one push its shard applied; the mean consistent")
PY
fi
run "$dir/straight" 20
if [[ $mode == transport ]]; then
  MT_PS_SHM=0 run "$dir/split" 20  # the name keeps the comparison below
  grep -q '"shared_memory_workers":1' "$dir/straight.jsonl" || { echo "shared memory was not used:"; cat "$dir/straight.out"; exit 1; }
  grep -q '"shared_memory_workers":0' "$dir/split.jsonl" || { echo "MT_PS_SHM=0 still used shared memory"; exit 1; }
  # Shards that refuse the offer (as one on another node must): the workers fall back to messages.
  "$mpiexec" --oversubscribe -x OMP_WAIT_POLICY=passive -np "$shards" -x MT_PS_SHM=0 "$trainer" train --model resnet8 \
    --batch-size 16 --train-steps 6 --num-ps "$shards" --data "$dir/data" --metrics "$dir/refused.jsonl" \
    : -np $((np - shards)) -x MT_PS_SHM=1 "$trainer" train --model resnet8 --batch-size 16 --train-steps 6 \
    --num-ps "$shards" --data "$dir/data" >"$dir/refused.out" 2>&1 || { echo "refused run failed:"; cat "$dir/refused.out"; exit 1; }
  grep -q '"shared_memory_workers":0' "$dir/refused.jsonl" || { echo "a refusing shard used shared memory"; exit 1; }
  # Segment names end in -PID-N-RANDOM: one whose process is gone was left behind.
  for f in /dev/shm/mt-ps-*; do
    [[ -e $f ]] || continue
    pid=$(basename "$f" | awk -F- '{print $(NF-2)}')
    [[ -d /proc/$pid ]] || { echo "segment left in /dev/shm: $f"; exit 1; }
  done
else
  run "$dir/split" 10
  run "$dir/split" 20
  grep -q "resumed from .*ckpt-0000000010.h5 at global step 10" "$dir/split.out" || { cat "$dir/split.out"; exit 1; }
fi
/usr/bin/python3 - "$dir/straight/ckpt-0000000020.h5" "$dir/split/ckpt-0000000020.h5" "$mode" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert any(n.startswith("params/") for n in names) and any(n.startswith("optimizer/momentum/") for n in names)
assert any(n.startswith("bn_stats/") for n in names)
for n in names:
    x, y = a[n][()], b[n][()]
    assert x.shape == y.shape and np.array_equal(x, y), f"{n} differs: max |diff| {np.abs(x - y).max()}"
for k in ("global_step", "data_cursor_epoch", "data_cursor_position", "data_cursors"):
    assert a.attrs[k] == b.attrs[k], (k, a.attrs[k], b.attrs[k])
if sys.argv[3] == "transport":
    print(f"ok: {len(names)} arrays identical after 20 steps through shared memory vs MPI messages")
    sys.exit(0)
assert int(b.attrs["attempts"]) == 2, b.attrs["attempts"]
print(f"ok: {len(names)} arrays identical after 20 straight vs 10 + resume + 10 steps")
PY
