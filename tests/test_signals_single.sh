#!/usr/bin/env bash
# The single-process trainer and signals (issue 17, defect 4; before: SIGTERM/SIGUSR1/SIGINT ended
# it with 143/138/130 and no checkpoint). SIGTERM and SIGUSR1: checkpoint at once, exit 75;
# SIGINT: checkpoint, exit 130; a second SIGINT ends it at once. Each checkpoint verifies, and
# --resume auto continues from the step where it stopped.
# Usage: test_signals_single.sh MPI_TRAINER
set -euo pipefail
trainer=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 1024 --test 128 --seed 3 >/dev/null

# Starts a long run, waits for its 5th step, sends the signal(s), prints the exit code.
signal_run() {
  rm -rf "$dir/ck" "$dir/m.jsonl"
  "$trainer" train --model resnet8 --batch-size 32 --train-steps 1000000 --log-every-steps 1 --threads 1 \
    --data "$dir/data" --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl" >"$dir/out" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 600; ++i)); do
    grep -q '"global_step":5,' "$dir/m.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  kill -"$1" "$pid"
  if (($# > 1)); then kill -"$2" "$pid" 2>/dev/null || true; fi
  local rc=0
  wait "$pid" || rc=$?
  echo "$rc"
}

summary_field() {
  /usr/bin/python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1])]; s=e[-1]; assert s["event"]=="summary", s; print(s[sys.argv[2]])' "$dir/m.jsonl" "$1"
}

check_stop() {  # signal expected_rc
  local rc
  rc=$(signal_run "$1")
  [[ $rc == "$2" ]] || { echo "SIG$1: exit $rc, expected $2"; cat "$dir/out"; exit 1; }
  grep -q "stopped early (SIG$1)" "$dir/out" || { echo "SIG$1: no 'stopped early' line"; cat "$dir/out"; exit 1; }
  "$trainer" ckpt verify "$dir/ck" >/dev/null || { echo "SIG$1: the checkpoint does not verify"; exit 1; }
  local step
  step=$(summary_field global_step)
  [[ $(summary_field exit_code) == "$2" && $(summary_field stopped_by) == "SIG$1" ]] || { echo "SIG$1: summary"; tail -1 "$dir/m.jsonl"; exit 1; }
  ((step >= 5)) || { echo "SIG$1: stopped at step $step"; exit 1; }
  [[ $(cat "$dir/ck/LATEST") == "$(printf 'ckpt-%010d.h5' "$step")" ]] || { echo "SIG$1: LATEST is not step $step"; exit 1; }
  grep -q '"event":"stop_checkpoint_durable"' "$dir/m.jsonl" || { echo "SIG$1: no durable event"; exit 1; }
  echo "ok: SIG$1 -> exit $rc, checkpoint of step $step"
}

check_stop TERM 75
check_stop USR1 75
check_stop INT 130

# --resume auto continues from the step where the SIGINT stopped it.
step=$(summary_field global_step)
"$trainer" train --model resnet8 --batch-size 32 --train-steps $((step + 3)) --threads 1 --data "$dir/data" \
  --ckpt-dir "$dir/ck" >"$dir/out2" 2>&1 || { echo "resume failed"; cat "$dir/out2"; exit 1; }
grep -q "resumed from .*ckpt-$(printf '%010d' "$step").h5 at global step $step" "$dir/out2" ||
  { echo "did not resume at step $step"; cat "$dir/out2"; exit 1; }
echo "ok: resumed at step $step"

# A second SIGINT right after the first: the process ends at once (by the signal, 130).
rc=$(signal_run INT INT)
[[ $rc == 130 ]] || { echo "double SIGINT: exit $rc"; cat "$dir/out"; exit 1; }
echo "ok: a second SIGINT -> exit $rc"
