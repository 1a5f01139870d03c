#!/usr/bin/env bash
# Nemesis (issue 61): partitions, slow links, crashed nodes and pauses across the nodes of a
# namespace cluster (launch/netns-cluster/cluster.sh: n1 the parameter server, n2 the standby worker
# rank 1, n3 and n4 workers ranks 2 and 3, a login node running launch/mpirun.sh, the launcher the
# README recommends: mpirun --enable-recovery under the restart loop; links --rate both ways), each
# run checked over its whole history (bench/faults/history_check.py). Scenarios (one fault, at a
# random step of the seeded schedule, healed --hold seconds later):
#   worker-link      a worker's node link down, then up          (n3 or n4)
#   ps-link          the parameter server's node link down, then up
#   standby-link     the standby's node link down, then up       (n2)
#   pair-cut         worker <-> parameter server cut both ways, both running (a blackhole route)
#   pair-cut-oneway  one direction only (the parameter server's packets to the worker, or the
#                    worker's to it)
#   worker-throttle  a worker's link throttled to a trickle (--trickle), then back
#   ps-throttle      the parameter server's link throttled to a trickle, then back
#   worker-crash     a worker's node crashed: every process on it SIGKILLed, its link down; up
#                    again --hold s later (nothing restarts there by itself)
#   ps-crash         the parameter server's node crashed; its link up --hold s later
#   pause            a worker stopped (SIGSTOP) for --hold s, then continued
#   random           two faults of the above, at random steps (the seed replays it)
# With --replace yes (the default) the job runs with --replace-workers on a cluster of 5 nodes, n5
# a spare that takes no rank at the start (`launch/mpirun.sh --np 4`, n5 with 8 slots): the
# parameter server's replacements for the workers it dropped start there, as a cloud would give
# new VMs; --replace no: 4 nodes, nothing replaces a lost worker within an attempt.
# Per run: the launcher's exit code (0 exactly when the job finished), finished (the summary at the
# last step, exit 0), attempts, the
# checker's verdict and counts (acknowledged pushes lost, applied twice), whether a live parameter
# server was ended by one worker's fault (a takeover or a restart in a scenario that touched a
# worker only: want 0), and the workers at the end. Default: every scenario once in each build
# (--builds "default ulfm"; the ULFM build from launch/setup.sh --mpi ulfm). Prints one line per
# run and the table; --json FILE keeps the records. Needs root (network namespaces).
#   bench/faults/nemesis.sh [--scenarios LIST] [--runs 1] [--builds "default ulfm"] [--seed 1]
#                           [--rate 200mbit] [--hold 4] [--trickle 64kbit] [--steps 300] [--json FILE]
#                           [--keep DIR] [--timeout 180] [--replace yes|no]
# --keep DIR: each run that did not pass leaves its directory there (output, metrics, history);
# --timeout: the seconds a run may take before it is ended (counted as not finished).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
all="worker-link,ps-link,standby-link,pair-cut,pair-cut-oneway,worker-throttle,ps-throttle,worker-crash,ps-crash,pause,random"
bench_opt --scenarios scenarios "$all"
bench_opt --runs runs 1
bench_opt --builds builds "default ulfm"
bench_opt --seed seed 1
bench_opt --rate rate 200mbit
bench_opt --hold hold 4
bench_opt --trickle trickle 64kbit
bench_opt --steps steps 300
bench_opt --json json ""
bench_opt --keep keep ""
bench_opt --timeout timeout 180
bench_opt --replace replace yes
bench_parse "[--scenarios LIST] [--runs R] [--builds B..] [--seed S] [--rate R] [--hold S] [--trickle R] [--steps N] [--json FILE] [--keep DIR] [--timeout S] [--replace yes|no]" "$@"
[[ $replace == yes || $replace == no ]] || { echo "nemesis.sh: --replace yes or no, not '$replace'" >&2; exit 2; }
bench_env
unset OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include  # the nodes' eth0, not loopback
[[ $builds != *ulfm* || -x build/ulfm/mpi_trainer ]] ||
  { echo "nemesis.sh: no ULFM build (launch/setup.sh --mpi ulfm; cmake --build --preset ulfm)" >&2; exit 1; }
name=nm$(($$ % 100000))
msg=$(launch/netns-cluster/cluster.sh up --name "$name" --nodes $([[ $replace == yes ]] && echo 5 || echo 4) --rate "$rate" 2>&1) || {
  echo "nemesis.sh: cannot make the cluster: $msg" >&2; exit 4; }
trap 'launch/netns-cluster/cluster.sh down --name "$name" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 256 --seed 3 >/dev/null
/usr/bin/python3 - "$trainer" build/ulfm/mpi_trainer "$dir" "$name" "$scenarios" "$runs" "$builds" "$seed" "$hold" \
  "$trickle" "$steps" "$json" "$all" "$keep" "$timeout" "$replace" <<'PY'
import json, os, random, re, shutil, signal, subprocess, sys, time

trainer, ulfm, d, name, scenarios, runs, builds, seed, hold, trickle, steps, json_out, known, keep, timeout, replace = sys.argv[1:]
timeout = float(timeout)
runs, seed, hold, steps = int(runs), int(seed), float(hold), int(steps)
scenarios = [s for s in scenarios.split(",") if s]
for s in scenarios:
    if s not in known.split(","):
        raise SystemExit(f"nemesis.sh: unknown scenario '{s}' (the scenarios: {known})")
state = f"/run/mt-netns/{name}"
cluster = "launch/netns-cluster/cluster.sh"
WORKER_ONLY = {"worker-link", "pair-cut", "pair-cut-oneway", "worker-throttle", "worker-crash", "pause"}
NODE_OF_RANK = {0: "n1", 1: "n2", 2: "n3", 3: "n4"}


def sh(*args):
    r = subprocess.run([cluster, *args, "--name", name], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"cluster.sh {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")


def rank_pid(rank, job_dir):
    for p in subprocess.run(["pgrep", "-f", "mpi_trainer train"], capture_output=True, text=True).stdout.split():
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and job_dir.encode() in cmd:
            return int(p)
    return None


def faults_of(scenario, rng):
    """[(action, heal)]: callables for one fault."""
    w = rng.choice([2, 3])
    wn = NODE_OF_RANK[w]
    if scenario == "worker-link":
        return [(f"{wn} link down", lambda: sh("link", wn, "down"), lambda: sh("link", wn, "up"))]
    if scenario == "ps-link":
        return [("n1 link down", lambda: sh("link", "n1", "down"), lambda: sh("link", "n1", "up"))]
    if scenario == "standby-link":
        return [("n2 link down", lambda: sh("link", "n2", "down"), lambda: sh("link", "n2", "up"))]
    if scenario == "pair-cut":
        return [(f"n1 <-> {wn} cut", lambda: sh("cut", "n1", wn), lambda: sh("uncut", "n1", wn))]
    if scenario == "pair-cut-oneway":
        a, b = ("n1", wn) if rng.random() < 0.5 else (wn, "n1")
        return [(f"{a} -> {b} cut", lambda: sh("cut", a, b, "--oneway"), lambda: sh("uncut", a, b))]
    if scenario == "worker-throttle":
        return [(f"{wn} throttled to {trickle}", lambda: sh("throttle", wn, trickle), lambda: sh("throttle", wn, "off"))]
    if scenario == "ps-throttle":
        return [(f"n1 throttled to {trickle}", lambda: sh("throttle", "n1", trickle), lambda: sh("throttle", "n1", "off"))]
    if scenario == "worker-crash":
        return [(f"{wn} crashed", lambda: sh("crash", wn), lambda: sh("link", wn, "up"))]
    if scenario == "ps-crash":
        return [("n1 crashed", lambda: sh("crash", "n1"), lambda: sh("link", "n1", "up"))]
    if scenario == "pause":
        box = {}
        def stop():
            box["pid"] = rank_pid(w, d)
            if box["pid"]:
                os.kill(box["pid"], signal.SIGSTOP)
        def cont():
            if box.get("pid"):
                try:
                    os.kill(box["pid"], signal.SIGCONT)
                except ProcessLookupError:
                    pass
        return [(f"worker rank {w} stopped", stop, cont)]
    if scenario == "random":
        picks = rng.sample(sorted(set(known.split(",")) - {"random"}), 2)
        return [f for p in picks for f in faults_of(p, rng)]
    raise ValueError(scenario)


def max_step(metrics):
    best = 0
    try:
        for line in open(metrics):
            m = re.search(r'"global_step":(\d+)', line)
            if m:
                best = max(best, int(m.group(1)))
    except OSError:
        pass
    return best


def one_run(build, scenario, k, rng):
    tag = f"{build}-{scenario}-{k}"
    run_dir = f"{d}/{tag}"
    os.makedirs(run_dir)
    metrics, push = f"{run_dir}/m.jsonl", f"{run_dir}/push.csv"
    env = dict(os.environ, MT_MPI="ulfm" if build == "ulfm" else "")
    cmd = [cluster, "exec", "login", "--name", name, "--", "launch/mpirun.sh", "--hostfile", hostfile,
           "--launch-agent", f"{state}/agent", "--iface", "eth0", "--allow-root", "--grace", "3", "--np", "4",
           "--trainer", ulfm if build == "ulfm" else trainer, "--", "--data", f"{d}/data", "--model", "resnet8",
           "--batch-size", "32", "--lr-schedule", "constant", "--lr", "0.05", "--augment", "off",
           "--train-steps", str(steps), "--ckpt-dir", f"{run_dir}/ck", "--ckpt-every-steps", "50",
           "--log-every-steps", "10", "--failure-timeout", "1.5", "--emulate-device", "k80", "--emulate-scale", "0.5",
           "--metrics", metrics, "--push-log", push] + (["--replace-workers"] if replace == "yes" else [])
    faults = faults_of(scenario, rng)
    at = sorted(rng.randrange(40, steps - 120) for _ in faults)
    t0 = time.time()
    out = open(f"{run_dir}/out.txt", "w")
    job = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    done = []
    try:
        for (what, act, heal), step in zip(faults, at):
            while job.poll() is None and max_step(metrics) < step:
                time.sleep(0.05)
            if job.poll() is not None:
                break
            act()
            done.append(f"{what} at step {max_step(metrics)}")
            time.sleep(hold)
            heal()
        rc = job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        rc = "timeout"
    for _, _, heal in faults:  # whatever happened, the cluster is whole for the next run
        try:
            heal()
        except RuntimeError:
            pass
    subprocess.run(["pkill", "-9", "-f", run_dir], capture_output=True)
    ev = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    summ = [e for e in ev if e["event"] == "summary"]
    s = summ[-1] if summ else {}
    attempts = sum(e["event"] == "config" for e in ev)
    takeovers = sum(e["event"] == "ps_takeover" for e in ev)
    replaced = sum(e["event"] == "join" and not e.get("rejoined") for e in ev)
    rejoined = sum(e["event"] == "join" and bool(e.get("rejoined")) for e in ev)
    h = subprocess.run(["/usr/bin/python3", "bench/faults/history_check.py", push, "--metrics", metrics,
                        "--json", f"{run_dir}/history.json"], capture_output=True, text=True)
    hist = json.load(open(f"{run_dir}/history.json")) if h.returncode in (0, 1) else None
    verdict = ("ok" if h.returncode == 0 else "VIOLATION: " + hist["violations"][0]["kind"] if hist
               else "unreadable: " + (h.stderr.strip() or h.stdout.strip())[-120:])
    text = open(f"{run_dir}/out.txt", errors="replace").read()
    finished = bool(s) and s.get("global_step") == steps and s.get("exit_code") == 0
    ps_ended = (takeovers > 0 or attempts > 1) and scenario in WORKER_ONLY
    rec = {"build": build, "scenario": scenario, "run": k, "faults": done, "exit": rc, "finished": finished,
           "attempts": attempts, "takeovers": takeovers, "summaries": len(summ),
           "workers_end": s.get("workers_end"), "replacements": replaced, "rejoined": rejoined, "revocations": s.get("revocations"), "history": verdict,
           "acknowledged": hist["counts"]["acknowledged"] if hist else None,
           "acknowledged_lost": hist["counts"]["acknowledged_lost"] if hist else None,
           "applied_twice": hist["counts"]["applied_twice"] if hist else None,
           "lost_with_their_worker": hist["counts"]["lost_with_their_worker"] if hist else None,
           "rolled_back_by_restart": hist["counts"]["rolled_back_by_restart"] if hist else None,
           "live_ps_ended": ps_ended, "exit_truthful": (rc == 0) == finished, "cut_off_left": len(re.findall(r"it leaves the job to the others", text)),
           "seconds": round(time.time() - t0, 1)}
    if keep and not (finished and verdict == "ok" and not ps_ended and rec["exit_truthful"]):
        shutil.copytree(run_dir, os.path.join(keep, tag), dirs_exist_ok=True)
    return rec


# With replacements n5, the spare, has room for several (Open MPI 5's runtime does not give a dead
# rank's slot to a spawned process: "All nodes which are allocated for this job are already filled").
hostfile = f"{state}/hostfile"
if replace == "yes":
    hostfile = f"{d}/hostfile"
    with open(hostfile, "w") as f:
        f.write("".join(f"n{i} slots=1\n" for i in range(1, 5)) + "n5 slots=8\n")
rng = random.Random(seed)
records = []
print(f"1 PS (n1) + 3 workers (n2 standby, n3, n4) on namespace nodes, resnet8 at an emulated K80 x0.5, "
      f"{steps} steps; faults held {hold:g} s; seed {seed}; "
      f"{'--replace-workers, n5 spare' if replace == 'yes' else 'no replacements'}")
for build in builds.split():
    for scenario in scenarios:
        for k in range(1, runs + 1):
            r = one_run(build, scenario, k, rng)
            records.append(r)
            print(f"{build:>7} {scenario:<16} {'; '.join(r['faults']) or '(job ended first)'}: exit {r['exit']}, "
                  f"{'finished' if r['finished'] else 'NOT FINISHED'}, {r['attempts']} attempt(s), "
                  f"{r['takeovers']} takeover(s), {r['replacements']} replacement(s), {r['rejoined']} rejoined, "
                  f"{r['workers_end']} worker(s) at the end, "
                  f"{r['summaries']} summary(ies), history {r['history']} "
                  f"(acked {r['acknowledged']}, lost {r['acknowledged_lost']}, twice {r['applied_twice']}, "
                  f"rolled back {r['rolled_back_by_restart']})"
                  f"{', LIVE PS ENDED' if r['live_ps_ended'] else ''}, {r['seconds']} s", flush=True)
print()
print("| build | scenario | runs | finished | exit 0 | exit 0 iff finished | history ok | acked lost | applied twice | live PS ended by one worker's fault | replacements | workers back (rejoined) | workers at the end |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for build in builds.split():
    for scenario in scenarios:
        rs = [r for r in records if r["build"] == build and r["scenario"] == scenario]
        if not rs:
            continue
        print(f"| {build} | {scenario} | {len(rs)} | {sum(r['finished'] for r in rs)} | "
              f"{sum(r['exit'] == 0 for r in rs)} | {sum(r['exit_truthful'] for r in rs)} | "
              f"{sum(r['history'] == 'ok' for r in rs)} | "
              f"{sum(r['acknowledged_lost'] or 0 for r in rs)} | {sum(r['applied_twice'] or 0 for r in rs)} | "
              f"{sum(r['live_ps_ended'] for r in rs)} | {', '.join(str(r['replacements']) for r in rs)} | "
              f"{', '.join(str(r['rejoined']) for r in rs)} | "
              f"{', '.join(str(r['workers_end']) for r in rs)} |")
if json_out:
    with open(json_out, "w") as f:
        json.dump(records, f, indent=1)
bad = [r for r in records if not r["finished"] or r["history"] != "ok" or r["live_ps_ended"] or not r["exit_truthful"]]
print(f"nemesis: {len(records) - len(bad)} of {len(records)} runs finished with a clean history, an exit code that "
      f"says so, and no live parameter server ended by one worker's fault")
sys.exit(1 if bad else 0)
PY
