#!/usr/bin/env bash
# On a real local Slurm cluster: Open MPI 4.1 ranks started directly by `srun --mpi=pmix` (no
# mpirun) form one job across two nodes and train; a worker revoked in the middle is dropped
# (srun --no-kill --kill-on-bad-exit=0 keeps the step alive). srun tasks with no MPI plugin are
# refused with a clear message instead of training alone side by side.
# Usage: test_slurm_srun_pmix.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
# shellcheck disable=SC2086
srun --mpi=pmix --no-kill --kill-on-bad-exit=0 -p spot -N 2 -n 4 --chdir "$dir" \
  "$trainer" train --model resnet8 --batch-size 32 --data "$dir/data" --train-steps 300 \
  --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl" --revoke rank=3@step=100 $MT_TRAIN_ARGS > "$dir/srun.out" 2>&1
rc=$?
cat "$dir/srun.out" | grep -v '^step' | cut -c1-160
# srun reports the killed task (137); the parameter server's status file says how training ended.
/usr/bin/python3 - "$dir" <<'PY' || fail "srun --mpi=pmix training (srun exit $rc)"
import json, sys
d = sys.argv[1]
ev = [json.loads(l) for l in open(f"{d}/m.jsonl")]
config = next(e for e in ev if e["event"] == "config")
assert config["processes"] == 4 and config["workers"] == 3, config
summary = [e for e in ev if e["event"] == "summary"][-1]
assert summary["global_step"] == 300 and summary["exit_code"] == 0, summary
assert summary["workers_end"] == 2 and summary["revocations"] == 1, summary
assert summary["test_accuracy"] > 0.5, summary
assert json.load(open(f"{d}/ck/run-status.json"))["state"] == "done"
PY
srun --mpi=none -p spot -N 1 -n 2 "$trainer" train --data "$dir/data" --train-steps 5 > "$dir/none.out" 2>&1
rc=$?
[[ $rc -ne 0 ]] || fail "srun --mpi=none with 2 tasks trained anyway"
grep -q "srun --mpi=pmix" "$dir/none.out" || { cat "$dir/none.out"; fail "no clear message for srun --mpi=none"; }
grep -q "exit code 2" "$dir/none.out" || { cat "$dir/none.out"; fail "srun --mpi=none: expected exit 2 (usage)"; }
echo "PASS: one MPI job of 4 ranks on 2 nodes under srun --mpi=pmix, a revoked worker dropped; --mpi=none refused"
