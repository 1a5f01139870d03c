#!/usr/bin/env bash
# Every failure of the parameter server ends the job with a defined exit code, a final status and
# one clear line (issue 17, defect 3 and "quiet, readable output"). Before: a PS error was an
# MPI_Abort (a banner per rank), a non-Error exception hung in MPI_Finalize, and the restart loop
# retried what a rerun cannot fix. 1 PS + 2 workers under launch/mpirun.sh (mpirun
# --enable-recovery, restart loop), on loopback:
#  0. a command line that does not parse: said once by rank 0, exit 2, one attempt, status failed;
#  1. the PS fails at start (--resume of a missing file): exit 4 after one attempt, the status
#     "failed" with exit_code 4 and the error, one error line, no MPI_ABORT banner, no PMIx noise;
#  2. every rank fails the same way (a missing data directory): one line "error (every
#     process)", exit 3, status "failed"; an unknown --model the same, exit 2 (each rank reads the
#     model before MPI starts, for its TCP eager limit: an error there would bypass this);
#  3. training diverges (--lr 1000): stopped with exit 3 before the state reaches a checkpoint,
#     every checkpoint written holds finite values only;
#  4. the PS fails in the middle of training (its metrics file on a full 8 KiB tmpfs; skipped
#     where mounting is not allowed): the workers are stopped at once, exit 3, the status says
#     "failed" at the global step reached, no process is left.
# Usage: test_ps_failure.sh MPIEXEC MPI_TRAINER SOURCE_DIR
set -euo pipefail
trainer=$2 src=$3
dir=$(mktemp -d)
mnt=""
trap '[[ -n $mnt ]] && umount "$mnt" 2>/dev/null; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 1024 --test 64 --seed 3 >/dev/null
launch=("$src/launch/mpirun.sh" --trainer "$trainer" --np 3 --loopback --oversubscribe)
[[ $(id -u) == 0 ]] && launch+=(--allow-root)
common=(--model resnet8 --batch-size 8 --lr-schedule constant --lr 0.05 --ckpt-dir "$dir/ck" --ckpt-every-steps 20)
fail() { echo "FAIL: $*"; cat "$dir/out"; exit 1; }
status() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$dir/ck/run-status.json" "$1"; }
clean_log() {  # one error line, one attempt, no abort banner, no PMIx noise
  [[ $(grep -c "mpi_trainer: error" "$dir/out") == 1 ]] || fail "$1: expected one error line"
  [[ $(grep -c "restart_loop: .* attempt [0-9]*/" "$dir/out") == 1 ]] || fail "$1: retried"
  ! grep -q "MPI_ABORT\|PMIX ERROR\|Primary job" "$dir/out" || fail "$1: MPI abort banner or PMIx noise"
}

# 0. A command line that does not parse (every rank exits 2 before MPI starts; mpirun
#    --enable-recovery exits 0): rank 0 says it once and writes the status, no rerun (before: three
#    attempts and exit 75).
rc=0
"${launch[@]}" -- "${common[@]}" --train-steps 100 --lr 2 >"$dir/out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "usage: exit $rc, expected 2"
[[ $(grep -c "mpi_trainer: --lr: At Most 1 required but received 2" "$dir/out") == 1 ]] || fail "usage: not said once"
[[ $(grep -c "restart_loop: .* attempt [0-9]*/" "$dir/out") == 1 ]] || fail "usage: retried"
[[ $(status state) == failed && $(status exit_code) == 2 ]] || fail "usage: status $(cat "$dir/ck/run-status.json")"
echo "ok: a bad command line: said once, exit 2, one attempt, status failed"

# 1. A resume that cannot be done.
rc=0 t0=$SECONDS
"${launch[@]}" -- "${common[@]}" --train-steps 100 --resume "$dir/nope.h5" >"$dir/out" 2>&1 || rc=$?
[[ $rc == 4 ]] || fail "resume: exit $rc, expected 4"
((SECONDS - t0 < 30)) || fail "resume: took $((SECONDS - t0)) s"
grep -q "error (parameter server, rank 0): .*nope.h5: no such checkpoint file" "$dir/out" || fail "resume: no clear line"
clean_log resume
[[ $(status state) == failed && $(status exit_code) == 4 ]] || fail "resume: status $(cat "$dir/ck/run-status.json")"
status error | grep -q "no such checkpoint file" || fail "resume: the status does not carry the error"
echo "ok: a failed resume: exit 4 in $((SECONDS - t0)) s, one attempt, one line, status failed"

# 2. The same error on every rank.
rm -rf "$dir/ck"
rc=0
"${launch[@]}" -- "${common[@]}" --train-steps 100 --data "$dir/missing" >"$dir/out" 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "no data: exit $rc, expected 3"
grep -q "error (every process): data directory .*missing does not exist" "$dir/out" || fail "no data: no single line"
clean_log "no data"
[[ $(status state) == failed && $(status exit_code) == 3 ]] || fail "no data: status $(cat "$dir/ck/run-status.json")"
echo "ok: the same error on every rank: one line, exit 3, status failed"
# An unknown model, which each rank reads before MPI starts (its TCP eager limit): said the same way.
rm -rf "$dir/ck"
rc=0
"${launch[@]}" -- --model bogus --batch-size 8 --ckpt-dir "$dir/ck" --train-steps 100 --data "$dir/data" \
  >"$dir/out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "unknown model: exit $rc, expected 2"
grep -q "error (every process): unknown model 'bogus'" "$dir/out" || fail "unknown model: no single line"
clean_log "unknown model"
[[ $(status state) == failed && $(status exit_code) == 2 ]] || fail "unknown model: status $(cat "$dir/ck/run-status.json")"
echo "ok: an unknown model: one line, exit 2, status failed"

# 3. Training diverges (--lr 1000: the loss reached 2e23 and the run went on, rc 0): the PS stops
#    it before the push is applied, exit 3, no checkpoint of that state.
rm -rf "$dir/ck"
rc=0
"${launch[@]}" -- --model resnet8 --batch-size 8 --lr-schedule constant --lr 1000 --ckpt-dir "$dir/ck" \
  --ckpt-every-steps 5 --train-steps 100000 --data "$dir/data" >"$dir/out" 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "diverged: exit $rc, expected 3"
grep -q "error (parameter server, rank 0): training diverged at global step [0-9]*: loss .* is \(above --max-loss 1000\|not finite\)" \
  "$dir/out" || fail "diverged: no clear line"
clean_log diverged
[[ $(status state) == failed && $(status exit_code) == 3 ]] || fail "diverged: status $(cat "$dir/ck/run-status.json")"
if ls "$dir/ck"/ckpt-*.h5 >/dev/null 2>&1; then
  "$trainer" ckpt verify "$dir/ck" >/dev/null || fail "diverged: a checkpoint does not verify"
  for f in "$dir/ck"/ckpt-*.h5; do
    /usr/bin/python3 -c 'import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], "r")
bad = []
f.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and not np.all(np.isfinite(o[()])) else None)
sys.exit(1 if bad else 0)' "$f" || fail "diverged: $f holds a non-finite value"
  done
fi
echo "ok: a diverging run stopped at $(grep -o 'diverged at global step [0-9]*' "$dir/out" | head -1), exit 3, every checkpoint finite"

# 4. The PS fails while training.
mkdir "$dir/full"
if ! mount -t tmpfs -o size=8k tmpfs "$dir/full" 2>/dev/null; then
  echo "skipped: the mid-training failure needs a small tmpfs mount (root)"
  exit 0
fi
mnt="$dir/full"
rm -rf "$dir/ck"
rc=0 t0=$SECONDS
"${launch[@]}" -- "${common[@]}" --train-steps 100000 --data "$dir/data" --log-every-steps 2 \
  --metrics "$dir/full/m.jsonl" >"$dir/out" 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "metrics disk full: exit $rc, expected 3"
((SECONDS - t0 < 60)) || fail "metrics disk full: took $((SECONDS - t0)) s"
grep -q "error (parameter server, rank 0): --metrics .*write failed" "$dir/out" || fail "metrics disk full: no clear line"
clean_log "metrics disk full"
step=$(status global_step)
[[ $(status state) == failed && $(status exit_code) == 3 && $step -gt 0 ]] ||
  fail "metrics disk full: status $(cat "$dir/ck/run-status.json")"
! pgrep -f "$trainer train .*$dir" >/dev/null || fail "metrics disk full: a process was left"
"$trainer" ckpt verify "$dir/ck" >/dev/null || fail "metrics disk full: the checkpoints do not verify"
echo "ok: the PS failed at global step $step: workers stopped, exit 3 in $((SECONDS - t0)) s, status failed"
