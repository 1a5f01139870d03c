#!/usr/bin/env bash
# On a real local Slurm cluster: slurm/train.sbatch (--no-kill); a worker node is set DOWN in the
# middle of the run, which kills its ranks at once. The parameter server must drop those
# workers and finish with the survivors, in the same allocation, without a requeue.
# Usage: test_slurm_node_down.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
steps=800
job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=200 MT_CKPT_DIR="$dir/ck" \
      sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$repo/slurm/train.sbatch") || fail "sbatch"
wait_job "$job" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 150 120
nodes=$(scontrol show hostnames "$(job_field "$job" NodeList)")
first=$(head -n 1 <<<"$nodes") victim=$(tail -n 1 <<<"$nodes")
[[ $first != "$victim" ]] || fail "the job runs on one node: $nodes"
echo "job $job on $(echo $nodes); setting $victim (workers only: the parameter server is rank 0 on $first) DOWN"
scontrol update NodeName="$victim" State=DOWN Reason=spot-revoked || fail "scontrol update"
wait_job "$job" COMPLETED 180
scontrol update NodeName="$victim" State=RESUME 2>/dev/null
[[ $(job_field "$job" Restarts) == 0 ]] || fail "the job was requeued; it should have finished with the survivors"
[[ $(job_field "$job" NodeList) == "$first" ]] || fail "the job still holds $(job_field "$job" NodeList)"
/usr/bin/python3 - "$dir" "$steps" <<'PY' || fail "checks of the metrics"
import json, sys
d, steps = sys.argv[1], int(sys.argv[2])
ev = [json.loads(l) for l in open(f"{d}/ck/metrics.jsonl")]
revs = [e for e in ev if e["event"] == "revocation"]
summary = [e for e in ev if e["event"] == "summary"][-1]
assert summary["global_step"] == steps and summary["exit_code"] == 0, summary
assert summary["workers_start"] == 3 and summary["workers_end"] == 1 and summary["revocations"] == 2, summary
assert len(revs) == 2 and all(r["silent_seconds"] < 3 for r in revs), revs
assert json.load(open(f"{d}/ck/run-status.json"))["state"] == "done"
print(f"survivors: 1 worker, {len(revs)} revocations detected after "
      + ", ".join(f"{r['silent_seconds']:.2f} s" for r in revs))
PY
echo "PASS: training finished on the surviving node after $victim went DOWN"
