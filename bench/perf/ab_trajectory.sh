#!/usr/bin/env bash
# Bit-identical training, old binary vs new: a refactor of the trainer must not change a single
# bit of what it computes. Runs both binaries side by side on the same data and seed, as one
# process, as 1 parameter server + 1 worker and as 2 shards + 1 worker (the deterministic
# distributed cases: checkpoints gathered across shards), and compares
# every step's loss, the final test accuracy and loss, and every array and cursor of the final
# checkpoint. Exit 0 when everything is identical. --data DIR trains and evaluates on a data set of
# your own (a small `mpi_trainer gen-data` one makes each run take a second: bench/check_tools.sh)
# instead of the built-in default data, whose 10,000 test images take most of a short run's time.
#   bench/perf/ab_trajectory.sh OLD_MPI_TRAINER NEW_MPI_TRAINER [--steps 30] [--model resnet32] [--data DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_arg old
bench_arg new
bench_opt --steps steps 30
bench_opt --model model resnet32
bench_opt --data data ""
bench_parse "OLD_BIN NEW_BIN [--steps N] [--model M] [--data DIR]" "$@"
old=$(realpath "$old") new=$(realpath "$new")
dir=$(mktemp -d /tmp/ab_trajectory.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_oob_tcp_if_include=lo \
  OMPI_MCA_btl_tcp_if_include=lo OMP_WAIT_POLICY=passive
flags=(train --model "$model" --train-steps "$steps" --seed 7 --threads 1 --log-every-steps 1
       --lr-schedule "cosine:$steps" --lr 0.1 --ckpt-every-steps $((steps / 2)) --resume never)
[[ -z $data ]] || flags+=(--data "$(realpath "$data")")
for mode in single ps1w1 ps2w1; do
  for which in old new; do
    bin=$old; [[ $which == new ]] && bin=$new
    out=$dir/$mode-$which
    mkdir -p "$out"
    if [[ $mode == single ]]; then
      "$bin" "${flags[@]}" --ckpt-dir "$out/ck" --metrics "$out/m.jsonl" >"$out/log" 2>&1
    else
      shards=${mode:2:1}
      mpirun -np $((shards + 1)) --oversubscribe "$bin" "${flags[@]}" --num-ps "$shards" --ckpt-dir "$out/ck" \
        --metrics "$out/m.jsonl" >"$out/log" 2>&1
    fi
    echo "$mode $which: rc 0, $(grep -c '"progress"' "$out/m.jsonl") progress lines"
  done
done
/usr/bin/python3 - "$dir" <<'PY'
import glob, json, sys
import h5py, numpy as np
d = sys.argv[1]
bad = 0
def events(path, kind):
    return [json.loads(l) for l in open(path) if f'"event":"{kind}"' in l.replace(" ", "")]
for mode in ("single", "ps1w1", "ps2w1"):
    o, n = f"{d}/{mode}-old", f"{d}/{mode}-new"
    lo = [e["loss"] for e in events(f"{o}/m.jsonl", "progress")]
    ln = [e["loss"] for e in events(f"{n}/m.jsonl", "progress")]
    so, sn = events(f"{o}/m.jsonl", "summary")[-1], events(f"{n}/m.jsonl", "summary")[-1]
    same_loss = lo == ln and len(lo) > 0
    same_eval = (so["test_accuracy"], so.get("test_loss")) == (sn["test_accuracy"], sn.get("test_loss"))
    co, cn = sorted(glob.glob(f"{o}/ck/ckpt-*.h5")), sorted(glob.glob(f"{n}/ck/ckpt-*.h5"))
    same_ckpt = [c.split("/")[-1] for c in co] == [c.split("/")[-1] for c in cn] and len(co) > 0
    arrays = 0
    skip_attrs = {"created_unix", "config", "train_seconds", "cost_usd", "content_crc32"}
    for a, b in zip(co, cn):
        with h5py.File(a) as fa, h5py.File(b) as fb:
            names = []
            fa.visit(lambda p: names.append(p) if isinstance(fa[p], h5py.Dataset) else None)
            for p in names:
                arrays += 1
                if p not in fb or fa[p][()].tobytes() != fb[p][()].tobytes():
                    same_ckpt = False
                    print(f"  {mode}: {a.split('/')[-1]}:{p} differs")
            for k, v in fa.attrs.items():
                if k in skip_attrs: continue
                if k not in fb.attrs or np.asarray(v).tobytes() != np.asarray(fb.attrs[k]).tobytes():
                    same_ckpt = False
                    print(f"  {mode}: attribute {k}: {v} vs {fb.attrs.get(k)}")
    print(f"{mode}: {len(lo)} step losses {'identical' if same_loss else 'DIFFER'}; "
          f"test accuracy {so['test_accuracy']} vs {sn['test_accuracy']} {'identical' if same_eval else 'DIFFER'}; "
          f"{len(co)} checkpoints, {arrays} arrays {'bit-identical' if same_ckpt else 'DIFFER'}")
    bad += not (same_loss and same_eval and same_ckpt)
print("all identical" if bad == 0 else f"{bad} mode(s) differ")
sys.exit(1 if bad else 0)
PY
rm -rf "$dir"
