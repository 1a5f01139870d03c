#!/usr/bin/env bash
# A hung worker (SIGSTOP: a debugger, a stuck process, a frozen VM) is dropped by the parameter
# server after --failure-timeout and the job goes on. When it wakes (SIGCONT) it finds the silence
# was its own and exits 0 with one line saying so, not "the parameter server is lost; exit 10":
# mpirun --enable-recovery (launch/mpirun.sh) then reports the job's outcome, 0 (issue 43). Two
# wakings: while the job still trains, and after it has finished. (Open MPI 4.1's mpirun without
# --enable-recovery ends the whole job when any rank leaves without MPI_Finalize, as a dropped or
# killed rank must: docs/fault-model.md, "Ending after a loss".)
# Usage: test_fault_hung_worker.sh MPIEXEC MPI_TRAINER
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
steps=300

# hang WAKE: one mpirun job of 1 PS + 2 workers; worker 2 stopped at step 40,
# woken after 4 s (WAKE=running) or once the parameter server printed its summary (WAKE=finished).
hang() {
  local wake=$1 victim=2 pid="" i rc=0
  rm -rf "$dir/ck" "$dir/m.jsonl"
  "$mpiexec" --enable-recovery -np 3 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 --batch-size 32 \
    --lr-schedule constant --lr 0.05 --augment off --log-every-steps 40 --data "$dir/data" \
    --metrics "$dir/m.jsonl" --train-steps $steps --failure-timeout 1 > "$dir/out.txt" 2>&1 &
  local job=$!
  wait_for_step 40
  pid=$(rank_pid $victim)
  [[ -n $pid ]] || { echo "FAIL: no pid for rank $victim"; exit 1; }
  kill -STOP "$pid"
  if [[ $wake == running ]]; then
    sleep 4
  else
    for ((i = 0; i < 1200; i++)); do grep -q '"event":"summary"' "$dir/m.jsonl" && break; sleep 0.1; done
    sleep 1
  fi
  kill -CONT "$pid"
  wait $job || rc=$?
  cat "$dir/out.txt"
  [[ $rc == 0 ]] || { echo "FAIL ($wake): mpirun exit $rc, expected 0"; exit 1; }
  grep -q "worker rank $victim: this process was suspended for .* longer than --failure-timeout 1 s: the parameter server dropped it and the job went on without it; exit 0" "$dir/out.txt" ||
    { echo "FAIL ($wake): the woken worker did not say it was dropped"; exit 1; }
  if grep -q "the parameter server is lost" "$dir/out.txt"; then echo "FAIL ($wake): a worker called the PS lost"; exit 1; fi
  /usr/bin/python3 - "$dir/m.jsonl" "$steps" "$victim" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps, victim = int(sys.argv[2]), int(sys.argv[3])
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == steps and s["exit_code"] == 0, s
assert s["lost_workers"] == 1 and s["workers_end"] == 1, s
rev = [e for e in events if e["event"] == "revocation"]
assert len(rev) == 1 and rev[0]["rank"] == victim and rev[0]["detected_by"] == "heartbeat", rev
PY
  echo "ok ($wake): worker $victim dropped, woke, exit 0; mpirun exit 0"
}
hang running
hang finished
