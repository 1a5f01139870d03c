#!/usr/bin/env bash
# preemption-watch: turns a cloud provider's preemption notice into SIGUSR1 for the Slurm job
# steps on this compute node, so that mpi_trainer's parameter server checkpoints and exits 75
# (the job requeues) and its workers finish their step and leave, before the VM goes away.
#
# Needs bash, curl and coreutils. Runs as root (it signals other users' processes), normally as
# the systemd unit cloud-hpc/preemption-watch.service; `--install` sets that up. Details and
# the whole preemption path on each cloud: docs/cloud.md.
set -uo pipefail

readonly PROG=preemption-watch
readonly GCE_URL=http://metadata.google.internal
readonly EC2_URL=http://169.254.169.254
readonly GCE_PATH=/computeMetadata/v1/instance/preempted
readonly EC2_TOKEN_PATH=/latest/api/token
readonly EC2_ACTION_PATH=/latest/meta-data/spot/instance-action
readonly INSTALL_BIN=/usr/local/sbin/mt-preemption-watch
readonly INSTALL_UNIT=/etc/systemd/system/mt-preemption-watch.service
readonly INSTALL_DEFAULTS=/etc/default/mt-preemption-watch

usage() {
  cat <<EOF
usage: $PROG --provider gce|ec2 [options]
       $PROG --install --provider gce|ec2 [--interval S] [--no-start]
       $PROG --print-unit

Polls the instance metadata server for a preemption notice and, when one arrives, sends
SIGUSR1 to the Slurm job steps on this node (found with \`scontrol listpids\`), logs each
signal, and exits 0.
  gce  GET $GCE_URL$GCE_PATH
       (header Metadata-Flavor: Google) answers TRUE once the VM is being preempted
       (about 30 s before it is stopped).
  ec2  IMDSv2: PUT $EC2_URL$EC2_TOKEN_PATH for a token, then
       GET $EC2_ACTION_PATH: 404 until a Spot interruption notice, then 200
       with {"action": ..., "time": ...} (two minutes before the interruption).

Which processes get the signal: by default the task processes of every job step (the ones
\`scontrol listpids\` gives a LOCALID): the batch script, which train.sbatch forwards to the
restart loop and the launcher, and each local MPI rank. A task that is an Open MPI daemon
(orted, prted) is not signalled itself: its child processes (the ranks) are. The extern step
and slurmstepd are never signalled. --all-processes signals every listed process instead
(daemons still through their children; beware: a helper without a USR1 handler, such as
sleep or tee, dies of it).

options:
  --provider gce|ec2   metadata service to poll [\$MT_PREEMPT_PROVIDER]
  --interval S         seconds between polls, > 0, decimals allowed [\$MT_PREEMPT_INTERVAL or 1]
  --metadata-url URL   base URL of the metadata server, for tests [\$MT_METADATA_URL or
                       $GCE_URL (gce), $EC2_URL (ec2)]
  --signal SIG         signal to send, e.g. USR1, TERM [USR1]
  --all-processes      signal every process of every step (see above), not only the tasks
  --once               check once: on a notice signal the steps and exit 0, else exit 3
  --dry-run            log what would be signalled, signal nothing
  --install            install this script as $INSTALL_BIN, the systemd unit
                       $INSTALL_UNIT and its settings $INSTALL_DEFAULTS
                       (--provider, --interval), then enable and start the unit (as root)
  --no-start           with --install: write the files only (no systemctl)
  --print-unit         print the systemd unit and exit
  -h, --help           this help

environment: MT_SCONTROL  the scontrol command [scontrol]; MT_INSTALL_ROOT  a directory to
install under instead of / (tests).
exit: 0 a notice was handled (or stopped by SIGTERM/SIGINT without one), 1 runtime error
(no curl, scontrol failed), 2 usage error, 3 no notice (--once).
On SIGTERM (the node shutting down) it checks for a notice once more before it exits.
EOF
}

die_usage() {
  echo "$PROG: $*" >&2
  echo "$PROG: try '$PROG --help'" >&2
  exit 2
}

log() { echo "$(date -u +%FT%T.%3NZ) $PROG: $*" >&2; }

print_unit() {
  cat <<'EOF'
# mpi_trainer: turns a cloud preemption notice into SIGUSR1 for the Slurm job steps on this
# node (cloud-hpc/preemption-watch.sh; docs/cloud.md). Installed by
# `preemption-watch.sh --install --provider gce|ec2`; settings in /etc/default/mt-preemption-watch.
[Unit]
Description=mpi_trainer preemption watcher (cloud notice -> SIGUSR1 to Slurm job steps)
Wants=network-online.target
After=network-online.target slurmd.service

[Service]
Type=simple
Environment=PATH=/usr/local/sbin:/usr/local/bin:/opt/slurm/bin:/usr/sbin:/usr/bin:/sbin:/bin
EnvironmentFile=-/etc/default/mt-preemption-watch
ExecStart=/usr/local/sbin/mt-preemption-watch
# Exits 0 once it has handled a notice: not restarted. A usage error (2) is not retried.
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=2
# On shutdown it gets SIGTERM before slurmd is stopped and checks for a notice once more.
TimeoutStopSec=20

[Install]
WantedBy=multi-user.target
EOF
}

provider=${MT_PREEMPT_PROVIDER:-}
interval=${MT_PREEMPT_INTERVAL:-1}
base_url=${MT_METADATA_URL:-}
sig=USR1
all_processes=0 once=0 dry_run=0 install=0 no_start=0

need_value() { (($2 >= 2)) || die_usage "$1 needs a value"; }
while (($#)); do
  case $1 in
    --provider) need_value "$1" $#; provider=$2; shift 2 ;;
    --provider=*) provider=${1#*=}; shift ;;
    --interval) need_value "$1" $#; interval=$2; shift 2 ;;
    --interval=*) interval=${1#*=}; shift ;;
    --metadata-url) need_value "$1" $#; base_url=$2; shift 2 ;;
    --metadata-url=*) base_url=${1#*=}; shift ;;
    --signal) need_value "$1" $#; sig=$2; shift 2 ;;
    --signal=*) sig=${1#*=}; shift ;;
    --all-processes) all_processes=1; shift ;;
    --once) once=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --install) install=1; shift ;;
    --no-start) no_start=1; shift ;;
    --print-unit) print_unit; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done

case $provider in
  gce|ec2) ;;
  "") die_usage "--provider gce|ec2 is required (or MT_PREEMPT_PROVIDER)" ;;
  *) die_usage "--provider must be gce or ec2, not '$provider'" ;;
esac
[[ $interval =~ ^[0-9]+([.][0-9]+)?$ && ! $interval =~ ^0+([.]0+)?$ ]] ||
  die_usage "--interval must be a number of seconds > 0, not '$interval'"
sig=${sig#SIG}
if ! [[ $sig =~ ^[A-Z0-9+-]+$ ]] || ! kill -l "$sig" >/dev/null 2>&1; then die_usage "unknown signal '$sig'"; fi
((no_start && !install)) && die_usage "--no-start goes with --install"
if [[ -z $base_url ]]; then
  if [[ $provider == gce ]]; then base_url=$GCE_URL; else base_url=$EC2_URL; fi
fi
[[ $base_url =~ ^https?://[^[:space:]]+$ ]] || die_usage "--metadata-url must be an http(s) URL, not '$base_url'"
base_url=${base_url%/}

if ((install)); then
  root=${MT_INSTALL_ROOT:-}
  if [[ -z $root && $(id -u) -ne 0 ]]; then echo "$PROG: --install needs root" >&2; exit 1; fi
  self=$(readlink -f "${BASH_SOURCE[0]}") || { echo "$PROG: cannot find my own path" >&2; exit 1; }
  if ! { mkdir -p "$root${INSTALL_BIN%/*}" "$root${INSTALL_UNIT%/*}" "$root${INSTALL_DEFAULTS%/*}" &&
          install -m 0755 "$self" "$root$INSTALL_BIN" &&
          print_unit >"$root$INSTALL_UNIT" &&
          printf '# %s settings (%s --help)\nMT_PREEMPT_PROVIDER=%s\nMT_PREEMPT_INTERVAL=%s\n' \
            "$PROG" "$INSTALL_BIN" "$provider" "$interval" >"$root$INSTALL_DEFAULTS"; }; then
    echo "$PROG: installing under '${root:-/}' failed" >&2; exit 1
  fi
  log "installed $root$INSTALL_BIN, $root$INSTALL_UNIT, $root$INSTALL_DEFAULTS (provider $provider, interval $interval s)"
  if ((!no_start)) && [[ -z $root ]]; then
    if ! { systemctl daemon-reload && systemctl enable --now mt-preemption-watch.service; }; then
      echo "$PROG: systemctl could not enable/start mt-preemption-watch.service" >&2; exit 1
    fi
    log "mt-preemption-watch.service enabled and started"
  fi
  exit 0
fi

command -v curl >/dev/null || { echo "$PROG: curl not found" >&2; exit 1; }
read -r -a scontrol <<<"${MT_SCONTROL:-scontrol}"
((${#scontrol[@]})) || scontrol=(scontrol)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX") || { echo "$PROG: mktemp failed" >&2; exit 1; }
sleeper=0
cleanup() { ((sleeper)) && kill "$sleeper" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# One HTTP request; prints the status code (000 when the server did not answer), body in $tmp/body.
http() {
  curl -s -o "$tmp/body" -w '%{http_code}' --connect-timeout 1 --max-time 2 "$@" 2>/dev/null || true
}

ec2_token=""
notice_text=""
# 0: a notice is there (its text in notice_text), 1: none, 2: the metadata server did not answer.
check_notice() {
  local code
  if [[ $provider == gce ]]; then
    code=$(http -H 'Metadata-Flavor: Google' "$base_url$GCE_PATH")
    [[ $code == 200 ]] || { last_error="HTTP $code from $base_url$GCE_PATH"; return 2; }
    if [[ $(tr -d '[:space:]' <"$tmp/body") == TRUE ]]; then
      notice_text="GCE metadata instance/preempted = TRUE"
      return 0
    fi
    return 1
  fi
  local try
  for try in 1 2; do
    if [[ -z $ec2_token ]]; then
      code=$(http -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600' "$base_url$EC2_TOKEN_PATH")
      [[ $code == 200 ]] || { last_error="HTTP $code for an IMDSv2 token from $base_url$EC2_TOKEN_PATH"; return 2; }
      ec2_token=$(tr -d '[:space:]' <"$tmp/body")
    fi
    code=$(http -H "X-aws-ec2-metadata-token: $ec2_token" "$base_url$EC2_ACTION_PATH")
    case $code in
      200) notice_text="EC2 spot/instance-action: $(tr -d '\n' <"$tmp/body")"; return 0 ;;
      404) return 1 ;;
      401) ec2_token="" ;;  # the token expired: get a new one and ask again
      *) last_error="HTTP $code from $base_url$EC2_ACTION_PATH"; return 2 ;;
    esac
  done
  last_error="IMDSv2 token refused twice"
  return 2
}

comm_of() { local c; if read -r c 2>/dev/null <"/proc/$1/comm"; then echo "$c"; else echo "?"; fi; }

# Children of pid $1, from /proc (no procps needed).
children_of() {
  local f rest ppid
  for f in /proc/[0-9]*/stat; do
    read -r rest 2>/dev/null <"$f" || continue
    rest=${rest##*) }  # after "pid (comm) ": "state ppid ..."
    read -r _ ppid _ <<<"$rest"
    if [[ $ppid == "$1" ]]; then f=${f#/proc/}; echo "${f%/stat}"; fi
  done
}

# Prints "pid<TAB>description" for each process to signal, from `scontrol listpids`.
select_targets() {
  local out rc
  out=$(timeout 10 "${scontrol[@]}" listpids 2>&1); rc=$?
  if ((rc != 0)); then
    if grep -qi 'no .*steps\|no job' <<<"$out"; then return 0; fi  # nothing runs here
    log "'${scontrol[*]} listpids' failed (rc $rc): $out"
    return 1
  fi
  local ipid=0 ijob=1 istep=2 ilocal=3 line
  local -a f
  while read -r line; do
    read -r -a f <<<"$line"
    ((${#f[@]})) || continue
    if [[ ${f[0]} == PID ]]; then  # the header: take the column positions from it
      local i
      for i in "${!f[@]}"; do
        case ${f[i]} in PID) ipid=$i ;; JOBID) ijob=$i ;; STEPID) istep=$i ;; LOCALID) ilocal=$i ;; esac
      done
      continue
    fi
    local pid=${f[ipid]} job=${f[ijob]:-?} step=${f[istep]:-?} localid=${f[ilocal]:--}
    [[ $pid =~ ^[0-9]+$ ]] || continue
    [[ $step == extern ]] && continue
    ((pid == $$ || pid == BASHPID)) && continue
    ((all_processes)) || [[ $localid =~ ^[0-9]+$ ]] || continue  # not a task
    local comm; comm=$(comm_of "$pid")
    [[ $comm == slurmstepd ]] && continue
    if [[ $comm == orted || $comm == prted ]]; then  # an Open MPI daemon: signal its ranks
      local child
      for child in $(children_of "$pid"); do
        printf '%s\t%s (child of %s %s, job %s step %s)\n' "$child" "$(comm_of "$child")" "$comm" "$pid" "$job" "$step"
      done
    else
      printf '%s\t%s (job %s step %s task %s)\n' "$pid" "$comm" "$job" "$step" "$localid"
    fi
  done <<<"$out"
}

handle_notice() {
  log "preemption notice: $notice_text"
  local targets="" try
  for try in 1 2 3; do
    if targets=$(select_targets); then break; fi
    ((try == 3)) && { log "could not list the job steps: nothing signalled"; return 1; }
    sleep 1
  done
  if [[ -z $targets ]]; then
    log "no Slurm job step processes on this node: nothing to signal"
    return 0
  fi
  local pid desc n=0
  declare -A seen=()
  while IFS=$'\t' read -r pid desc; do
    [[ -n $pid && -z ${seen[$pid]:-} ]] || continue
    seen[$pid]=1
    if ((dry_run)); then
      log "dry run: would send SIG$sig to $pid $desc"
    elif kill -s "$sig" "$pid" 2>/dev/null; then
      log "sent SIG$sig to $pid $desc"; n=$((n + 1))
    else
      log "could not signal $pid $desc (gone, or not root)"
    fi
  done <<<"$targets"
  ((dry_run)) || log "signalled $n process(es)"
  return 0
}

stop=0
trap 'stop=1' TERM INT
last_error="" failing=0
log "watching $provider preemption notices at $base_url every $interval s (signal SIG$sig)"
while :; do
  check_notice; st=$?
  if ((st == 0)); then
    handle_notice && exit 0
    exit 1
  fi
  if ((st == 2 && !failing)); then log "metadata server: $last_error (retrying)"; failing=1; fi
  if ((st == 1 && failing)); then log "metadata server answers again"; failing=0; fi
  ((once)) && { log "no preemption notice"; exit 3; }
  ((stop)) && { log "stopped without a preemption notice"; exit 0; }
  sleep "$interval" & sleeper=$!
  wait "$sleeper" 2>/dev/null
  kill "$sleeper" 2>/dev/null; sleeper=0
  if ((stop)); then  # SIGTERM: the node may be shutting down because of the preemption
    check_notice && { handle_notice && exit 0; exit 1; }
    log "stopped without a preemption notice"
    exit 0
  fi
done
