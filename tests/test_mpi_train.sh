#!/usr/bin/env bash
# Asynchronous parameter-server training under mpirun on loopback (oversubscribed):
# NP processes, S parameter-server shards. The job must finish every global step, report the
# summary and reach well-above-chance accuracy on generated data. POLICY (optional): a
# --momentum-correction; with dana each worker's data slot has its own momentum, all of them in
# the checkpoint; gap: --lr-scaling gap (each gradient element penalized by its parameter's gap).
# Usage: test_mpi_train.sh MPIEXEC MPI_TRAINER NP S [POLICY]
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mpiexec=$1 trainer=$2 np=$3 shards=$4 policy=${5:-}
extra=()
case $policy in
  gap) extra=(--lr-scaling gap) ;;  # gap-aware penalties at the shards (with the default dana)
  ?*) extra=(--momentum-correction "$policy" --ckpt-dir "$dir/ckpt" --ckpt-every-steps 50) ;;
esac
"$trainer" gen-data "$dir/data" --train 2048 --test 512 --seed 3 >/dev/null
steps=120
"$mpiexec" -np "$np" --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 \
  --batch-size 32 --train-steps $steps --lr-schedule constant --lr 0.05 --augment off \
  --num-ps "$shards" --log-every-steps 40 --data "$dir/data" --metrics "$dir/m.jsonl" "${extra[@]}" \
  > "$dir/out.txt" 2>&1 || { echo "mpirun failed"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
/usr/bin/python3 - "$dir/m.jsonl" "$np" "$shards" "$steps" "$policy" "$dir/ckpt" <<'PY'
import glob, json, sys
path, np_, shards, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
policy, ckpt = sys.argv[5], sys.argv[6]
events = [json.loads(l) for l in open(path)]
s = events[-1]
assert s["event"] == "summary", s
assert s["global_step"] == steps, s
assert s["workers_start"] == np_ - shards == s["workers_end"], s
assert s["num_ps"] == shards, s
assert s["test_accuracy"] > 0.3, f"accuracy {s['test_accuracy']} not well above chance (0.1)"
assert s["cost_usd"] > 0, s
progress = [e for e in events if e["event"] == "progress"]
assert progress and all("mean_staleness" in e and "active_workers" in e for e in progress), progress
# The live prediction: every progress event says when the run should end and what it will cost.
assert all(e["predicted_seconds_left"] is not None and e["predicted_seconds_left"] >= 0 and
           e["predicted_cost_usd"] > 0 for e in progress), progress[-1]
if policy == "dana":
    # One Nesterov momentum buffer per worker's data slot, checkpointed whole; /optimizer/momentum
    # holds their mean.
    import h5py, numpy as np
    assert events[0]["momentum_correction"] == "dana", events[0]
    files = sorted(glob.glob(ckpt + "/*.h5"))
    assert files, f"no checkpoint in {ckpt}"
    with h5py.File(files[-1], "r") as f:
        slots = sorted(f["optimizer/slot_momentum"].keys(), key=int)
        assert slots == [str(j) for j in range(np_ - shards)], slots
        def flat(group):
            out = []
            group.visititems(lambda n, o: out.append(np.ravel(o[()])) if isinstance(o, h5py.Dataset) else None)
            return np.concatenate(out)
        per = [flat(f["optimizer/slot_momentum/" + j]) for j in slots]
        assert all(np.any(v) for v in per), "a worker's momentum is all zero"
        assert not np.array_equal(per[0], per[1]), "the workers share one momentum"
        assert np.allclose(flat(f["optimizer/momentum"]), np.mean(per, axis=0), rtol=1e-5, atol=1e-7)
if policy == "gap":
    assert events[0]["lr_scaling"] == "gap", events[0]
print(f"ok: np={np_} S={shards} accuracy {s['test_accuracy']:.3f} max staleness {s['max_staleness']}")
PY
