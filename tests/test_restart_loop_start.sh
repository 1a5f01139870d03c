#!/usr/bin/env bash
# launch/restart_loop.sh --start-timeout: an attempt whose parameter server never writes its
# status (a launcher hung at start, as Open MPI 4.1's mpirun was seen to, with no rank running)
# is ended and counted as lost, and the next attempt starts; an attempt that writes its status in
# time is left alone however long it runs. --report DIR: when the loop ends, the trainer named in
# the command turns its --metrics file into DIR/index.html (the real report script, on the
# quickstart's metrics).
# Usage: test_restart_loop_start.sh REPO
set -uo pipefail
loop=$1/launch/restart_loop.sh
dir=$(mktemp -d)
trap 'pkill -KILL -f "sleep 612" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/out" 2>/dev/null; exit 1; }

# A launcher that hangs: two attempts, each ended 2 s after it began (TERM, then KILL 5 s later).
t0=$SECONDS
rc=0
"$loop" --attempts 2 --delay 0 --start-timeout 2 --status "$dir/st.json" -- bash -c 'trap "" TERM; exec sleep 612' >"$dir/out" 2>&1 || rc=$?
[[ $rc == 75 ]] || fail "hung launcher: exit $rc, expected 75 (attempts used up)"
(($(grep -c "within --start-timeout 2 s" "$dir/out") == 2)) || fail "expected two attempts ended by --start-timeout"
grep -q "attempt 2/2" "$dir/out" || fail "no second attempt"
((SECONDS - t0 < 30)) || fail "took $((SECONDS - t0)) s"
pgrep -f "sleep 612" >/dev/null && fail "the hung command is still running"
echo "hung launcher: two attempts ended after --start-timeout, exit 75 in $((SECONDS - t0)) s"

# A job that writes its status within the limit and then runs past it: not ended.
cat >"$dir/job.sh" <<JOB
#!/usr/bin/env bash
echo '{"state": "running", "global_step": 0}' >"$dir/st.json"
sleep 4
echo '{"state": "done", "exit_code": 0, "global_step": 5}' >"$dir/st.json"
JOB
chmod +x "$dir/job.sh"
rc=0
"$loop" --attempts 2 --delay 0 --start-timeout 2 --status "$dir/st.json" -- "$dir/job.sh" >"$dir/out" 2>&1 || rc=$?
[[ $rc == 0 ]] || fail "a started job: exit $rc, expected 0"
grep -q "start-timeout" "$dir/out" && fail "a job that wrote its status was ended"
echo "a job that wrote its status in time ran to the end: exit 0"

# --report: a stand-in trainer whose `train` writes the quickstart's metrics and a done status,
# and whose `report` is the real script.
mkdir -p "$dir/bin"
cat >"$dir/bin/mpi_trainer" <<JOB
#!/usr/bin/env bash
[[ \$1 == report ]] && { shift; exec /usr/bin/python3 $1/mpi_trainer/report/report.py "\$@"; }
cp $1/tests/golden/report/quickstart.jsonl "$dir/m.jsonl"
echo '{"state": "done", "exit_code": 0, "global_step": 200}' >"$dir/st.json"
JOB
chmod +x "$dir/bin/mpi_trainer"
rc=0
"$loop" --attempts 1 --status "$dir/st.json" --report "$dir/rep" -- "$dir/bin/mpi_trainer" train --metrics "$dir/m.jsonl" \
  >"$dir/out" 2>&1 || rc=$?
[[ $rc == 0 ]] || fail "--report: exit $rc, expected 0"
grep -q "report: $dir/rep/index.html" "$dir/out" || fail "--report: no report line"
[[ -s $dir/rep/index.html && -s $dir/rep/report.json ]] || fail "--report: no index.html or report.json"
rm -rf "$dir/rep"
rc=0
MT_REPORT_DIR="$dir/rep" "$loop" --attempts 1 --status "$dir/st.json" -- "$dir/bin/mpi_trainer" train \
  >"$dir/out" 2>&1 || rc=$?
[[ $rc == 0 ]] || fail "MT_REPORT_DIR without --metrics: exit $rc, expected 0 (a report that cannot be written changes no exit code)"
grep -q "no report (the command has no --metrics file" "$dir/out" || fail "MT_REPORT_DIR without --metrics: not said"
echo "--report: the report written when the loop ended; without --metrics said, exit unchanged"
echo "PASS"
