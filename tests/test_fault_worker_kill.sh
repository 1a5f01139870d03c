#!/usr/bin/env bash
# A worker SIGKILLs itself at a chosen global step (--revoke): the parameter server detects the
# loss within --failure-timeout (heartbeats; with a ULFM build the MPI library reports it, checked
# to come within 0.5 s of the kill), drops it, keeps its data slot's momentum (dana) and finishes; mpirun
# --enable-recovery ends with rc 0; the summary counts the revocation. 400 steps: detection comes
# 1 s after the kill at step 40, well before the end (with 160 steps it came at step 149-160 and
# raced the end of training).
# With `late`, the kill comes 4 steps before the end of 160: the others finish before the silence is
# found (heartbeats), so their stops said no rank was lost; the shard withdraws that once it is
# settled (kEnd, ps/wire/protocol.hpp) and they leave without MPI_Finalize, whose fence would wait
# for the dead rank (the job lingered until the finalize watchdog's 600 s: bench/faults/chaos.sh
# saw it as 30 s more for 1 run in 15).
# Usage: test_fault_worker_kill.sh MPIEXEC MPI_TRAINER NP S [late]
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
np=$3 shards=$4 steps=400 victim=$(($3 - 1)) at=40
[[ ${5:-} != late ]] || steps=160 at=156
timeout 90 $(train_cmd "$np" --num-ps "$shards" --train-steps $steps --failure-timeout 1 \
  --revoke "rank=$victim@step=$at") >"$dir/out.txt" 2>&1 || { echo "mpirun failed (124: still running after 90 s)"; cat "$dir/out.txt"; exit 1; }
cat "$dir/out.txt"
grep -q "rank $victim: revoked" "$dir/out.txt"
killed_at=$(sed -n "s/.*rank $victim: revoked.*SIGKILL to itself at unix \([0-9.]*\).*/\1/p" "$dir/out.txt")
/usr/bin/python3 - "$dir/m.jsonl" "$np" "$shards" "$steps" "$victim" "$killed_at" <<'PY'
import json, sys
path, np_, shards, steps, victim = sys.argv[1], *map(int, sys.argv[2:6])
killed_at = float(sys.argv[6])
events = [json.loads(l) for l in open(path)]
ulfm = events[0]["failure_detection"] == "ulfm+heartbeat"   # the config event says which build
s = events[-1]
workers = np_ - shards
assert s["event"] == "summary", s
assert s["global_step"] == steps and s["exit_code"] == 0, s
assert s["revocations"] == 1 and s["lost_workers"] == 1 and s["left_workers"] == 0, s
assert s["workers_start"] == workers and s["workers_end"] == workers - 1, s
assert s["test_accuracy"] > 0.3, f"accuracy {s['test_accuracy']} not above chance"
rev = [e for e in events if e["event"] == "revocation"]
assert len(rev) == 1, rev
r = rev[0]
assert r["rank"] == victim and r["cause"] == "lost" and r["instance_type"] == "k80", r
latency = r["unix_time"] - killed_at
if ulfm:  # the MPI library reports the death: far below --failure-timeout (figures: bench/faults/ulfm_bench.sh)
    assert r["detected_by"] == "mpi" and latency < 0.5, (latency, r)
else:     # heartbeats: silent for --failure-timeout 1
    assert r["detected_by"] == "heartbeat" and 1.0 <= r["silent_seconds"] < 2.0, r
# The default policy (dana + gap) divides no rate by the workers left and keeps the momentum:
# every data slot has its own buffer (the implicit correction's 0.9 - (1 - 1/N) is a unit test).
# (Found at the end, some of the others may have been told to stop already: not active.)
assert (r["active_workers"] == workers - 1 if r["global_step"] < steps else r["active_workers"] < workers), r
assert r["lr_divisor"] == 1, r
assert abs(r["momentum"] - 0.9) < 1e-6, r
assert r["work_lost_steps"] == 1, r
w = [e for e in events if e["event"] == "workers"][-1]["workers"]
dead = [x for x in w if x["rank"] == victim][0]
assert dead["active_seconds"] > 0, dead
open(path + ".lost_at", "w").write(f"{r['active_workers']} {r['detected_by']}\n")
print(f"ok: np={np_} S={shards}: rank {victim} lost at step {r['global_step']}, detected by {r['detected_by']} "
      f"{latency:.3f} s after the kill ({r['silent_seconds']:.2f} s silence), accuracy {s['test_accuracy']:.3f}")
PY
status=$(cat "$dir/ck/run-status.json")
[[ $status == *'"state":"done"'* ]] || { echo "status file: $status"; exit 1; }
# After the loss no rank calls MPI_Finalize, whose fence could wait for the dead rank: the
# watchdog that bounds it must never have fired (docs/fault-model.md, "Ending after a loss").
if grep -q "MPI_Finalize did not return" "$dir/out.txt"; then echo "a rank waited in MPI_Finalize"; exit 1; fi
# The survivors told to stop before the loss was found (all of them, late with heartbeats: the case
# this checks) were told after, once the shard was settled, and left without MPI_Finalize; the
# others' stops said a rank was lost.
read -r active detected_by <"$dir/m.jsonl.lost_at"
told=$(grep -c "a rank was lost just before the end: leaving without MPI_Finalize" "$dir/out.txt" || true)
if [[ ${5:-} == late && $detected_by == heartbeat && $active != 0 ]]; then
  echo "the loss was found with $active worker(s) still training: the late case did not happen"; exit 1
fi
[[ $told == $((np - shards - 1 - active)) ]] ||
  { echo "$told survivor(s) told after their stop, expected $((np - shards - 1 - active))"; exit 1; }
echo "ok: lost with $active other worker(s) training ($detected_by), $told survivor(s) told after their stop"
