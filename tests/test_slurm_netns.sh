#!/usr/bin/env bash
# Slurm across nodes with real links (issue 60): the local Slurm cluster on a namespace cluster
# (launch/netns-cluster: slurmctld on the login node, one slurmd per node, each node its own
# hostname, address and 200 Mbit/s link). slurm/train.sbatch on the three spot nodes n2..n4, one
# rank each (1 PS + 2 workers, srun --mpi=pmix), is preempted by a job that reclaims one of them: SIGUSR1, checkpoint, requeue, resume at the step it stopped at, finish. The
# ranks ran on three hosts (no worker on shared memory), their traffic crossed the nodes' links.
# Exit 77 (skipped) where network namespaces cannot be made.
# Usage: test_slurm_netns.sh TRAINER
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1" netns
steps=600 every=100
# port_bytes NODE: bytes its link carried so far, both ways.
port_bytes() { "$repo/launch/netns-cluster/cluster.sh" bytes "$1" --name "$netns_name"; }
before=$(port_bytes n3)
job=$(MT_TRAIN_STEPS=$steps MT_CKPT_EVERY_STEPS=$every MT_CKPT_DIR="$dir/ck" \
      sbatch --parsable --nodes=3 --ntasks-per-node=1 --chdir "$dir" --output "$dir/job.out" \
      "$repo/slurm/train.sbatch") || fail "sbatch"
wait_job "$job" RUNNING 30
wait_step "$dir/ck/metrics.jsonl" 150 120
nodes=$(scontrol show job "$job" | tr ' ' '\n' | sed -n 's/^NodeList=//p' | xargs -n 1 scontrol show hostnames)
[[ $(wc -w <<<"$nodes") == 3 ]] || fail "job $job on '$nodes', expected 3 nodes"
victim=$(tail -n 1 <<<"$nodes")
echo "job $job on $(echo $nodes), reclaiming $victim"
reclaim=$(sbatch --parsable -p reclaim -w "$victim" --exclusive --output "$dir/reclaim.out" --wrap "sleep 5") ||
  fail "sbatch reclaim"
wait_job "$job" COMPLETED 240
[[ $(job_field "$job" Restarts) == 1 ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected 1"
grep -q "sbatch: SIGUSR1 at" "$dir/job.out" || fail "the batch script never got SIGUSR1"
grep -q "start 2 on" "$dir/job.out" || fail "the job did not start a second time"
moved=$(($(port_bytes n3) - before))
/usr/bin/python3 - "$dir" "$steps" "$every" "$moved" <<'PY' || fail "checks of the metrics"
import json, sys
d, steps, every, moved = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ev = [json.loads(l) for l in open(f"{d}/ck/metrics.jsonl")]
kinds = [e["event"] for e in ev]
stop = next(e for e in ev if e["event"] == "stop")
assert stop["reason"] == "SIGUSR1", stop
resume = next(e for e in ev if e["event"] == "resume")
lost = stop["global_step"] - resume["global_step"]
assert 0 <= lost <= every, f"lost {lost} steps (checkpoint interval {every})"
summaries = [e for e in ev if e["event"] == "summary"]
s = summaries[-1]
assert s["global_step"] == steps and s["exit_code"] == 0, s
for x in summaries:
    assert x.get("shared_memory_workers", 0) == 0, f"a worker used shared memory across nodes: {x}"
status = json.load(open(f"{d}/ck/run-status.json"))
assert status["state"] == "done" and status["global_step"] == steps, status
assert status.get("host", "").startswith("n"), status  # a namespace node's hostname
# One push and one reply of resnet8 are 300 KB each way: the middle node's link carried megabytes.
assert moved > 20_000_000, f"only {moved} bytes crossed n3's link"
print(f"ok: preempted at step {stop['global_step']}, resumed at {resume['global_step']} (lost {lost}), "
      f"finished {steps}; the PS on {status['host']}; n3's link carried {moved // 1_000_000} MB")
PY
echo "PASS: train.sbatch across namespace nodes: preempted, requeued, resumed, finished"
