#!/usr/bin/env bash
# --replace-workers (docs/fault-model.md, "Replacement workers"): 1 PS + 3 workers; worker rank 2
# SIGKILLs itself at global step 60 and the parameter server spawns a replacement (MPI_Comm_spawn
# running `mpi_trainer join`) that takes its data slot: the run ends with 3 workers, not 2. Under
# ULFM the parameter server is also killed at step 140: the standby takes it over, and the new
# parameter server spawns replacements for the slots no survivor holds (the standby's own, and the
# first replacement's, which was connected to the lost parameter server alone). Every run's whole
# history is checked (bench/faults/history_check.py): no acknowledged push lost but those lost with
# the replacement in the takeover, none applied twice (a replacement numbers its pushes on past
# its slot's). Between the two, worker rank 3 is stopped (SIGSTOP) for 4 s at global step 80: the
# parameter server drops it and spawns a replacement for it; woken, it asks to rejoin and takes its
# slot back from that replacement, which is retired (it stops at its next push, exit 0): a
# launched worker, unlike a spawned one, can take the parameter server over (ULFM).
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
ulfm=0
grep -q '^failure detection: ULFM' <<<"$("$trainer" --version)" && ulfm=1
steps=280 revoke=rank=2@step=60
((ulfm)) && revoke+=,rank=0@step=230
rc=0
train 4 --train-steps $steps --failure-timeout 1.5 --emulate-device k80 --emulate-scale 0.5 --threads 1 \
  --replace-workers --revoke "$revoke" --push-log "$dir/push.csv" &
job=$!
wait_for_step 80
paused=$(rank_pid 3)
[[ -n $paused ]] || { echo "FAIL: no pid for rank 3"; kill $job; exit 1; }
kill -STOP "$paused"
sleep 4
kill -CONT "$paused"
wait $job || rc=$?
if ((rc != 0)); then echo "FAIL: mpirun exit $rc"; cat "$dir/out.txt"; exit 1; fi
grep -q "worker rank 3 is back: its replacement in data slot 2 (worker rank [0-9]*) gives the slot back" "$dir/out.txt" ||
  { echo "FAIL: worker rank 3 did not take its slot back from its replacement"; cat "$dir/out.txt"; exit 1; }
grep -q "joined worker (pid [0-9]*): the worker whose data slot this replacement took was dropped while alive and came back" \
  "$dir/out.txt" || { echo "FAIL: the retired replacement did not say so"; cat "$dir/out.txt"; exit 1; }
/usr/bin/python3 - "$dir/m.jsonl" "$ulfm" "$steps" <<'PY' || { cat "$dir/out.txt"; exit 1; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ulfm = sys.argv[2] == "1"
steps = int(sys.argv[3])
s = [e for e in ev if e["event"] == "summary"]
assert len(s) == 1, f"{len(s)} summaries"
s = s[0]
assert s["exit_code"] == 0 and s["global_step"] == steps, s
assert s["workers_end"] == 3, f"the run ended with {s['workers_end']} workers, not 3: nothing replaced"
lost = [e for e in ev if e["event"] == "revocation"]
back = [e for e in ev if e["event"] == "join" and e["rejoined"]]
joins = [e for e in ev if e["event"] == "join" and not e["rejoined"]]
assert lost and lost[0]["rank"] == 2, lost
paused = [e for e in lost if e["rank"] == 3 and e["detected_by"] == "heartbeat"]
assert len(paused) == 1, f"rank 3 dropped {len(paused)} times: {lost}"
assert len(back) == 1 and back[0]["rank"] == 3 and back[0]["slot"] == 2, f"rank 3 not taken back in slot 2: {back}"
replaced = [j for j in joins if paused[0]["global_step"] <= j["global_step"] <= back[0]["global_step"]]
assert replaced and replaced[0]["slot"] == 2, f"no replacement for rank 3 before it came back: {joins}"
print(f"ok: rank 3 dropped at global step {paused[0]['global_step']}, replaced at {replaced[0]['global_step']}, "
      f"back in its slot at {back[0]['global_step']}")
first = [j for j in joins if j["global_step"] >= lost[0]["global_step"]]
assert first, "no replacement joined after rank 2 was lost"
print(f"ok: rank 2 lost at global step {lost[0]['global_step']}, a replacement joined at {first[0]['global_step']} "
      f"in data slot {first[0]['slot']}")
if ulfm:
    t = [e for e in ev if e["event"] == "ps_takeover"]
    assert len(t) == 1, f"{len(t)} takeovers"
    after = [j for j in joins if j["global_step"] >= t[0]["global_step"]]
    assert len(after) == 2, f"{len(after)} replacements joined after the takeover, expected 2: {after}"
    print(f"ok: taken over at global step {t[0]['global_step']}; 2 replacements joined after it, at "
          f"{after[0]['global_step']} and {after[1]['global_step']}")
print(f"ok: {steps} steps, exit 0, {s['workers_end']} workers at the end")
PY
/usr/bin/python3 "$here/../bench/faults/history_check.py" "$dir/push.csv" --metrics "$dir/m.jsonl" ||
  { echo "FAIL: the run's history"; exit 1; }
if pgrep -f "$trainer join .*$dir/" >/dev/null; then echo "FAIL: a replacement is still running"; exit 1; fi
echo "ok: no replacement left running"
