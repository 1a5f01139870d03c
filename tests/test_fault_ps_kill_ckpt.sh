#!/usr/bin/env bash
# The parameter server is SIGKILLed in the middle of writing its 2nd checkpoint (--revoke
# rank=0@ckpt=2): the workers notice within --failure-timeout and exit 10, nothing hangs, the
# status file still says "running", and launch/restart_loop.sh reruns the job, which resumes from
# the previous valid checkpoint (the torn .tmp file is never used) and finishes. No standby
# (--ps-standby 0): with one, the restart resumes from its replica (test_fault_ps_standby.sh).
set -euo pipefail
source "$(dirname "$0")/fault_lib.sh" "$1" "$2"
steps=160
cat > "$dir/cmd.sh" <<EOS
#!/usr/bin/env bash
extra=()
[[ \$MT_RESTART_ATTEMPT == 1 ]] && extra=(--revoke rank=0@ckpt=2)
exec $(train_cmd 4 --train-steps $steps --ckpt-every-steps 40 --failure-timeout 1 --ps-standby 0) "\${extra[@]}"
EOS
chmod +x "$dir/cmd.sh"
start=$SECONDS
"$restart_loop" --attempts 3 --delay 0 --status "$dir/ck/run-status.json" -- "$dir/cmd.sh" > "$dir/loop.txt" 2>&1 ||
  { echo "restart loop failed"; cat "$dir/loop.txt"; exit 1; }
cat "$dir/loop.txt"
grep -q "in the middle of writing checkpoint 2" "$dir/loop.txt"
[[ $(grep -c "the parameter server is lost; exit 10" "$dir/loop.txt") -eq 3 ]]
grep -q "attempt 1 ended: the parameter server was lost" "$dir/loop.txt"
grep -q "attempt 2 finished training at global step $steps" "$dir/loop.txt"
/usr/bin/python3 - "$dir/m.jsonl" "$steps" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
resumes = [e for e in events if e["event"] == "resume"]
assert len(resumes) == 1, resumes
assert resumes[0]["global_step"] == 40 and resumes[0]["file"].endswith("ckpt-0000000040.h5"), resumes
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == steps and s["attempts"] == 2, s
print("ok: resumed from", resumes[0]["file"], "and finished")
PY
"$trainer" ckpt verify "$dir/ck"
echo "total ${SECONDS}s (from $start)"
