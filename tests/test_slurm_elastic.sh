#!/usr/bin/env bash
# On a real local Slurm cluster, the paper's layout with independent workers: slurm/ps.sbatch
# (the parameter server alone on the ondemand partition) and two slurm/worker.sbatch array tasks
# on spot nodes that join it. One worker's node is reclaimed: that worker gets SIGUSR1, leaves,
# its task (only it) is requeued and joins again, while the parameter server trains on, never
# stopped or requeued, and finishes. Prints the figure: worker notice -> rejoined.
# Usage: test_slurm_elastic.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
steps=1500
export MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=200 MT_CKPT_DIR="$dir/ck" MT_MAX_WORKERS=3
ps=$(sbatch --parsable --chdir "$dir" --output "$dir/ps.out" "$repo/slurm/ps.sbatch") || fail "sbatch ps"
array=$(sbatch --parsable --chdir "$dir" --exclusive --array=1-2 --output "$dir/worker-%a.out" \
        "$repo/slurm/worker.sbatch") || fail "sbatch workers"
wait_job "$ps" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 200 120
victim=$(squeue -h -j "${array}_1" -o %N)
[[ -n $victim ]] || fail "worker task ${array}_1 is not running"
echo "parameter server job $ps, workers ${array}_1 on $victim and ${array}_2; reclaiming $victim"
sbatch --parsable -p reclaim -w "$victim" --exclusive --output /dev/null --wrap "sleep 5" >/dev/null || fail "sbatch reclaim"
wait_job "$ps" COMPLETED 240
for t in 1 2; do wait_job "${array}_$t" COMPLETED 60; done
[[ $(job_field "$ps" Restarts) == 0 ]] || fail "the parameter server's job was restarted"
[[ $(job_field "${array}_1" Restarts) -ge 1 ]] || fail "the reclaimed worker's task was not requeued"
[[ $(job_field "${array}_2" Restarts) == 0 ]] || fail "the other worker's task was requeued too"
grep -q "worker.sbatch: SIGUSR1 at" "$dir/worker-1.out" || fail "the reclaimed worker never got SIGUSR1"
/usr/bin/python3 - "$dir" "$steps" <<'PY' || fail "checks of the metrics"
import json, sys
d, steps = sys.argv[1], int(sys.argv[2])
ev = [json.loads(l) for l in open(f"{d}/ck/metrics.jsonl")]
assert not any(e["event"] in ("resume", "stop") for e in ev), "the parameter server stopped or restarted"
left = [e for e in ev if e["event"] == "revocation" and e["cause"] == "notice"]
joins = [e for e in ev if e["event"] == "join"]
assert len(left) >= 1 and len(joins) >= 3, (left, joins)
rejoin = next(j for j in joins if j["unix_time"] > left[0]["unix_time"])
summary = [e for e in ev if e["event"] == "summary"][-1]
assert summary["global_step"] == steps and summary["exit_code"] == 0 and summary["workers_start"] == 0, summary
assert summary["test_accuracy"] > 0.5, summary
print(f"figure: worker notice at step {left[0]['global_step']} -> rejoined {rejoin['unix_time'] - left[0]['unix_time']:.1f} s later "
      f"(step {rejoin['global_step']}); {len(joins)} joins, the parameter server never stopped")
PY
echo "PASS: ps.sbatch + worker.sbatch: a reclaimed worker left, was requeued alone and rejoined; training finished"
