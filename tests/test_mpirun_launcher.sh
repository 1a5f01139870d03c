#!/usr/bin/env bash
# launch/mpirun.sh, the ad-hoc cluster launcher: its usage errors, that root and oversubscription
# flags appear only when asked, and a real run from a hostfile (loopback) in which a worker is
# revoked and the job still finishes.
# Usage: test_mpirun_launcher.sh MPIEXEC TRAINER
set -uo pipefail
trainer=$2
launcher="$(cd "$(dirname "$0")/.." && pwd)/launch/mpirun.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_usage() {  # expect_usage WHAT ARGS...: exit 2 with a message
  local out rc
  out=$("$launcher" "${@:2}" 2>&1); rc=$?
  [[ $rc -eq 2 && $out == mpirun.sh:* ]] || fail "$1: exit $rc, '$out'"
  echo "ok: $1: $out"
}
expect_usage "no training flags" --np 3
expect_usage "no --ckpt-dir" --np 3 -- --train-steps 5
expect_usage "one process" --np 1 --allow-root -- --ckpt-dir "$dir/ck"
expect_usage "unknown option" --np 3 --bogus -- --ckpt-dir "$dir/ck"
expect_usage "missing hostfile" --hostfile "$dir/none" -- --ckpt-dir "$dir/ck"
printf '# comment\n\n' > "$dir/empty"
expect_usage "empty hostfile" --hostfile "$dir/empty" -- --ckpt-dir "$dir/ck"

plain=$("$launcher" --dry-run --np 3 --trainer "$trainer" -- --ckpt-dir "$dir/ck")
[[ $plain != *allow-run-as-root* && $plain != *oversubscribe* && $plain == *--enable-recovery* ]] ||
  fail "dry run without --allow-root/--oversubscribe: $plain"
# The trainer's own MPI: its mpirun, and --with-ft ulfm exactly when it is a ULFM build.
version=$("$trainer" --version)
mp=$(sed -n 's/^mpirun: \(\/.*\)/\1/p' <<<"$version")
[[ -z $mp || $plain == *" $mp --enable-recovery "* ]] || fail "dry run does not start the trainer's mpirun $mp: $plain"
if grep -q '^failure detection: ULFM' <<<"$version"; then
  [[ $plain == *"--with-ft ulfm"* ]] || fail "ULFM build, but no --with-ft ulfm: $plain"
else
  [[ $plain != *--with-ft* ]] || fail "not a ULFM build, but --with-ft: $plain"
fi
printf 'localhost slots=2\n127.0.0.1 slots=1\n' > "$dir/hosts"
asked=$("$launcher" --dry-run --hostfile "$dir/hosts" --allow-root --oversubscribe --loopback --trainer "$trainer" -- --ckpt-dir "$dir/ck")
for want in "--allow-run-as-root" "--oversubscribe" "-np 3" "--hostfile $dir/hosts" "btl_tcp_if_include lo"; do
  [[ $asked == *"$want"* ]] || fail "dry run: no '$want' in: $asked"
done
echo "ok: root and oversubscription only when asked; np from the hostfile's slots"
expect_usage "launch agent not executable" --np 3 --launch-agent "$dir/none" --trainer "$trainer" -- --ckpt-dir "$dir/ck"
printf '#!/bin/sh\n' > "$dir/agent" && chmod +x "$dir/agent"
agent=$("$launcher" --dry-run --np 3 --launch-agent "$dir/agent" --grace 7 --trainer "$trainer" -- --ckpt-dir "$dir/ck")
# Open MPI 4.1 names it plm_rsh_agent, Open MPI 5 (PRRTE) plm_ssh_agent; no tree spawn either way.
if grep -q '^failure detection: ULFM' <<<"$version"; then want="--prtemca plm_ssh_agent $dir/agent --prtemca plm_ssh_no_tree_spawn 1"
else want="--mca plm_rsh_agent $dir/agent --mca plm_rsh_no_tree_spawn 1"; fi
[[ $agent == *"$want"* && $agent == *"--grace 7 "* ]] || fail "dry run with --launch-agent/--grace: no '$want' or --grace 7 in: $agent"
echo "ok: --launch-agent as this MPI names it, --grace to the restart loop"

"$trainer" gen-data "$dir/data" --train 1024 --test 256 --seed 3 >/dev/null
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-root)
printf 'localhost slots=4\n' > "$dir/hosts4"
"$launcher" --hostfile "$dir/hosts4" --loopback --oversubscribe "${root[@]}" --trainer "$trainer" -- \
  --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off --threads 1 \
  --data "$dir/data" --train-steps 150 --ckpt-dir "$dir/ck" --metrics "$dir/m.jsonl" --revoke rank=3@step=50 \
  > "$dir/out.txt" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { cat "$dir/out.txt"; fail "launcher run: exit $rc"; }
/usr/bin/python3 - "$dir/m.jsonl" <<'PY' || { cat "$dir/out.txt"; fail "launcher run: metrics"; }
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
assert s["global_step"] == 150 and s["workers_start"] == 3 and s["revocations"] == 1 and s["exit_code"] == 0, s
PY
echo "PASS: launch/mpirun.sh: usage errors, flags only when asked, a hostfile run that survives a revoked worker"
