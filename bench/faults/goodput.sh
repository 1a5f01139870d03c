#!/usr/bin/env bash
# Goodput under a stated failure rate (issue 61): the same job, 1 parameter server + --workers
# workers on loopback (resnet8, an emulated K80 at x0.5, generated data) under launch/mpirun.sh
# (mpirun --enable-recovery under the restart loop, as the README runs it), trained to the same
# global step twice: once without faults, once with a fault every --every seconds of its run,
# mixed kinds drawn with --seed: a worker SIGKILLed (a revoked VM), the parameter server SIGKILLed
# (the one the status file names: after a takeover, the successor), a worker stopped for 3 s (a
# pause; longer than --failure-timeout 1.5: it is dropped). Goodput = useful global steps per
# second with faults / without = the clean run's wall time / the faulty run's, each from the
# launcher's start to its end (restarts, takeovers and the workers lost included). The faulty
# run's whole history is checked (bench/faults/history_check.py). With --replace yes (the default)
# the job runs with --replace-workers: the parameter server spawns a new worker for each one it
# drops (and a takeover's successor for the slots no survivor holds); with --replace no nothing
# brings a lost worker back: the job shrinks until a restart (a lost parameter server in the
# default build, or no worker left) starts every rank again. Prints, per build, both times, the
# faults and what they did, the goodput and the checker's verdict.
#   bench/faults/goodput.sh [--seconds 120] [--every 20] [--workers 4] [--builds "default ulfm"] [--seed 1] [--replace yes|no]
#                           [--keep DIR]
# --keep DIR: each faulty run's directory (output, metrics, history, status) is copied there.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --seconds seconds 120
bench_opt --every every 20
bench_opt --workers workers 4
bench_opt --builds builds "default ulfm"
bench_opt --seed seed 1
bench_opt --replace replace yes
bench_opt --keep keep ""
bench_parse "[--seconds S] [--every S] [--workers N] [--builds B..] [--seed S] [--replace yes|no] [--keep DIR]" "$@"
[[ $replace == yes || $replace == no ]] || { echo "goodput.sh: --replace yes or no, not '$replace'" >&2; exit 2; }
bench_env
[[ $builds != *ulfm* || -x build/ulfm/mpi_trainer ]] ||
  { echo "goodput.sh: no ULFM build (launch/setup.sh --mpi ulfm; cmake --build --preset ulfm)" >&2; exit 1; }
"$trainer" gen-data "$dir/data" --train 2048 --test 256 --seed 3 >/dev/null
/usr/bin/python3 - "$trainer" build/ulfm/mpi_trainer "$dir" "$seconds" "$every" "$workers" "$builds" "$seed" "$replace" "$keep" <<'PY'
import json, os, random, shutil, signal, subprocess, sys, time

trainer, ulfm, d, seconds, every, workers, builds, seed, replace, keep = sys.argv[1:]
seconds, every, workers, seed = float(seconds), float(every), int(workers), int(seed)


def cmd(build, tag, steps):
    run = f"{d}/{tag}"
    os.makedirs(run, exist_ok=True)
    return run, ["launch/mpirun.sh", "--np", str(workers + 1), "--oversubscribe", "--allow-root", "--loopback",
                 "--grace", "3", "--attempts", "100", "--trainer", ulfm if build == "ulfm" else trainer, "--",
                 "--data", f"{d}/data", "--model", "resnet8", "--batch-size", "32", "--lr-schedule", "constant",
                 "--lr", "0.05", "--augment", "off", "--train-steps", str(steps), "--ckpt-dir", f"{run}/ck",
                 "--ckpt-every-steps", "100", "--log-every-steps", "20", "--failure-timeout", "1.5",
                 "--emulate-device", "k80", "--emulate-scale", "0.5", "--threads", "1", "--quiet",
                 "--metrics", f"{run}/m.jsonl", "--push-log", f"{run}/push.csv"] + \
        (["--replace-workers"] if replace == "yes" else [])


def ranks(run):
    """The pids of the job's live trainer processes (the launched ranks and the replacements,
    which run `mpi_trainer join`)."""
    out = []
    for p in subprocess.run(["pgrep", "-f", "mpi_trainer (train|join)"], capture_output=True, text=True).stdout.split():
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            state = open(f"/proc/{p}/stat").read().split(")")[-1].split()[0]
        except OSError:
            continue
        # The trainer itself: not the restart loop or mpirun, whose command lines name it too.
        trainer_process = len(argv) > 1 and argv[0].endswith(b"mpi_trainer") and argv[1] in (b"train", b"join")
        if trainer_process and run.encode() in b" ".join(argv) and state not in ("Z", "T"):
            out.append(int(p))
    return sorted(out)


def ps_pid(run):
    try:
        st = json.load(open(f"{run}/ck/run-status.json"))
        return int(st["pid"]) if st.get("state") == "running" else None
    except (OSError, ValueError, KeyError):
        return None


def launch(build, tag, steps, faults_every=None, rng=None):
    run, c = cmd(build, tag, steps)
    t0 = time.time()
    job = subprocess.Popen(c, stdout=open(f"{run}/out.txt", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    done = []
    if faults_every:
        nxt = t0 + faults_every
        while job.poll() is None:
            time.sleep(0.1)
            if time.time() < nxt:
                continue
            nxt += faults_every
            live, ps = ranks(run), ps_pid(run)
            worker_pids = [p for p in live if p != ps]
            kind = rng.choice(["worker-kill", "ps-kill", "pause"])
            if kind == "ps-kill" and ps:
                os.kill(ps, signal.SIGKILL)
                done.append(f"{time.time() - t0:.0f}s ps-kill")
            elif worker_pids:
                p = rng.choice(worker_pids)
                if kind == "pause":
                    os.kill(p, signal.SIGSTOP)
                    time.sleep(3)
                    try:
                        os.kill(p, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                else:
                    os.kill(p, signal.SIGKILL)
                    kind = "worker-kill"
                done.append(f"{time.time() - t0:.0f}s {kind}")
            else:
                done.append(f"{time.time() - t0:.0f}s {kind} (no target: between attempts)")
    try:
        rc = job.wait(timeout=max(600, 10 * seconds))
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        rc = "timeout"
    wall = time.time() - t0
    ev = [json.loads(l) for l in open(f"{run}/m.jsonl")] if os.path.exists(f"{run}/m.jsonl") else []
    s = [e for e in ev if e["event"] == "summary"]
    return run, rc, wall, (s[-1] if s else {}), ev, done


rng = random.Random(seed)
print(f"1 PS + {workers} workers on loopback, resnet8 at an emulated K80 x0.5; a fault every {every:g} s "
      f"(worker SIGKILL, PS SIGKILL, 3 s pause; seed {seed}); "
      f"{'--replace-workers' if replace == 'yes' else 'no replacements'}")
results = []
for build in builds.split():
    # The number of steps the clean run trains in about --seconds: measured by a short probe.
    run, rc, wall, s, ev, _ = launch(build, f"{build}-probe", 200)
    if not s:
        raise SystemExit(f"goodput.sh: the {build} probe did not finish (exit {rc}); see {run}/out.txt")
    rate = s["global_step"] / s["train_seconds"]
    steps = max(200, int(rate * seconds) // 10 * 10)
    run, rc, clean, s, ev, _ = launch(build, f"{build}-clean", steps)
    if not s or s.get("global_step") != steps:
        raise SystemExit(f"goodput.sh: the clean {build} run did not finish (exit {rc})")
    run, rc, faulty, s, ev, done = launch(build, f"{build}-faults", steps, every, rng)
    finished = bool(s) and s.get("global_step") == steps and s.get("exit_code") == 0
    h = subprocess.run(["/usr/bin/python3", "bench/faults/history_check.py", f"{run}/push.csv", "--metrics",
                        f"{run}/m.jsonl"], capture_output=True, text=True)
    verdict = h.stdout.strip().splitlines()[-1] if h.stdout.strip() else h.stderr.strip()
    attempts = sum(e["event"] == "config" for e in ev)
    takeovers = sum(e["event"] == "ps_takeover" for e in ev)
    revoked = sum(e["event"] == "revocation" for e in ev)
    replaced = sum(e["event"] == "join" and not e.get("rejoined") for e in ev)
    rejoined = sum(e["event"] == "join" and bool(e.get("rejoined")) for e in ev)
    goodput = clean / faulty if finished else 0.0
    if keep:
        with open(f"{run}/faults.txt", "w") as f:
            f.write("\n".join(done) + "\n")
        shutil.copytree(run, os.path.join(keep, os.path.basename(run)), dirs_exist_ok=True)
    results.append((build, goodput))
    print(f"{build:>7}: {steps} steps; clean {clean:.1f} s, with faults {faulty:.1f} s "
          f"({'finished' if finished else f'NOT FINISHED, exit {rc}'}, {len(done)} faults: {', '.join(done)}; "
          f"{attempts} attempt(s), {takeovers} takeover(s), {revoked} worker(s) dropped, {replaced} replacement(s) "
          f"joined, {rejoined} dropped worker(s) rejoined); goodput {goodput:.3f}; "
          f"{verdict}", flush=True)
print("goodput: " + ", ".join(f"{b} {g:.3f}" for b, g in results))
PY
