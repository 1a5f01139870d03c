#!/usr/bin/env bash
# --replace-workers (docs/fault-model.md, "Replacement workers"): 1 PS + 3 workers; worker rank 2
# SIGKILLs itself at global step 60 and the parameter server spawns a replacement (MPI_Comm_spawn
# running `mpi_trainer join`) that takes its data slot: the run ends with 3 workers, not 2. Under
# ULFM the parameter server is also killed at step 140: the standby takes it over, and the new
# parameter server spawns replacements for the slots no survivor holds (the standby's own, and the
# first replacement's, which was connected to the lost parameter server alone). Every run's whole
# history is checked (bench/faults/history_check.py): no acknowledged push lost but those lost with
# the replacement in the takeover, none applied twice (a replacement numbers its pushes on past
# its slot's).
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
ulfm=0
grep -q '^failure detection: ULFM' <<<"$("$trainer" --version)" && ulfm=1
revoke=rank=2@step=60
((ulfm)) && revoke+=,rank=0@step=140
rc=0
train 4 --train-steps 240 --failure-timeout 1.5 --emulate-device k80 --emulate-scale 0.5 --threads 1 \
  --replace-workers --revoke "$revoke" --push-log "$dir/push.csv" || rc=$?
if ((rc != 0)); then echo "FAIL: mpirun exit $rc"; cat "$dir/out.txt"; exit 1; fi
/usr/bin/python3 - "$dir/m.jsonl" "$ulfm" <<'PY' || { cat "$dir/out.txt"; exit 1; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ulfm = sys.argv[2] == "1"
s = [e for e in ev if e["event"] == "summary"]
assert len(s) == 1, f"{len(s)} summaries"
s = s[0]
assert s["exit_code"] == 0 and s["global_step"] == 240, s
assert s["workers_end"] == 3, f"the run ended with {s['workers_end']} workers, not 3: nothing replaced"
lost = [e for e in ev if e["event"] == "revocation"]
joins = [e for e in ev if e["event"] == "join"]
assert lost and lost[0]["rank"] == 2, lost
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
print(f"ok: 240 steps, exit 0, {s['workers_end']} workers at the end")
PY
/usr/bin/python3 "$here/../bench/faults/history_check.py" "$dir/push.csv" --metrics "$dir/m.jsonl" ||
  { echo "FAIL: the run's history"; exit 1; }
if pgrep -f "$trainer join .*$dir/" >/dev/null; then echo "FAIL: a replacement is still running"; exit 1; fi
echo "ok: no replacement left running"
