#!/usr/bin/env bash
# Restart-from-checkpoint loop (in the spirit of SCR's srun loop): runs a training command,
# and reruns it, resuming from the newest valid checkpoint (`--resume auto`, the default), when
# the parameter server stopped on a notice (exit 75) or was lost, up to N attempts.
#
#   launch/restart_loop.sh [--attempts N] [--status FILE] [--delay S] [--grace S] [--start-timeout S]
#                          [--report DIR] -- COMMAND...
#
# COMMAND is the whole launch line, e.g.
#   launch/restart_loop.sh --attempts 5 -- mpirun --enable-recovery -np 5 \
#       build/release/mpi_trainer train --ckpt-dir ck --ckpt-every-steps 200
#
# How an attempt ended comes from the parameter server's status file (<ckpt-dir>/run-status.json
# unless --status-file says otherwise; found in COMMAND or given with --status), because
# `mpirun --enable-recovery` exits 0 whatever the ranks did (measured: docs/architecture.md,
# "Measured facts the code relies on"):
#   state done            -> exit 0
#   state failed, 2/3/4   -> that exit: a rerun cannot help (usage, bad data, a checkpoint
#                            that cannot be written or read: disk full, read-only): no rerun
#   state failed, other   -> rerun (an MPI or library error may not come back)
#   state requeue (75)    -> rerun (a notice, or every worker revoked)
#   state interrupted     -> exit 130: stopped by a SIGINT (Ctrl-C) after a checkpoint: no rerun
#   state running/missing -> the parameter server was lost (killed): rerun
#   state lost            -> the same, said by its standby once the replica was written: rerun
#   exit 2, 3 or 4 from COMMAND with no status (usage, config, checkpoint error) -> no rerun
#   the status file's directory cannot take a file (read-only) -> exit 3, no (further) attempt
# --delay S (default 1): the pause before rerunning an attempt that ended within 10 s of its
# start; one that ran longer is rerun at once.
# Each attempt gets MT_RESTART_ATTEMPT=1,2,... in its environment (counting on across Slurm
# requeues: SLURM_RESTART_COUNT * N + attempt). Once the status is final and
# COMMAND still runs after --grace seconds (mpirun can hang when a node's daemon died), COMMAND
# is ended; at once if every process it started has exited (Open MPI 4.1's mpirun, signalled,
# waits out its odls_base_sigkill_timeout before it reaps them). When no parameter server has
# written its status --start-timeout seconds (default 300; 0: no limit) after an attempt began,
# COMMAND is ended and the attempt counts as lost (rerun): Open MPI 4.1's mpirun was seen to hang
# at launch, with no rank started, about once in 60
# restarts. COMMAND runs in a session of its own; SIGTERM, SIGUSR1 and SIGINT to this script
# (or its process group) reach it as SIGUSR1, which Open MPI's mpirun and srun forward to every
# rank at once (a TERM or INT to mpirun reaches the ranks only 30 s later); the parameter server
# checkpoints and stops, and the loop ends with 75 (Slurm --requeue resubmits), or 130 after a
# SIGINT (a user's Ctrl-C: not restarted). A second SIGINT is passed on as SIGINT.
# --report DIR (or MT_REPORT_DIR; off by default: it takes a few seconds of matplotlib): when the
# loop ends, however it ends, `mpi_trainer report` turns COMMAND's --metrics file (every attempt's
# events) into DIR/index.html; the trainer is COMMAND's word ending in mpi_trainer. A report that
# cannot be written is logged and changes no exit code.
# Exit: 0 done; 75 attempts used up after a requeue/loss (rerun later to continue), or stopped
# on a notice; 130 interrupted; 3 the status directory cannot take a file; else the failing
# attempt's code.
set -uo pipefail

attempts=3 status="" delay=1 grace=30 start_timeout=300 report_dir=${MT_REPORT_DIR:-}
usage() { sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --attempts) attempts="${2:?}"; shift 2 ;;
    --status) status="${2:?}"; shift 2 ;;
    --delay) delay="${2:?}"; shift 2 ;;
    --grace) grace="${2:?}"; shift 2 ;;
    --start-timeout) start_timeout="${2:?}"; shift 2 ;;
    --report) report_dir="${2:?}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "restart_loop: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "restart_loop: no command after '--' (see --help)" >&2; exit 2; }
# The status file is JSON, read by Python: without it every ending would look like a lost server.
[[ -x /usr/bin/python3 ]] || { echo "restart_loop: needs /usr/bin/python3 to read the run's status file (Debian: apt-get install python3)" >&2; exit 2; }
[[ "$attempts" =~ ^[1-9][0-9]*$ ]] || { echo "restart_loop: --attempts must be a positive integer" >&2; exit 2; }
for v in delay grace start_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "restart_loop: --${v/_/-} must be a whole number of seconds, not '${!v}'" >&2; exit 2; }
done

# The trainer and its --metrics file in COMMAND, for --report.
trainer="" metrics=${MT_METRICS:-}
for ((i = 1; i <= $#; i++)); do
  case "${!i}" in
    *mpi_trainer) [[ -z $trainer ]] && trainer=${!i} ;;
    --metrics) j=$((i + 1)); metrics=${!j:-} ;;
    --metrics=*) metrics=${!i#--metrics=} ;;
  esac
done
[[ -z $trainer ]] && trainer=$(command -v mpi_trainer || true)

if [[ -z "$status" ]]; then
  # The status file the trainer writes: --status-file, else <--ckpt-dir>/run-status.json.
  args=("$@") ckpt="" sfile=""
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --ckpt-dir) ckpt="${args[i+1]:-}" ;;
      --ckpt-dir=*) ckpt="${args[i]#--ckpt-dir=}" ;;
      --status-file) sfile="${args[i+1]:-}" ;;
      --status-file=*) sfile="${args[i]#--status-file=}" ;;
    esac
  done
  ckpt="${ckpt:-${MT_CKPT_DIR:-}}" sfile="${sfile:-${MT_STATUS_FILE:-}}"
  if [[ -n "$sfile" ]]; then status="$sfile"
  elif [[ -n "$ckpt" ]]; then status="$ckpt/run-status.json"
  else echo "restart_loop: the command has no --ckpt-dir: there is nothing to restart from" >&2; exit 2
  fi
fi

log() { echo "restart_loop: $(date -u +%H:%M:%S) $*" >&2; }
field() {  # field NAME: a value of the status file ("" when missing)
  [[ -f "$status" ]] || return 0
  /usr/bin/python3 - "$status" "$1" <<'EOF' 2>/dev/null
import json, sys
try:
    v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception:
    v = None
print("" if v is None else v)
EOF
}
# end_command [--session]: SIGTERM to the command, then SIGKILL once it has ended or 5 s have
# passed: to the command if it still runs, with --session to its whole session whatever is left
# there (a launcher hung at start may leave processes behind it).
end_command() {
  kill -TERM "$child" 2>/dev/null
  local i
  for ((i = 0; i < 50; i++)); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
  if [[ ${1:-} == --session ]]; then kill -KILL -- -"$child" 2>/dev/null
  elif kill -0 "$child" 2>/dev/null; then kill -KILL "$child" 2>/dev/null; fi
}
# ranks_all_exited PID: PID has children and every one has exited (a zombie it has not reaped).
# Open MPI 4.1's mpirun, after a SIGTERM, sleeps its whole odls_base_sigkill_timeout (30 s, which
# launch/mpirun.sh sets for the checkpoint's sake) before it reaps ranks that ended at once: once
# the status is final and nothing it started runs, there is nothing left to wait for. A launcher
# whose ranks run elsewhere (ssh or a launch agent per node, srun's steps) keeps a live child
# while any remote part runs, so this never fires for it early.
ranks_all_exited() {
  local states
  states=$(ps -o stat= --ppid "$1" 2>/dev/null) || return 1
  [[ -n $states ]] && ! grep -qv '^Z' <<<"$states"
}

pmix_noise='PMIX ERROR: BAD-PARAM in file ../../../src/event/pmix_event_notification.c'
report() {  # --report: the run's report, whatever the exit (its own failure changes no exit code)
  [[ -n $report_dir ]] || return 0
  if [[ -z $metrics || -z $trainer ]]; then
    log "--report: no report (the command has no --metrics file, or no mpi_trainer was found in it)"
  elif "$trainer" report "$metrics" -o "$report_dir" >/dev/null; then
    log "report: $report_dir/index.html"
  else
    log "--report: $trainer report $metrics failed (see above)"
  fi
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/restart_loop.XXXXXX") || { echo "restart_loop: cannot create a temporary directory" >&2; exit 1; }
trap 'report; rm -rf "$tmp"' EXIT
child=0 stop_signal="" interrupts=0
# Every notice reaches the command as SIGUSR1: mpirun forwards it to every rank at once (a TERM
# or INT to mpirun reaches the ranks only after odls_base_sigkill_timeout; docs/fault-model.md),
# srun forwards it to every task. The parameter server checkpoints and stops. A second Ctrl-C is
# passed on as SIGINT (mpirun, srun: end the job now).
forward() {
  [[ -z $stop_signal || $1 != INT ]] && stop_signal="$1"
  [[ $child -gt 0 ]] || return 0
  if [[ $1 == INT ]] && ((interrupts++ > 0)); then kill -INT "$child" 2>/dev/null; return 0; fi
  kill -USR1 "$child" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward USR1' USR1
trap 'forward INT' INT

last_step=""
for ((attempt = 1; attempt <= attempts; attempt++)); do
  # The status file's directory (by default the checkpoint directory) must take files: a run that
  # cannot write there fails (exit 3 before its first step, or checkpoints failing) and cannot even
  # say so in its status; a rerun cannot help.
  sdir=$(dirname "$status")
  if ! { mkdir -p "$sdir" 2>/dev/null && probe=$(mktemp "$sdir/.restart_loop.XXXXXX" 2>/dev/null) && rm -f "$probe"; }; then
    log "error: cannot create a file in $sdir (read-only, or no permission): the run can write neither its" \
        "checkpoints nor its status there; not $( ((attempt > 1)) && echo retrying || echo starting) (make it writable, then rerun)"
    exit 3
  fi
  [[ -f "$status" ]] && mv -f "$status" "$status.prev"
  log "attempt $attempt/$attempts: $*"
  # The command's stderr passes a filter that drops one line: Open MPI 4.1's mpirun prints
  # "PMIX ERROR: BAD-PARAM in file ../../../src/event/pmix_event_notification.c at line 1033"
  # whenever a rank ends abnormally under --enable-recovery (its notice to the other ranks is
  # malformed for PMIx 4.2 and dropped; docs/fault-model.md, "PMIx events"). It says nothing about
  # the job. The filter ignores the job's signals (a Ctrl-C must not cut the log short) and ends
  # when the command's last writer closes the pipe; the loop waits for it.
  fifo="$tmp/stderr.$attempt"
  mkfifo "$fifo"
  (trap '' INT TERM USR1 USR2 HUP; exec grep --line-buffered -v -F "$pmix_noise" <"$fifo" >&2) &
  filter=$!
  # In a session of its own: a signal to this script's process group (a terminal's Ctrl-C, a
  # scheduler or a shutdown script signalling the group) reaches the command only as forwarded
  # above, never straight to mpirun.
  MT_RESTART_ATTEMPT=$((${SLURM_RESTART_COUNT:-0} * attempts + attempt)) setsid "$@" 2>"$fifo" &
  child=$!
  final_since="" began=$SECONDS
  while kill -0 "$child" 2>/dev/null; do
    state=$(field state)
    if [[ -z "$state" ]] && ((start_timeout > 0 && SECONDS - began > start_timeout)); then
      log "no parameter server wrote its status within --start-timeout ${start_timeout} s (the launcher hung?): ending the attempt"
      end_command --session
      break
    fi
    if [[ -n "$state" && "$state" != running ]]; then
      final_since=${final_since:-$SECONDS}
      if ranks_all_exited "$child"; then
        log "the status is final ($state) and every process the command started has exited, but it still runs" \
            "(Open MPI 4.1's mpirun waits out odls_base_sigkill_timeout after a SIGTERM): ending it"
        kill -KILL "$child" 2>/dev/null
        break
      fi
      if ((SECONDS - final_since > grace)); then
        log "the status is final ($state) but the command still runs after ${grace} s: ending it"
        end_command
        break
      fi
    fi
    # A second between looks at the status, in tenths that end when the command does: the next
    # attempt, or the loop's verdict, follows within 0.1 s instead of up to a second later. Each
    # tenth is waited for in the background (a trapped signal ends the wait at once), and never
    # killed: a sleep killed before it exec'd is a copy of this shell, with its traps.
    for ((tenth = 0; tenth < 10; tenth++)); do
      kill -0 "$child" 2>/dev/null || break
      sleep 0.1 & wait $! 2>/dev/null
    done
  done
  wait "$child"; rc=$?
  while [[ $rc -gt 128 ]] && kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done  # a trapped signal interrupted wait
  child=0
  # The filter ends once every process holding the command's stderr is gone (a rank that
  # outlives mpirun keeps it: not waited for past --grace).
  for ((t = 0; t < grace * 10; t++)); do kill -0 "$filter" 2>/dev/null || break; sleep 0.1; done
  kill "$filter" 2>/dev/null; wait "$filter" 2>/dev/null
  rm -f "$fifo"
  state=$(field state) code=$(field exit_code) step=$(field global_step)
  if [[ -n "$last_step" && -n "$step" && "$state" != running && $step -lt $last_step ]]; then
    log "error: global step went back from $last_step to $step"; exit 1
  fi
  [[ -n "$step" && "$state" != running ]] && last_step=$step
  case "$state" in
    done) log "attempt $attempt finished training at global step $step"; exit 0 ;;
    failed)
      err=$(field error)
      err=${err:-a checkpoint write failed}
      case "${code:-4}" in
        2|3|4)
          log "attempt $attempt failed with exit ${code:-4}${step:+ at global step $step}: $err; not retrying: a rerun cannot help (fix the cause, then rerun)"
          exit "${code:-4}" ;;
      esac
      why="the parameter server failed with exit $code: $err" ;;
    requeue) why="exit ${code:-75} ($(field stopped_by)) at global step $step" ;;
    interrupted)
      log "attempt $attempt was interrupted (SIGINT) at global step $step after a checkpoint: not restarting; rerun the same command to continue"
      exit 130 ;;
    *)
      if [[ $rc -eq 2 || $rc -eq 3 || $rc -eq 4 ]]; then
        log "attempt $attempt failed with exit $rc before training (usage, config or checkpoint error): not retrying"
        exit $rc
      fi
      why="the parameter server was lost (command exit $rc, status '${state:-missing}')" ;;
  esac
  if [[ $stop_signal == INT ]]; then
    log "interrupted (SIGINT, forwarded as SIGUSR1) after attempt $attempt: $why; not restarting: rerun the same command to continue"
    exit 130
  elif [[ -n "$stop_signal" ]]; then
    log "stopping on a notice (SIG$stop_signal, forwarded as SIGUSR1) after attempt $attempt: $why"
    exit 75
  fi
  log "attempt $attempt ended: $why"
  # An attempt that trained a while (a lost parameter server, a notice) is rerun at once: every
  # second here is a second the job does not train (bench/faults/goodput.sh). One that ended within
  # 10 s of its start (a launch that fails at once) waits --delay first.
  if ((attempt < attempts && SECONDS - began < 10)); then sleep "$delay"; fi
done
log "gave up after $attempts attempt(s); rerun to continue from the newest checkpoint"
exit 75
