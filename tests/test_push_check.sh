#!/usr/bin/env bash
# The parameter server's push check (issue 45): a push with a value that is not finite, or (with
# --push-norm-limit) a gradient a million times the usual, is rejected, not applied, logged with
# its worker and counted; a worker rejected --max-rejected-pushes times in a row is dropped and the
# run goes on.
#  1. 1 PS + 1 worker: the worker's 30th push carries NaN. The final checkpoint equals, bit for bit,
#     that of the same run where the 30th push was sent marked not to be applied (discard): the
#     rejected push left nothing behind (parameters, momenta, gap means, BatchNorm statistics).
#  2. 1 PS + 3 workers, --push-norm-limit 100: rank 2's 20th push is 1e6 times its gradient, rank
#     3's 10th to 12th carry NaN (3 in a row: dropped). The run finishes; 4 rejected pushes; no
#     checkpoint holds a non-finite value.
# Usage: test_push_check.sh MPIEXEC MPI_TRAINER
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
arrays() {  # the checkpoint's arrays, bit for bit, as one hash; fails on a non-finite value
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, sys
import h5py, numpy as np
h = hashlib.sha256()
def visit(name, o):
    if isinstance(o, h5py.Dataset):
        a = o[()]
        assert a.dtype.kind != "f" or np.isfinite(a).all(), f"{sys.argv[1]}: {name} has a non-finite value"
        h.update(name.encode()); h.update(a.tobytes())
with h5py.File(sys.argv[1], "r") as f:
    f.visititems(visit)
print(h.hexdigest())
PY
}
for kind in nan discard; do
  rm -rf "$dir/ck" "$dir/m.jsonl"
  train 2 --train-steps 120 --corrupt-push "rank=1@push=30:$kind" ||
    { echo "FAIL: the $kind run failed"; cat "$dir/out.txt"; exit 1; }
  grep -q "push of worker rank 1 rejected, not applied" "$dir/out.txt" || { echo "FAIL: no rejection line"; cat "$dir/out.txt"; exit 1; }
  eval "sum_$kind=\$(arrays \"\$dir/ck/ckpt-0000000120.h5\")"
  /usr/bin/python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert s["event"]=="summary" and s["global_step"]==120 and s["rejected_pushes"]==1, s' "$dir/m.jsonl"
done
[[ $sum_nan == "$sum_discard" ]] || { echo "FAIL: the state after a rejected NaN push differs from the discarded push's"; exit 1; }
echo "ok: a NaN push was rejected and left the state bit for bit as a discarded push does"

rm -rf "$dir/ck" "$dir/m.jsonl"
train 4 --train-steps 200 --ckpt-every-steps 40 --push-norm-limit 100 \
  --corrupt-push "rank=2@push=20:huge,rank=3@push=10:nan,rank=3@push=11:nan,rank=3@push=12:nan" ||
  { echo "FAIL: the run with 3 workers failed"; cat "$dir/out.txt"; exit 1; }
grep -v '^step' "$dir/out.txt"
grep -q "push of worker rank 2 rejected, not applied: its gradient norm .* times the median" "$dir/out.txt"
grep -q "push of worker rank 3 rejected, not applied: .*(3 in a row: the worker is stopped and dropped)" "$dir/out.txt"
grep -q "worker rank 3: the parameter server rejected its last pushes .* and dropped it; the job goes on without it; exit 0" "$dir/out.txt"
/usr/bin/python3 - "$dir/m.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == 200 and s["exit_code"] == 0, s
assert s["rejected_pushes"] == 4 and s["lost_workers"] == 1 and s["workers_end"] == 2, s
rev = [e for e in events if e["event"] == "revocation"]
assert [e["rank"] for e in rev] == [3] and "rejected" in rev[0]["detail"], rev
PY
n=0
for f in "$dir"/ck/ckpt-*.h5; do arrays "$f" >/dev/null; n=$((n + 1)); done
((n >= 2)) || { echo "FAIL: $n checkpoints"; exit 1; }
echo "ok: 4 pushes rejected (1e6 x the gradient, 3 x NaN: that worker dropped), the run finished, $n checkpoints all finite"
