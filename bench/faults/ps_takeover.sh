#!/usr/bin/env bash
# The parameter server's takeover inside the job (ULFM, docs/fault-model.md, "Takeover under
# ULFM") against today's full restart, measured side by side (issue 21): K PS kills, each at a
# random step of 300 (resnet8, 3 workers, a standby, a replica every --replica-interval updates, a
# periodic checkpoint every 100 steps), alternating
#   takeover  the ULFM build (build/ulfm, launch/setup.sh --mpi ulfm): the survivors shrink the
#             communicator and the standby goes on as the parameter server, same job;
#   restart   the default build (Open MPI 4.1, heartbeats): the standby writes its replica, every
#             process exits, launch/restart_loop.sh starts the job again and it resumes from it.
# Per kill: updates lost, and the seconds from the kill (the PS's own line: "SIGKILL to itself at
# unix T") to the first update applied by the parameter server that goes on (the ps_takeover
# event; after a restart, its first_step event). Goals: takeover < 1 s, lost <= the interval.
# The accuracy of the runs with and without a kill is printed too (same seed, generated data).
# --num-ps S: S shards, a random one of them killed each time (under ULFM the standby takes that
# shard over, the others following; the default build waits ~60 s for the lost shard, then restarts).
# --workers W: W workers (5 processes on the 2 cores: --workers 4).
# Then the push journal's cost (--push-journal, docs/fault-model.md "Zero-loss takeover"): R runs
# of 300 steps without a kill each way, journal on and off alternated (ULFM build): images/s, and
# the most bytes and pushes a worker's journal held (its own line at the end of each run); R 0: none.
#   bench/faults/ps_takeover.sh [--kills 10] [--replica-interval 10] [--num-ps 1] [--workers 3] [--throughput-runs 5]
#                        [--ulfm-trainer PATH] [--trainer PATH]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --kills kills 10
bench_opt --replica-interval interval 10
bench_opt --num-ps shards 1
bench_opt --workers workers 3
bench_opt --throughput-runs tp_runs 5
bench_opt --ulfm-trainer ulfm_trainer build/ulfm/mpi_trainer
bench_opt --trainer trainer_arg ""
bench_parse "[--kills K] [--replica-interval N] [--num-ps S] [--workers W] [--throughput-runs R] [--ulfm-trainer PATH] [--trainer PATH]" "$@"
bench_env
trainer=${trainer_arg:-$trainer}
source launch/mpi_lib.sh
[[ -x $ulfm_trainer ]] || { echo "no ULFM build at $ulfm_trainer: launch/setup.sh --mpi ulfm, then cmake --preset ulfm && cmake --build --preset ulfm" >&2; exit 1; }
mt_mpirun_for "$ulfm_trainer" --loopback && ulfm_mpirun=("${MT_MPIRUN[@]}")
((MT_MPI_ULFM)) || { echo "$ulfm_trainer is not a ULFM build (mpi_trainer --version)" >&2; exit 1; }
mt_mpirun_for "$trainer" --loopback && plain_mpirun=("${MT_MPIRUN[@]}")
"$trainer" gen-data "$dir/data" --train 1024 --test 256 --seed 1 >/dev/null

# job.sh MODE AT VICTIM [FLAGS]: the job's command (AT 0: no kill; VICTIM: the shard's rank), for the restart loop.
write_job() {
  local mode=$1 at=$2 victim=$3 bin=$trainer
  shift 3
  local -a run=("${plain_mpirun[@]}")
  [[ $mode == takeover ]] && bin=$ulfm_trainer run=("${ulfm_mpirun[@]}")
  cat > "$dir/job.sh" <<JOB
#!/usr/bin/env bash
extra=()
[[ \$MT_RESTART_ATTEMPT == 1 && $at -gt 0 ]] && extra=(--revoke rank=$victim@step=$at:KILL)
exec ${run[*]} -np $((workers + shards)) --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT "$bin" train \
  --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off --data "$dir/data" --train-steps 300 \
  --ckpt-dir "$dir/ck" --ckpt-every-steps 100 --ps-standby 1 --replica-interval $interval --failure-timeout 1 \
  --metrics "$dir/k.jsonl" --seed 1 --num-ps $shards ${*:---quiet} "\${extra[@]}"
JOB
  chmod +x "$dir/job.sh"
}
: > "$dir/kills.jsonl"
((kills > 0)) || echo "--kills 0: the journal's cost alone"
for ((k = 0; kills > 0 && k < 2 * kills + 2; ++k)); do
  mode=$([[ $((k % 2)) == 0 ]] && echo takeover || echo restart)
  at=$((60 + RANDOM % 180))
  ((k >= 2 * kills)) && at=0  # the last two: no kill, for the accuracy
  rm -rf "$dir/ck" "$dir/k.jsonl"
  write_job "$mode" "$at" $((RANDOM % shards))
  t0=$SECONDS
  launch/restart_loop.sh --attempts 3 --delay 0 --status "$dir/ck/run-status.json" -- "$dir/job.sh" > "$dir/loop.txt" 2>&1 ||
    { cat "$dir/loop.txt"; exit 1; }
  killed=$(grep -o "SIGKILL to itself at unix [0-9.]*" "$dir/loop.txt" | grep -o "[0-9.]*$" || true)
  ((at == 0)) || [[ -n $killed ]] || { echo "the parameter server was not killed"; cat "$dir/loop.txt"; exit 1; }
  /usr/bin/python3 - "$dir/k.jsonl" "$mode" "$at" "${killed:-0}" "$((SECONDS - t0))" >> "$dir/kills.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
mode, at, killed, wall = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
s = events[-1]
assert s["event"] == "summary" and s["global_step"] == 300 and s["exit_code"] == 0, s
out = {"mode": mode, "killed_at": at, "accuracy": s["test_accuracy"], "wall_s": wall}
if at:
    if mode == "takeover":
        t = [e for e in events if e["event"] == "ps_takeover"]
        assert len(t) == 1 and s["attempts"] == 1, (t, s["attempts"])
        out.update(lost=t[0]["lost_updates"], first_step_s=t[0]["unix_time"] - killed,
                   replayed=t[0].get("replayed", 0), unacknowledged=t[0].get("replayed_unacknowledged", 0),
                   replay_s=t[0].get("replay_seconds", 0))
    else:
        first = [e for e in events if e["event"] == "first_step"][-1]
        # (with several shards the kill step is the killed shard's count; the others may be a few
        # steps further, so the resume can be past it: nothing lost then)
        out.update(lost=max(0, at - s["resumed_from_step"]), first_step_s=first["unix_time"] - killed)
print(json.dumps(out))
PY
done
((kills == 0)) || /usr/bin/python3 - "$dir/kills.jsonl" "$interval" "$shards" "$workers" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
killed = [r for r in runs if r["killed_at"]]
shards = int(sys.argv[3])
def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.9 * (len(xs) - 1)))]
print(f"{'PS' if shards == 1 else f'a random one of {shards} PS shards'} SIGKILLed at a random step of 300, "
      f"{len(killed) // 2} kills each way, alternated (resnet8, {sys.argv[4]} workers, "
      f"one standby, replica every {sys.argv[2]} updates, checkpoint every 100 steps)")
for mode, name in (("takeover", "takeover (ULFM)   "), ("restart", "full restart (4.1)")):
    r = [x for x in killed if x["mode"] == mode]
    lost = [x["lost"] for x in r]
    secs = [x["first_step_s"] for x in r]
    print(f"  {name}: kill to first applied step median {statistics.median(secs):.3f} s (p90 {p90(secs):.3f}, "
          f"max {max(secs):.3f}); updates lost median {statistics.median(lost):g} (max {max(lost)}); job wall median "
          f"{statistics.median(x['wall_s'] for x in r):g} s")
    if mode == "takeover":
        print(f"    journaled pushes replayed median {statistics.median(x['replayed'] for x in r):g} "
              f"(max {max(x['replayed'] for x in r)}; of them never acknowledged median "
              f"{statistics.median(x['unacknowledged'] for x in r):g}), replay median "
              f"{1000 * statistics.median(x['replay_s'] for x in r):.1f} ms")
ratio = statistics.median(x["first_step_s"] for x in killed if x["mode"] == "restart") / \
        statistics.median(x["first_step_s"] for x in killed if x["mode"] == "takeover")
print(f"  the takeover gets training going again {ratio:.1f}x sooner (goal: under 1 s)")
for mode in ("takeover", "restart"):
    acc = [x["accuracy"] for x in killed if x["mode"] == mode]
    base = [x["accuracy"] for x in runs if x["mode"] == mode and not x["killed_at"]]
    print(f"  test accuracy, {mode} build: with a kill median {100 * statistics.median(acc):.2f}% "
          f"(min {100 * min(acc):.2f}%), without {100 * base[0]:.2f}%")
PY

# The journal's cost: the same job without a kill, journal on and off alternated (ULFM build).
((tp_runs > 0)) || { echo "--throughput-runs 0: no measure of the journal's cost"; exit 0; }
: > "$dir/journal.jsonl"
for ((k = 0; k < 2 * tp_runs; ++k)); do
  journal=$([[ $((k % 2)) == 0 ]] && echo on || echo off)
  rm -rf "$dir/ck" "$dir/k.jsonl"
  write_job takeover 0 0 --push-journal "$journal" --log-every-steps 1000
  launch/restart_loop.sh --attempts 1 --delay 0 --status "$dir/ck/run-status.json" -- "$dir/job.sh" > "$dir/loop.txt" 2>&1 ||
    { cat "$dir/loop.txt"; exit 1; }
  /usr/bin/python3 - "$dir/k.jsonl" "$journal" "$dir/loop.txt" >> "$dir/journal.jsonl" <<'PY'
import json, re, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
assert s["event"] == "summary" and s["global_step"] == 300, s
held = [(int(b), int(p)) for b, p in re.findall(r"push journal: at most (\d+) bytes held \((\d+) pushes\)", open(sys.argv[3]).read())]
print(json.dumps({"journal": sys.argv[2], "ips": s["images_per_second"], "held": held}))
PY
done
/usr/bin/python3 - "$dir/journal.jsonl" "$workers" "$shards" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
on = [r["ips"] for r in runs if r["journal"] == "on"]
off = [r["ips"] for r in runs if r["journal"] == "off"]
held = [h for r in runs if r["journal"] == "on" for h in r["held"]]
assert held and not any(r["held"] for r in runs if r["journal"] == "off"), runs
print(f"push journal (--push-journal), {len(on)} runs each way alternated, 300 steps, no kill, {sys.argv[2]} workers, "
      f"{sys.argv[3]} shard(s):")
print(f"  images/s on {statistics.median(on):.0f}, off {statistics.median(off):.0f}: "
      f"on/off {statistics.median(on) / statistics.median(off):.3f} (goal >= 0.97)")
print(f"  a worker's journal held at most {max(b for b, _ in held) / 2**20:.2f} MiB ({max(p for _, p in held)} pushes; "
      f"median of the workers' peaks {statistics.median(b for b, _ in held) / 2**20:.2f} MiB)")
PY
