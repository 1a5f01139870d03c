#!/usr/bin/env bash
# Chaos: real processes, real signals and real storage faults, nothing mocked (issue 17). Each run
# is 1 PS + 3 workers (resnet8, generated data, 200 global steps, a checkpoint every 20) under
# launch/restart_loop.sh with one fault, at a random moment:
#   worker-kill    1 or 2 workers SIGKILL themselves at random global steps
#   ps-kill        the PS SIGKILLs itself at a random global step
#   ps-kill-mid    the PS is SIGKILLed in the middle of writing a random checkpoint (a torn write)
#   ps-kill-rep    the PS is SIGKILLed as a random replica to its standby leaves (mid-replication)
#   ps-shard-kill  --num-ps 2 (1 worker more): shard 0 or 1 SIGKILLs itself at a random global step;
#                  in the plan under ULFM (--kill-runs N of them), else only with --only (each
#                  run then waits ~60 s for the lost shard before the restart)
#   takeover-kill  (ULFM) the PS SIGKILLs itself at a random step and a random worker inside the
#                  takeover that follows (rank=R@takeover=1: the communicator revoked, the
#                  survivors' agreement ahead): a second failure inside the recovery; in the plan
#                  under ULFM (--other-runs M of them)
#   ps-term-mid    SIGTERM reaches the PS in the middle of writing a random checkpoint
#   hung-worker    a random worker is stopped (SIGSTOP) at a random step and continued 3 s later:
#                  dropped after --failure-timeout, it wakes, says so and exits 0; the job goes on
#   hung-ps        the PS is stopped at a random step and never continued: the standby ends the
#                  job (MPI_Abort) once its replica is written, the restart resumes; under ULFM a
#                  worker on its node SIGKILLs it and the standby takes it over in the job
#   hung-ps-remote (ULFM) hung-ps with no worker on the PS's node (MT_PS_SHM=0: none can see its
#                  process state): a worker reports it failed through the runtime (PMIx), the
#                  standby takes it over in the job; the runtime ends the stopped process at the
#                  end, and it exits 11 writing nothing (the epoch fence); in the plan under ULFM
#                  (--other-runs M of them)
#   notice-one     one worker gets SIGTERM at a random step (--revoke ...:TERM): it leaves
#   notice-all     every process of the job gets SIGTERM at a random step (a preemption of all):
#                  the PS checkpoints and exits 75, the restart resumes from that checkpoint
#   disk-full      the checkpoint directory (a tmpfs) has room for 1-5 checkpoints: the next writes
#                  fail (ENOSPC), training goes on, exit 4; space is freed and the job rerun
#   read-only      the directory is read-only at the start (the restart loop exits 3 before an
#                  attempt), then turns read-only after a random checkpoint (EROFS: training goes
#                  on; the trainer ends with 4 and cannot write its status, so the loop exits 3
#                  before its next attempt); made writable and rerun
#   fsync-fail     fsync of 1-3 checkpoint files from a random one on fails with EIO (an
#                  LD_PRELOAD shim, bench/faults/fsync_fault.cpp): training goes on, exit 4; rerun
#   truncated      the PS is lost at a random step; its newest checkpoint is then truncated,
#   bit-flipped    or has one bit flipped in a random tensor's data,
#   wrong-version  or claims another format version; rerun
# After each run: every exit code is the documented one (the restart loop's: 0 finished; 4 a
# checkpoint failed; 3 the directory is not writable), the job finished when rerun with
# --resume auto (summary at the last step), each attempt resumed from the newest checkpoint that
# verifies (the global step never goes back past one that was durable; a damaged one is skipped
# and reported), every checkpoint left verifies (but the one damaged on purpose), no temporary
# file is left. Work lost per PS kill: the last step the PS reported before it was lost minus
# the step the next attempt resumed from. With a ULFM build (`mpi_trainer --version` says ULFM)
# a PS kill (ps-kill, ps-kill-mid, ps-kill-rep, ps-shard-kill) must not restart the job at all: the
# standby takes the parameter server (or the lost shard) over in the same attempt (a `ps_takeover` event, docs/fault-model.md), the
# global step never goes back, and the work lost is the takeover's lost updates.
# Every run also records its whole history (--push-log: each push the parameter servers made, each
# one the workers were told) and bench/faults/history_check.py checks it: no acknowledged push
# lost (but those a restart rolled back), none applied twice, one push per step and epoch,
# checkpoints in step order from the newest epoch only; a violation fails the run.
# The conformance report (bench/faults/chaos_report.py; schema in docs/fault-model.md, "The conformance
# report"): one JSON document per suite run with every run's record and, per scenario, runs,
# finished, detection time, time to the first applied step, updates lost, checkpoints lost
# (published, among the newest --ckpt-keep, and missing or failing to verify at the end) and
# resumes behind a durable checkpoint; its table is printed at the end.
#
#   bench/faults/chaos.sh [--kill-runs N] [--other-runs M] [--only S1,S2] [--sync|--async] [--seed S] [--trainer PATH] [--shim PATH]
#                  [--report FILE]
#   --kill-runs N   N worker-kill runs and N PS-kill runs (ps-kill-mid, ps-kill-rep, ps-kill in turn),
#                   under ULFM N ps-shard-kill runs too; default 20
#   --other-runs M  M runs of each other scenario; default 3 (CTest's chaos_short: 2 and 1)
#   --only LIST     only these scenarios (comma-separated)
#   --sync          train with --ckpt-sync on (training waits for each checkpoint to be durable;
#                   default: the trainer's --ckpt-sync auto, a bounded wait)
#   --async         train with --ckpt-sync off (the write overlaps training)
#   --shim PATH     the fsync shim (default: bench/libmt_fsync_fault.so beside the trainer's build)
#   --report FILE   the conformance report (default: bench/results/chaos/report-<UTC time>.json)
# disk-full and read-only need to mount a tmpfs (root); fsync-fail needs the shim. Where they
# cannot run they are reported as skipped, never as passed. Prints one line per run, the
# counts per scenario and the figures: runs finished / runs, work lost per PS kill (median, max).
# Exit 0 when every run that ran passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
bench_opt --kill-runs kill_runs 20
bench_opt --other-runs other_runs 3
bench_opt --only only ""
bench_flag --sync sync "--ckpt-sync on"
bench_flag --async sync "--ckpt-sync off"
bench_opt --seed seed 1
bench_opt --trainer trainer "$here/../../build/release/mpi_trainer"
bench_opt --shim shim ""
bench_opt --report report ""
bench_parse "[--kill-runs N] [--other-runs M] [--only S1,S2] [--sync|--async] [--seed S] [--trainer PATH] [--shim PATH] [--report FILE]" "$@"
[[ -x $trainer ]] || { echo "chaos.sh: no mpi_trainer at $trainer (launch/build.sh release)" >&2; exit 2; }
trainer=$(cd "$(dirname "$trainer")" && pwd)/$(basename "$trainer")
ulfm=0
[[ $("$trainer" --version 2>/dev/null) == *"failure detection: ULFM"* ]] && ulfm=1
[[ -n $shim ]] || shim="$(dirname "$trainer")/bench/libmt_fsync_fault.so"
for n in "$kill_runs" "$other_runs"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "chaos.sh: run counts are whole numbers" >&2; exit 2; }
done
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
[[ $(id -u) == 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
ck="$dir/ck"
unmount() { if mountpoint -q "$ck" 2>/dev/null; then umount "$ck" 2>/dev/null || umount -l "$ck" 2>/dev/null || true; fi; }
trap 'pkill -9 -f "mpi_trainer train .*$dir/" 2>/dev/null || true; [[ -n ${watcher:-} ]] && kill "$watcher" 2>/dev/null; unmount; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 128 --seed 3 >/dev/null
steps=200 interval=20
RANDOM=$seed

can_mount=0
mkdir -p "$ck"
if mount -t tmpfs -o size=1m tmpfs "$ck" 2>/dev/null; then can_mount=1; umount "$ck"; fi

plan=()
for ((i = 0; i < kill_runs; i++)); do plan+=(worker-kill); done
for ((i = 0; i < kill_runs; i++)); do
  case $((i % 3)) in 0) plan+=(ps-kill-mid) ;; 1) plan+=(ps-kill-rep) ;; 2) plan+=(ps-kill) ;; esac
done
if ((ulfm)) || [[ ,$only, == *,ps-shard-kill,* ]]; then
  for ((i = 0; i < kill_runs; i++)); do plan+=(ps-shard-kill); done
fi
if ((ulfm)); then
  for ((i = 0; i < other_runs; i++)); do plan+=(takeover-kill hung-ps-remote); done
fi
for s in ps-term-mid hung-worker hung-ps notice-one notice-all disk-full read-only fsync-fail truncated bit-flipped wrong-version; do
  for ((i = 0; i < other_runs; i++)); do plan+=("$s"); done
done
if [[ -n $only ]]; then
  kept=()
  for s in "${plan[@]}"; do [[ ,$only, == *,$s,* ]] && kept+=("$s"); done
  plan=("${kept[@]}")
fi

# The job, as launch/mpirun.sh would run it; FIRST_ARGS and FIRST_ENV (mpirun -x ...) apply to the
# restart loop's first attempt of a phase only.
source "$here/../../launch/mpi_lib.sh"
mt_mpirun_for "$trainer" --loopback || exit 1
mpirun_cmd=$(printf '%q ' "${MT_MPIRUN[@]}")
write_cmd() {  # write_cmd FIRST_ARGS FIRST_ENV [ARGS NP]: ARGS for every attempt, NP processes (4)
  cat >"$dir/cmd.sh" <<EOS
#!/usr/bin/env bash
extra=() env=()
if [[ \$MT_RESTART_ATTEMPT == 1 ]]; then extra=($1); env=($2); fi
exec $mpirun_cmd -np ${4:-4} --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT "\${env[@]}" \\
  "$trainer" train --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --train-steps $steps \\
  --ckpt-every-steps $interval --ckpt-keep $keep --log-every-steps 1 --failure-timeout 1 --data "$dir/data" \\
  --ckpt-dir "$ck" --metrics "$dir/m.jsonl" --push-log "$dir/push.csv" --quiet --seed $run $sync ${3:-} "\${extra[@]}"
EOS
  chmod +x "$dir/cmd.sh"
}

# The size of one checkpoint of this job, measured once (how many model-sized arrays it holds
# follows the update policy: dana's momentum per worker slot, gap's mean steps).
ckpt_size=""
measure_ckpt_size() {
  [[ -n $ckpt_size ]] && return 0
  local probe=$dir/size-probe
  rm -rf "$probe" && mkdir -p "$probe"
  $mpirun_cmd -np 4 --oversubscribe -x OMP_WAIT_POLICY=passive "$trainer" train --model resnet8 --batch-size 32 \
    --lr-schedule constant --lr 0.05 --train-steps "$interval" --ckpt-every-steps "$interval" --failure-timeout 1 \
    --data "$dir/data" --ckpt-dir "$probe" --quiet --seed 1 >"$probe.txt" 2>&1 ||
    { echo "chaos: the checkpoint-size probe failed:" >&2; cat "$probe.txt" >&2; exit 1; }
  ckpt_size=$(stat -c %s "$probe/$(printf 'ckpt-%010d.h5' "$interval")")
  rm -rf "$probe" "$probe.txt"
}

# One phase: the restart loop with ATTEMPTS attempts; rc and the number of attempts it made.
phase() {  # phase NAME ATTEMPTS
  echo "--- $1" >>"$dir/loop.txt"
  rc=0
  timeout 300 "$here/../../launch/restart_loop.sh" --attempts "$2" --delay 0 --start-timeout 60 --status "$ck/run-status.json" \
    -- "$dir/cmd.sh" >"$dir/phase.txt" 2>&1 || rc=$?
  cat "$dir/phase.txt" >>"$dir/loop.txt"
  made=$(grep -c "attempt [0-9]*/" "$dir/phase.txt" || true)
}
expect() {  # expect WHAT RC [ATTEMPTS]: sets why on the first mismatch
  [[ -n $why ]] && return 0
  if [[ $rc != "$2" ]]; then why="$1: restart loop exit $rc, expected $2"
  elif [[ -n ${3:-} && $made != "$3" ]]; then why="$1: $made attempt(s), expected $3"
  fi
}
expect_line() {  # expect_line PATTERN WHY: sets why when no line of the phases' output matches
  [[ -n $why ]] || grep -q -- "$1" "$dir/loop.txt" || why=$2
}
# The newest checkpoint file (by step) in the directory, and whether it verifies.
newest() { ls "$ck" 2>/dev/null | grep -E '^ckpt-[0-9]+\.h5$' | sort | tail -1; }

# A phase in the background, for a fault sent from outside while it trains (phase_wait: its rc
# and attempts, as phase sets them).
phase_bg() { (phase "$@"; echo "$rc $made" >"$dir/phase.rc") & phase_pid=$!; }
phase_wait() { wait "$phase_pid" || true; read -r rc made <"$dir/phase.rc"; }
# rank_pid R: the pid of the job's rank R (tests/rank_pid.sh).
source "$here/../../tests/rank_pid.sh"
# Waits until the job has reached global step N (false after 120 s, or when the phase ended).
wait_step() {
  local i
  for ((i = 0; i < 1200; i++)); do
    [[ -f $dir/m.jsonl ]] && (($(awk -f "$here/../../tests/max_step.awk" "$dir/m.jsonl") >= $1)) && return 0
    kill -0 "$phase_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# Signals rank R (0: the PS) of the running phase when it reaches step AT: sets fault_unix, or why.
signal_at() {  # signal_at SIGNAL AT RANK...
  local sig=$1 at=$2 pids="" r p; shift 2
  if ! wait_step "$at"; then why="$scenario: the job did not reach step $at"; return 0; fi
  for r in "$@"; do
    p=$(rank_pid "$r")
    [[ -n $p ]] || { why="$scenario: no process for rank $r"; return 0; }
    pids+=" $p"
  done
  fault_unix=$(date +%s.%N)
  kill -"$sig" $pids
  stopped_pids=$pids
}
# One phase with a fault sent from outside: SIGNAL to RANKS at step AT, continued (SIGCONT)
# RESUME seconds later unless RESUME is "-".
signal_phase() {  # signal_phase NAME SIGNAL AT RESUME RANK...   (FIRST_ENV from $phase_env)
  write_cmd "" "${phase_env:-}"
  phase_bg "$1" 4
  signal_at "$2" "$3" "${@:5}"
  if [[ $4 != - ]]; then
    sleep "$4"
    [[ -z $stopped_pids ]] || kill -CONT $stopped_pids 2>/dev/null || true
  fi
  phase_wait
}

# Damages FILE as SCENARIO says; prints how.
damage() {  # damage SCENARIO FILE
  /usr/bin/python3 - "$1" "$2" "$RANDOM" <<'PY'
import os, random, sys
import h5py
scenario, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
if scenario == "truncated":
    size = os.path.getsize(path)
    keep = rng.randrange(0, size)
    os.truncate(path, keep)
    print(f"truncated to {keep} of {size} bytes")
elif scenario == "bit-flipped":
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        name = rng.choice(names)
        ds = f[name]
        offset = ds.id.get_chunk_info(0).byte_offset if ds.chunks else ds.id.get_offset()
        size = ds.id.get_storage_size()
    at = offset + rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ (1 << rng.randrange(8))]))
    print(f"one bit flipped at byte {at} (in {name})")
else:
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 2
    print("format_version set to 2")
PY
}

passed=0 skipped=0 ran=0 run=0
: >"$dir/lost.txt"
: >"$dir/runs.jsonl"
declare -A n_pass n_run n_skip
for scenario in "${plan[@]}"; do
  run=$((run + 1))
  why="" note="" keep=3 lost="" damaged="" fault_unix="" fault_rank=-1 stopped_pids=""
  rm -rf "$dir/m.jsonl" "$dir/loop.txt" "$dir/push.csv" "$dir/push.csv.acks" "$dir/history.json"
  unmount
  rm -rf "$ck"
  mkdir -p "$ck"
  if [[ $scenario == disk-full || $scenario == read-only ]] && ((!can_mount)); then
    echo "run $run $scenario: skipped (cannot mount a tmpfs here: needs root)"
    skipped=$((skipped + 1)) n_skip[$scenario]=$((${n_skip[$scenario]:-0} + 1))
    /usr/bin/python3 "$here/chaos_report.py" run --metrics "$dir/m.jsonl" --scenario "$scenario" --out "$dir/runs.jsonl" \
      --run "$run" --note "cannot run here" --skipped
    continue
  fi
  if [[ $scenario == fsync-fail && ! -f $shim ]]; then
    echo "run $run $scenario: skipped (no fsync shim at $shim)"
    skipped=$((skipped + 1)) n_skip[$scenario]=$((${n_skip[$scenario]:-0} + 1))
    /usr/bin/python3 "$here/chaos_report.py" run --metrics "$dir/m.jsonl" --scenario "$scenario" --out "$dir/runs.jsonl" \
      --run "$run" --note "cannot run here" --skipped
    continue
  fi
  ran=$((ran + 1)) n_run[$scenario]=$((${n_run[$scenario]:-0} + 1))
  t0=$SECONDS
  case $scenario in
    worker-kill|ps-kill|ps-kill-mid|ps-kill-rep|ps-shard-kill|takeover-kill|ps-term-mid|notice-one)
      shards="" np=4
      case $scenario in
        worker-kill)
          revoke="rank=$((1 + RANDOM % 3))@step=$((10 + RANDOM % 150))"
          ((RANDOM % 2)) && revoke+=",rank=$((1 + RANDOM % 3))@step=$((10 + RANDOM % 150))" ;;
        ps-kill) revoke="rank=0@step=$((25 + RANDOM % 150))" ;;
        ps-kill-mid) revoke="rank=0@ckpt=$((1 + RANDOM % 8))" ;;
        ps-kill-rep) revoke="rank=0@replica=$((2 + RANDOM % 16))" ;;
        ps-term-mid) revoke="rank=0@ckpt=$((1 + RANDOM % 8)):TERM" ;;
        ps-shard-kill) revoke="rank=$((RANDOM % 2))@step=$((25 + RANDOM % 150))" shards="--num-ps 2" np=5 ;;
        takeover-kill) revoke="rank=0@step=$((25 + RANDOM % 150)),rank=$((1 + RANDOM % 3))@takeover=1" ;;
        notice-one) revoke="rank=$((1 + RANDOM % 3))@step=$((10 + RANDOM % 150)):TERM" ;;
      esac
      note=$revoke
      write_cmd "--revoke $revoke" "" "$shards" $np
      phase "$scenario ($revoke)" 4
      expect "$scenario" 0
      [[ $scenario != notice-one ]] || expect "$scenario" 0 1 ;;
    hung-worker)
      fault_rank=$((1 + RANDOM % 3)) at=$((30 + RANDOM % 120))
      note="worker rank $fault_rank stopped at step $at for 3 s"
      signal_phase "hung worker" STOP "$at" 3 "$fault_rank"
      expect "hung worker" 0 1
      expect_line "worker rank $fault_rank: this process was suspended for" \
        "hung worker: the woken worker did not say that it was dropped" ;;
    hung-ps)
      at=$((30 + RANDOM % 120))
      note="the PS stopped at step $at, never continued"
      signal_phase "hung PS" STOP "$at" - 0
      if ((ulfm)); then  # a worker on its node ends it; the standby takes it over in the job
        expect "hung PS" 0 1
        expect_line "is not reported dead: hung, SIGKILL to it" "hung PS: no worker on its node ended it"
      else
        expect "hung PS" 0 2
        expect_line "the parameter server is silent but not known to be dead" "hung PS: no worker ended the job"
      fi ;;
    hung-ps-remote)
      at=$((30 + RANDOM % 120))
      note="the PS stopped at step $at, never continued, no worker on its node"
      phase_env="-x MT_PS_SHM=0" signal_phase "hung PS (remote)" STOP "$at" - 0
      expect "hung PS (remote)" 0 1
      expect_line "is not reported dead: hung, reported failed to the runtime" "hung PS (remote): no worker reported it"
      # Fenced: nothing written by the former PS once woken at the end (exit 11, or killed first).
      [[ -n $why || ( $(grep -c '"event":"summary"' "$dir/m.jsonl") == 1 && $(cat "$ck/ps-epoch") == 2 ) ]] ||
        why="hung PS (remote): the former PS wrote after its successor took over (or the epoch is not 2)" ;;
    notice-all)
      at=$((30 + RANDOM % 120))
      note="SIGTERM to every process at step $at"
      signal_phase "notice to all" TERM "$at" - 0 1 2 3
      expect "notice to all" 0 2 ;;
    disk-full)
      # Room for FIT checkpoints beside the small files; keep them all. Once the filler is gone
      # the tmpfs holds every checkpoint of the run, with 2 MiB to spare.
      measure_ckpt_size
      keep=0 fit=$((1 + RANDOM % 5))
      note="room for $fit checkpoint(s) of $ckpt_size bytes"
      room=$(((steps / interval + 1) * (ckpt_size + 4096) + 2 * 1024 * 1024))
      mount -t tmpfs -o size=$room tmpfs "$ck"
      write_cmd "" ""
      filler=$((room - fit * (ckpt_size + 4096) - 64 * 1024))
      head -c "$filler" /dev/zero >"$ck/filler"
      phase "disk full" 4
      expect "disk full" 4 1
      expect_line "No space left on device" "disk full: no line naming ENOSPC"
      rm -f "$ck/filler"
      phase "space freed, rerun" 4
      expect "rerun after freeing space" 0 1 ;;
    read-only)
      after=$((1 + RANDOM % 6))
      note="read-only at the start, then after checkpoint $after"
      mount -t tmpfs -o size=16m tmpfs "$ck"
      mount -o remount,ro "$ck"
      write_cmd "" ""
      phase "read-only from the start" 4
      expect "read-only at the start" 3 0
      expect_line "cannot create a file in $ck" "read-only at the start: no line naming the directory"
      mount -o remount,rw "$ck"
      rm -f "$dir/m.jsonl"
      # Turns read-only once checkpoint AFTER is published.
      target=$(printf 'ckpt-%010d.h5' $((after * interval)))
      # (A remount is refused while a file there is open for writing: tried until it takes.)
      (while [[ ! -f $ck/$target ]]; do sleep 0.01; done
       until mount -o remount,ro "$ck" 2>/dev/null; do sleep 0.002; done) &
      watcher=$!
      phase "read-only after checkpoint $after" 4
      kill "$watcher" 2>/dev/null || true
      wait "$watcher" 2>/dev/null || true
      watcher=""
      expect "read-only mid-run" 3 1
      expect_line "Read-only file system" "read-only mid-run: no line naming EROFS"
      mount -o remount,rw "$ck"
      phase "writable again, rerun" 4
      expect "rerun after making it writable" 0 1 ;;
    fsync-fail)
      first=$((1 + RANDOM % 6)) count=$((1 + RANDOM % 3))
      note="fsync of checkpoint files $first..$((first + count - 1)) fails"
      write_cmd "" "-x LD_PRELOAD=$shim -x MT_FSYNC_FAULT=$first:$count"
      phase "fsync fails" 4
      expect "fsync fails" 4 1
      expect_line "fsync: Input/output error" "fsync fails: no line naming EIO"
      write_cmd "" ""
      phase "rerun" 4
      expect "rerun" 0 1 ;;
    truncated|bit-flipped|wrong-version)
      lose=$((50 + RANDOM % 120))
      write_cmd "--revoke rank=0@step=$lose" ""
      phase "PS lost at step $lose" 1
      expect "PS lost" 75 1
      file=$(newest)
      if [[ -z $why && -z $file ]]; then why="no checkpoint before step $lose"; fi
      if [[ -z $why ]]; then
        damaged=$((10#$(sed "s/^ckpt-0*\([0-9][0-9]*\)\.h5$/\1/" <<<"$file")))
        note="PS lost at step $lose; $file $(damage "$scenario" "$ck/$file")"
        ! "$trainer" ckpt verify "$ck/$file" >/dev/null 2>&1 || why="ckpt verify passes the damaged $file"
        write_cmd "" ""
        phase "rerun" 4
        expect "rerun" 0 1
      fi ;;
  esac
  if [[ -z $why ]] && ls "$ck" | grep -q '\.tmp$'; then why="a temporary file was left: $(ls "$ck" | grep '\.tmp$')"; fi
  # The checkpoints there at the end that verify (but the one damaged on purpose).
  present=""
  for f in $(ls "$ck" 2>/dev/null | grep -E '^ckpt-[0-9]+\.h5$'); do
    [[ -n $damaged && $f == $(printf 'ckpt-%010d.h5' "$damaged") ]] && continue
    if "$trainer" ckpt verify "$ck/$f" >"$dir/verify.txt" 2>&1; then present+=" $f"
    elif [[ -z $why ]]; then why="ckpt verify: $(head -1 "$dir/verify.txt")"
    fi
  done
  attempts=$(grep -c "attempt [0-9]*/" "$dir/loop.txt" || true)
  # The whole history (every push the parameter servers made, every one the workers were told):
  # bench/faults/history_check.py; a violation fails the run (chaos_report.py reads its verdict).
  history_why="" hrc=0
  /usr/bin/python3 "$here/history_check.py" "$dir/push.csv" --metrics "$dir/m.jsonl" --json "$dir/history.json" \
    >"$dir/history.txt" 2>&1 || hrc=$?
  ((hrc != 2)) || history_why=$(tail -1 "$dir/history.txt")
  failed=$(/usr/bin/python3 "$here/chaos_report.py" run --metrics "$dir/m.jsonl" --log "$dir/loop.txt" \
    --history "$dir/history.json" --history-why "$history_why" \
    --scenario "$scenario" --out "$dir/runs.jsonl" --run "$run" --note "$note" --steps "$steps" --keep "$keep" \
    ${damaged:+--damaged "$damaged"} --ulfm "$ulfm" --rank "$fault_rank" ${fault_unix:+--fault-unix "$fault_unix"} \
    --present "$present" --seconds $((SECONDS - t0)) --attempts "$attempts" --why "$why" 2>&1) ||
    failed="chaos_report.py failed: $failed"
  [[ -n $why ]] || why=$failed
  lost=$(/usr/bin/python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][-1]; print("" if r["updates_lost"] is None else r["updates_lost"])' "$dir/runs.jsonl" 2>/dev/null || true)
  [[ -z $lost || ! $scenario =~ ^ps-(kill|kill-mid|kill-rep|shard-kill)$ ]] || echo "$lost" >>"$dir/lost.txt"
  if [[ -z $why ]]; then
    passed=$((passed + 1)) n_pass[$scenario]=$((${n_pass[$scenario]:-0} + 1))
    echo "run $run $scenario ($note): finished in $((SECONDS - t0)) s, $attempts attempt(s)${lost:+, lost $lost step(s)}; $(tail -1 "$dir/history.txt")"
  else
    echo "run $run $scenario ($note): FAILED: $why"
    tail -25 "$dir/loop.txt"
  fi
done
for s in worker-kill ps-kill ps-kill-mid ps-kill-rep ps-shard-kill takeover-kill ps-term-mid hung-worker hung-ps hung-ps-remote notice-one notice-all \
  disk-full read-only fsync-fail truncated bit-flipped wrong-version; do
  [[ -n ${n_run[$s]:-}${n_skip[$s]:-} ]] || continue
  echo "  $s: ${n_pass[$s]:-0}/${n_run[$s]:-0} finished${n_skip[$s]:+, ${n_skip[$s]} skipped}"
done
/usr/bin/python3 - "$dir/lost.txt" "$interval" "$passed" "$ran" "$skipped" <<'PY'
import statistics, sys
lost = [int(x) for line in open(sys.argv[1]) for x in line.split()]
interval, passed, ran, skipped = map(int, sys.argv[2:6])
print(f"chaos: {passed}/{ran} runs finished" + (f" ({skipped} skipped: see above)" if skipped else ""))
if lost:
    print(f"work lost per PS kill: median {statistics.median(lost):g} steps, max {max(lost)} "
          f"(checkpoint interval {interval}; {len(lost)} kills)")
PY
[[ -n $report ]] || report="$here/../results/chaos/report-$(date -u +%Y%m%dT%H%M%SZ).json"
mkdir -p "$(dirname "$report")"
job=$(printf '{"processes": "1 PS + 3 workers (1 PS + 4 for ps-shard-kill: 2 shards)", "model": "resnet8", "batch_size": 32, "steps": %d, "ckpt_every_steps": %d, "failure_timeout_seconds": 1, "seed": %d, "ckpt_sync": "%s", "ulfm": %s}' \
  "$steps" "$interval" "$seed" "$([[ -n $sync ]] && echo "${sync#--ckpt-sync }" || echo auto)" "$( ((ulfm)) && echo true || echo false)")
/usr/bin/python3 "$here/chaos_report.py" report --runs "$dir/runs.jsonl" --out "$report" \
  --version "$("$trainer" --version | tr '\n' ';' | sed 's/;$//')" --job "$job"
((passed == ran))
