#!/usr/bin/env bash
# Hung workers (SIGSTOP: a debugger, a stuck process, a frozen VM) are dropped by the parameter
# server after --failure-timeout and the job goes on. When one wakes (SIGCONT) it finds the silence
# was its own, says so, and asks to rejoin (never "the parameter server is lost; exit 10"): woken
# while the job trains it is taken back in its data slot (a join event, 2 workers at the end);
# woken after the end it is not, and exits 0: mpirun --enable-recovery (launch/mpirun.sh) then
# reports the job's outcome, 0 (issues 43, 61). One job of 1 PS + 3 workers, two wakings: worker 2
# while the job still trains, worker 3 after it has finished. Open
# MPI 4.1's mpirun without --enable-recovery ends the whole job when any rank leaves without
# MPI_Finalize, as a dropped or killed rank must (docs/fault-model.md, "Ending after a loss").
# Each step is padded to 44 ms (an emulated K80 at scale 0.2): the 120 steps left to worker 1 alone
# take 5 s on any machine, past the 2.5 s the stopped workers wait (on a fast one, unpaced, the
# job once finished first).
# Usage: test_fault_hung_worker.sh MPIEXEC MPI_TRAINER
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
steps=160 rc=0
"$mpiexec" --enable-recovery -np 4 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 \
  --batch-size 32 --lr-schedule constant --lr 0.05 --augment off --log-every-steps 40 --data "$dir/data" \
  --metrics "$dir/m.jsonl" --train-steps $steps --failure-timeout 1 --emulate-device k80 --emulate-scale 0.2 \
  > "$dir/out.txt" 2>&1 &
job=$!
wait_for_step 40
early=$(rank_pid 2) late=$(rank_pid 3)
[[ -n $early && -n $late ]] || { echo "FAIL: no pids for ranks 2 and 3"; exit 1; }
kill -STOP "$early" "$late"
sleep 2.5
grep -q '"event":"summary"' "$dir/m.jsonl" && { echo "FAIL: the job ended before worker 2 woke"; exit 1; }
kill -CONT "$early"
for ((i = 0; i < 1200; i++)); do grep -q '"event":"summary"' "$dir/m.jsonl" && break; sleep 0.1; done
sleep 1
kill -CONT "$late"
wait $job || rc=$?
cat "$dir/out.txt"
[[ $rc == 0 ]] || { echo "FAIL: mpirun exit $rc, expected 0"; exit 1; }
for r in 2 3; do
  grep -q "worker rank $r: this process was suspended for .* longer than --failure-timeout 1 s: the parameter server dropped it; it asks to rejoin" "$dir/out.txt" ||
    { echo "FAIL: the woken worker $r did not say it was dropped"; exit 1; }
done
grep -q "worker rank 2, dropped at --failure-timeout, asks to rejoin at global step [0-9]*: taken back in data slot 1" "$dir/out.txt" ||
  { echo "FAIL: the parameter server did not take worker 2 back"; exit 1; }
grep -q "worker rank 3: the parameter server did not take it back (.*): the job goes on without it; exit 0" "$dir/out.txt" ||
  { echo "FAIL: worker 3, woken after the end, did not say it was not taken back"; exit 1; }
if grep -q "the parameter server is lost" "$dir/out.txt"; then echo "FAIL: a worker called the PS lost"; exit 1; fi
/usr/bin/python3 - "$dir/m.jsonl" "$steps" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == steps and s["exit_code"] == 0, s
assert s["lost_workers"] == 2 and s["workers_end"] == 2, s
rev = sorted(e["rank"] for e in events if e["event"] == "revocation" and e["detected_by"] == "heartbeat")
assert rev == [2, 3], rev
back = [e for e in events if e["event"] == "join"]
assert len(back) == 1 and back[0]["rank"] == 2 and back[0]["slot"] == 1 and back[0]["rejoined"], back
PY
echo "ok: workers 2 and 3 dropped; 2 woke while training and was taken back, 3 after the end and exited 0; mpirun exit 0"
