#!/usr/bin/env bash
# Parameter-server checkpoints, background evaluation, cost and resume on loopback:
#  1. np 5, 2 shards, 3 workers of different instance types priced from a --prices file,
#     --max-staleness 1, a checkpoint every 30 steps, an evaluation every 40: checkpoints are
#     published (newest 3 kept), evaluations ran in the background, no applied push was staler
#     than the bound, and the summary's cost is the price table applied to the active seconds.
#  2. The newest checkpoint damaged (one flipped byte), the job rerun with 2 workers: it resumes
#     from the previous good checkpoint, reports the skipped one, continues the global step and
#     never overwrites the good ones.
# Both under umask 000: the checkpoint directory is 0700, its files 0600 (issue 45).
# Usage: test_ps_checkpoints.sh MPIEXEC MPI_TRAINER
set -euo pipefail
mpiexec=$1 trainer=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 256 --seed 7 >/dev/null
cat >"$dir/prices.txt" <<'P'
# type   on-demand  transient   ($/hour)
type,on_demand,transient
small    1.0        0.5
big      3.6        1.8
server   0.36       0.18
P
umask 000  # the most permissive: what the trainer writes must still be its user's alone
common=(--model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off
        --data "$dir/data" --ckpt-dir "$dir/ck" --log-every-steps 30 --prices "$dir/prices.txt"
        --ps-type server --pricing transient)
"$mpiexec" -np 5 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train "${common[@]}" \
  --num-ps 2 --worker-types small,big,small --train-steps 120 --ckpt-every-steps 30 --ckpt-keep 3 \
  --eval-every-steps 40 --max-staleness 1 --metrics "$dir/m1.jsonl" >"$dir/out1.txt" 2>&1 \
  || { echo "first run failed:"; cat "$dir/out1.txt"; exit 1; }
cat "$dir/out1.txt"
ls "$dir/ck"
[[ $(cat "$dir/ck/LATEST") == ckpt-0000000120.h5 ]]
[[ $(stat -c %a "$dir/ck") == 700 ]] || { echo "FAIL: the checkpoint directory is $(stat -c %a "$dir/ck"), not 700"; exit 1; }
for f in "$dir"/ck/*; do
  [[ $(stat -c %a "$f") == 600 ]] || { echo "FAIL: $f is $(stat -c %a "$f"), not 600"; exit 1; }
done
"$trainer" ckpt verify "$dir/ck"
/usr/bin/python3 - "$dir/m1.jsonl" "$dir/ck" <<'PY'
import json, os, sys
events = [json.loads(l) for l in open(sys.argv[1])]
ck = sorted(f for f in os.listdir(sys.argv[2]) if f.endswith(".h5"))
assert ck == ["ckpt-0000000060.h5", "ckpt-0000000090.h5", "ckpt-0000000120.h5"], ck
snaps = [e for e in events if e["event"] == "checkpoint_snapshot"]
assert [e["global_step"] for e in snaps] == [30, 60, 90, 120], snaps
written = [e for e in events if e["event"] == "checkpoint"]
assert [e["global_step"] for e in written] == [30, 60, 90, 120] and all(e["bytes"] > 0 for e in written), written
bg = [e for e in events if e["event"] == "eval" and e.get("background")]
skipped = [e for e in events if e["event"] == "eval_skipped"]
assert sorted([e["global_step"] for e in bg] + [e["global_step"] for e in skipped]) == [40, 80], (bg, skipped)
assert bg, "no background evaluation ran"
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == 120, s
assert s["max_staleness"] <= 1, s
assert s["dropped_stale_pushes"] > 0, "3 workers with a bound of 1 must drop some pushes"
assert s["worker_types"] == ["small", "big", "small"] and s["ps_type"] == "server", s
assert s["pricing"] == "transient" and s["ps_pricing"] == "on-demand", s
workers = next(e for e in events if e["event"] == "workers")["workers"]
price = {"small": 0.5, "big": 1.8}
# Workers at the transient price, the 2 parameter-server shards on demand (--ps-pricing default).
expect = 2 * 0.36 * s["train_seconds"] / 3600 + sum(price[w["instance_type"]] * w["active_seconds"] / 3600 for w in workers)
assert abs(s["cost_usd"] - expect) <= 1e-6 * expect, (s["cost_usd"], expect)
progress = [e for e in events if e["event"] == "progress"]
assert all(len(e["workers"]) == 3 and "mean_staleness" in e["workers"][0] for e in progress), progress
print(f"ok: checkpoints {ck}, {len(bg)} background evaluations, cost {s['cost_usd']:.6f} == {expect:.6f}")
PY
# Damage the newest checkpoint: one flipped byte inside the stored weights of a layer.
/usr/bin/python3 - "$dir/ck/ckpt-0000000120.h5" <<'PY'
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    c = f["params/stage2/block1/conv1/weight"].id.get_chunk_info(0)
with open(path, "r+b") as fh:
    off = c.byte_offset + c.size // 2
    fh.seek(off); b = fh.read(1); fh.seek(off); fh.write(bytes([b[0] ^ 0x40]))
PY
sum_before=$(md5sum "$dir/ck/ckpt-0000000090.h5" | cut -d' ' -f1)
"$mpiexec" -np 3 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train "${common[@]}" \
  --num-ps 1 --instance-type big --train-steps 150 --ckpt-keep 0 --metrics "$dir/m2.jsonl" >"$dir/out2.txt" 2>&1 \
  || { echo "resumed run failed:"; cat "$dir/out2.txt"; exit 1; }
cat "$dir/out2.txt"
grep -q "skipping checkpoint: .*ckpt-0000000120.h5" "$dir/out2.txt"
grep -q "resumed from .*ckpt-0000000090.h5 at global step 90 (attempt 2)" "$dir/out2.txt"
[[ $(md5sum "$dir/ck/ckpt-0000000090.h5" | cut -d' ' -f1) == "$sum_before" ]]
/usr/bin/python3 - "$dir/m2.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
assert any(e["event"] == "checkpoint_skipped" for e in events), "no checkpoint_skipped event"
progress = [e["global_step"] for e in events if e["event"] == "progress"]
assert progress and min(progress) > 90, progress
s = events[-1]
assert s["global_step"] == 150 and s["resumed_from_step"] == 90 and s["attempts"] == 2, s
assert s["workers_start"] == 2, s
print("ok: resumed from step 90 past the damaged checkpoint, finished at 150")
PY
"$trainer" ckpt verify "$dir/ck/ckpt-0000000150.h5"
