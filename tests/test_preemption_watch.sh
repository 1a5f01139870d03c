#!/usr/bin/env bash
# cloud-hpc/preemption-watch.sh against a fake metadata server (GCE `preempted` flag; EC2 IMDSv2
# token + spot/instance-action) and a fake `scontrol listpids`: on a notice, the batch script and
# the step tasks of this node get SIGUSR1 within 2 s, the children of an Open MPI daemon (orted)
# are signalled instead of the daemon, the extern step, slurmstepd and (by default) non-task
# helpers are not; bad flags exit 2; --once and --install work; the unit file in the repo is the
# one --install writes.
# Usage: test_preemption_watch.sh REPO_ROOT
set -uo pipefail
repo=$(cd "${1:?usage: test_preemption_watch.sh REPO_ROOT}" && pwd) || exit 2
watch=$repo/cloud-hpc/preemption-watch.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_preemption_watch.XXXXXX") || exit 1
pids=()  # every process this test starts, killed at exit

cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.2
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0 passes=0
pass() { echo "PASS: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
now_ms() { date +%s%3N; }

# --- the fake metadata server ------------------------------------------------------------------
cat >"$tmp/server.py" <<'PY'
import http.server, json, os, sys
flags, portfile, reqlog = sys.argv[1], sys.argv[2], sys.argv[3]
TOKEN = "tok-123"

class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, body=""):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with open(reqlog, "a") as f:
            f.write(f"{self.command} {self.path} {code} {body}\n")

    def do_GET(self):
        if self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(403, "missing Metadata-Flavor header")
            return self.reply(200, "TRUE" if os.path.exists(f"{flags}/gce") else "FALSE")
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return self.reply(401, "")
            if not os.path.exists(f"{flags}/ec2"):
                return self.reply(404, "")
            return self.reply(200, json.dumps({"action": "terminate", "time": "2030-01-01T00:02:00Z"}))
        self.reply(404, "")

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.reply(200, TOKEN)
        self.reply(400, "")

    def log_message(self, *args):
        pass

srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
PY
mkdir -p "$tmp/flags"
/usr/bin/python3 "$tmp/server.py" "$tmp/flags" "$tmp/port" "$tmp/requests.log" &
pids+=("$!")
for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
[[ -s $tmp/port ]] || { echo "FAIL: the fake metadata server did not start"; exit 1; }
url=http://127.0.0.1:$(cat "$tmp/port")

# --- processes that stand for job step processes -----------------------------------------------
# sleeper MARKER [CHILD_MARKER]: writes the time (ms) to MARKER on SIGUSR1 and exits; with
# CHILD_MARKER it waits for another sleeper, its only child, instead (an orted and its rank). A direct
# #!/bin/bash (not env) keeps the copies' file names as their comm.
cat >"$tmp/sleeper" <<'SH'
#!/bin/bash
marker=$1 kids=()
trap 'date +%s%3N >"$marker"; ((${#kids[@]})) && kill "${kids[@]}" 2>/dev/null; exit 0' USR1
trap '((${#kids[@]})) && kill "${kids[@]}" 2>/dev/null; exit 0' TERM
if [[ -n ${2:-} ]]; then "$0" "$2" & else sleep 300 & fi
kids+=($!)
: >"$marker.ready"
wait "${kids[0]}"
SH
chmod +x "$tmp/sleeper"
cp "$tmp/sleeper" "$tmp/slurmstepd"   # its comm is "slurmstepd": must be skipped
cp "$tmp/sleeper" "$tmp/orted"        # an Open MPI daemon: its child is signalled, not itself

declare -A pid_of=()
start() {  # start NAME PROGRAM [CHILD_NAME]
  local name=$1 prog=$2 child=${3:-}
  rm -f "$tmp/m.$name" "$tmp/m.$name.ready"
  if [[ -n $child ]]; then
    rm -f "$tmp/m.$child" "$tmp/m.$child.ready"
    "$prog" "$tmp/m.$name" "$tmp/m.$child" &
  else
    "$prog" "$tmp/m.$name" &
  fi
  pid_of[$name]=$!
  pids+=("$!")
  local f
  for f in "$tmp/m.$name.ready" ${child:+"$tmp/m.$child.ready"}; do
    for _ in $(seq 50); do [[ -e $f ]] && break; sleep 0.1; done
    [[ -e $f ]] || { echo "FAIL: $name did not start"; exit 1; }
  done
}

start_job() {  # the processes of one node and the fake `scontrol listpids` describing them
  start batch "$tmp/sleeper"
  start helper "$tmp/sleeper"
  start task "$tmp/sleeper"
  start extern "$tmp/sleeper"
  start stepd "$tmp/slurmstepd"
  start orted "$tmp/orted" rank
  cat >"$tmp/listpids.out" <<EOF
PID      JOBID    STEPID   LOCALID GLOBALID
${pid_of[extern]}    42       extern   0       0
${pid_of[batch]}    42       batch    0       0
${pid_of[helper]}    42       batch    -       -
${pid_of[task]}    42       0        0       2
${pid_of[stepd]}    42       0        -       -
${pid_of[orted]}    42       1        0       0
EOF
}
cat >"$tmp/scontrol" <<SH
#!/usr/bin/env bash
[[ \$1 == listpids ]] || { echo "fake scontrol: unexpected \$*" >&2; exit 1; }
cat "$tmp/listpids.out"
SH
chmod +x "$tmp/scontrol"
export MT_SCONTROL=$tmp/scontrol

signalled() { [[ -s $tmp/m.$1 ]]; }
alive() { kill -0 "${pid_of[$1]}" 2>/dev/null; }

# run_round PROVIDER [WATCHER FLAGS...]: starts the watcher, checks it keeps polling without a
# notice, raises the notice and checks who got the signal and how fast.
run_round() {
  local provider=$1; shift
  start_job
  rm -f "$tmp/flags/$provider"
  : >"$tmp/requests.log"
  "$watch" --provider "$provider" --interval 0.2 --metadata-url "$url" "$@" 2>"$tmp/watch.$provider.log" &
  local wpid=$!
  pids+=("$wpid")
  sleep 1
  if kill -0 "$wpid" 2>/dev/null; then pass "$provider: the watcher keeps polling while there is no notice"
  else fail "$provider: the watcher exited without a notice: $(cat "$tmp/watch.$provider.log")"; fi
  if [[ $provider == gce ]]; then
    grep -q '^GET /computeMetadata/v1/instance/preempted 200 FALSE' "$tmp/requests.log" &&
      pass "gce: polled instance/preempted with Metadata-Flavor: Google (FALSE)" ||
      fail "gce: no valid poll of instance/preempted: $(head -3 "$tmp/requests.log")"
  else
    grep -q '^PUT /latest/api/token 200' "$tmp/requests.log" &&
      grep -q '^GET /latest/meta-data/spot/instance-action 404' "$tmp/requests.log" &&
      pass "ec2: got an IMDSv2 token and polled spot/instance-action (404)" ||
      fail "ec2: no valid IMDSv2 polling: $(head -3 "$tmp/requests.log")"
  fi
  local t0; t0=$(now_ms)
  : >"$tmp/flags/$provider"
  local name
  for _ in $(seq 50); do
    signalled batch && signalled task && signalled rank && break
    sleep 0.1
  done
  for name in batch task rank; do
    if signalled "$name"; then
      local dt=$(($(cat "$tmp/m.$name") - t0))
      ((dt <= 2000)) && pass "$provider: $name got SIGUSR1 ${dt} ms after the notice" ||
        fail "$provider: $name got SIGUSR1 only ${dt} ms after the notice"
    else
      fail "$provider: $name never got SIGUSR1"
    fi
  done
  for _ in $(seq 30); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$wpid" 2>/dev/null; then fail "$provider: the watcher did not exit after the notice"
  else
    wait "$wpid"; local rc=$?
    ((rc == 0)) && pass "$provider: the watcher exited 0 after the notice" ||
      fail "$provider: the watcher exited $rc after the notice"
  fi
  for name in extern stepd; do
    if ! signalled "$name" && alive "$name"; then pass "$provider: $name was not signalled"
    else fail "$provider: $name was signalled"; fi
  done
  # (the fake orted exits when its rank does, like the real one)
  ! signalled orted && pass "$provider: orted was not signalled, its rank was" ||
    fail "$provider: orted was signalled"
  if [[ " $* " == *" --all-processes "* ]]; then
    signalled helper && pass "$provider: --all-processes signalled the non-task helper" ||
      fail "$provider: --all-processes did not signal the non-task helper"
  else
    ! signalled helper && alive helper && pass "$provider: the non-task helper was not signalled" ||
      fail "$provider: the non-task helper was signalled"
  fi
  grep -q "preemption notice" "$tmp/watch.$provider.log" && grep -q "sent SIGUSR1 to ${pid_of[batch]} " "$tmp/watch.$provider.log" &&
    pass "$provider: the log names the notice and each signalled process" ||
    fail "$provider: the log lacks the notice or the signals: $(cat "$tmp/watch.$provider.log")"
  for name in extern stepd orted helper; do kill "${pid_of[$name]}" 2>/dev/null; done
}

run_round gce
run_round ec2 --all-processes

# --- --once --------------------------------------------------------------------------------------
rm -f "$tmp/flags/gce"
"$watch" --provider gce --once --metadata-url "$url" 2>/dev/null; rc=$?
((rc == 3)) && pass "--once without a notice exits 3" || fail "--once without a notice exited $rc"
: >"$tmp/flags/gce"
: >"$tmp/listpids.out"
MT_METADATA_URL=$url "$watch" --provider gce --once --dry-run 2>"$tmp/once.log"; rc=$?
((rc == 0)) && grep -q "nothing to signal" "$tmp/once.log" && pass "--once with a notice and no job steps exits 0" ||
  fail "--once with a notice and no job steps: rc $rc, $(cat "$tmp/once.log")"

# --- SIGTERM: a last check, then exit 0 -------------------------------------------------------------
rm -f "$tmp/flags/gce"
"$watch" --provider gce --interval 5 --metadata-url "$url" 2>"$tmp/term.log" &
wpid=$!; pids+=("$wpid")
sleep 0.5
kill -TERM "$wpid"
for _ in $(seq 30); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$wpid" 2>/dev/null; then fail "SIGTERM: the watcher did not exit within 3 s"
else
  wait "$wpid"; rc=$?
  ((rc == 0)) && grep -q "stopped without a preemption notice" "$tmp/term.log" &&
    pass "SIGTERM without a notice: exits 0 at once" || fail "SIGTERM: rc $rc, $(cat "$tmp/term.log")"
fi

# --- bad flags ------------------------------------------------------------------------------------
bad() {
  local out rc
  out=$(MT_PREEMPT_PROVIDER='' "$watch" "$@" 2>&1 >/dev/null); rc=$?
  if ((rc == 2)) && [[ -n $out ]]; then pass "bad flags exit 2: $*"
  else fail "bad flags '$*': rc $rc, message '$out'"; fi
}
bad
bad --provider azure
bad --provider
bad --provider gce --interval 0
bad --provider gce --interval soon
bad --provider gce --interval
bad --provider gce --bogus
bad --provider gce --signal NOPE
bad --provider gce --metadata-url ftp://x
bad --provider gce --no-start
out=$("$watch" --help 2>&1); rc=$?
((rc == 0)) && [[ $out == *--provider* && $out == *--metadata-url* && $out == *--interval* ]] &&
  pass "--help exits 0 and describes the flags" || fail "--help: rc $rc"

# --- --install into a scratch root; the unit in the repo is the one it writes -------------------
MT_INSTALL_ROOT=$tmp/root "$watch" --install --provider ec2 --interval 2 2>/dev/null; rc=$?
if ((rc == 0)) && [[ -x $tmp/root/usr/local/sbin/mt-preemption-watch ]] &&
   grep -qx 'MT_PREEMPT_PROVIDER=ec2' "$tmp/root/etc/default/mt-preemption-watch" &&
   cmp -s "$tmp/root/etc/systemd/system/mt-preemption-watch.service" "$repo/cloud-hpc/preemption-watch.service"; then
  pass "--install writes the script, its settings and cloud-hpc/preemption-watch.service"
else
  fail "--install: rc $rc, or its files differ from cloud-hpc/preemption-watch.service"
fi

echo "$passes passed, $failures failed"
((failures == 0))
