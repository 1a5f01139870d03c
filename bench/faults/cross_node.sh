#!/usr/bin/env bash
# Across nodes (issue 60): 1 parameter server + 3 workers, one rank per node of a namespace cluster
# (launch/netns-cluster/cluster.sh: 4 nodes and a login node, each link shaped to --rate both
# ways), launch/mpirun.sh run on the login node with the cluster's hostfile and launch agent:
#   quickstart  the quickstart's fault, worker rank 3 SIGKILLed at step 120 of 200, in the default
#               build and the ULFM build: exit code, images/s, the loss noticed, checkpoint verified
#   takeover    K runs of the ULFM build, the parameter server SIGKILLed at a random step: updates
#               lost (the takeover's own accounting) and the seconds from the kill to the first
#               applied step, median and p90
#   throughput  R runs each way without a fault, the default build and the ULFM build alternated:
#               steady images/s (from the third progress line to the last), median, and the ratio
# resnet8, batch 32, generated data; each run's own output is kept in the scratch directory only
# while the script runs. Needs root (network namespaces) and both builds (launch/setup.sh --mpi ulfm).
# --builds "default ulfm": the builds the quickstart's fault and the throughput runs use (the
# takeover needs ulfm).
#   bench/faults/cross_node.sh [--rate 200mbit] [--kills 10] [--runs 3] [--steps 300] [--builds "default ulfm"]
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --rate rate 200mbit
bench_opt --kills kills 10
bench_opt --runs runs 3
bench_opt --steps steps 300
bench_opt --builds builds "default ulfm"
bench_parse "[--rate R] [--kills K] [--runs R] [--steps N] [--builds B..]" "$@"
bench_env
unset OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include  # the nodes' eth0, not loopback
ulfm_trainer=build/ulfm/mpi_trainer
[[ $builds != *ulfm* && $kills == 0 ]] || [[ -x $ulfm_trainer ]] || { echo "cross_node.sh: no ULFM build (launch/setup.sh --mpi ulfm; cmake --build --preset ulfm)" >&2; exit 1; }
name=xn$(($$ % 100000))
msg=$(launch/netns-cluster/cluster.sh up --name "$name" --nodes 4 --rate "$rate" 2>&1) || {
  echo "cross_node.sh: cannot make the cluster: $msg" >&2; exit 4; }
trap 'launch/netns-cluster/cluster.sh down --name "$name" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 256 --seed 3 >/dev/null
/usr/bin/python3 - "$trainer" "$ulfm_trainer" "$dir" "$name" "$kills" "$runs" "$steps" "$rate" "$builds" <<'PY'
import json, os, random, statistics, subprocess, sys
trainer, ulfm, d, name, kills, runs, steps, rate, builds = sys.argv[1:]
builds = builds.split()
kills, runs, steps = int(kills), int(runs), int(steps)
state = f"/run/mt-netns/{name}"

def run(build, tag, *flags, n_steps=steps):
    ck, metrics = f"{d}/ck-{tag}", f"{d}/{tag}.jsonl"
    subprocess.run(["rm", "-rf", ck, metrics], check=True)
    env = dict(os.environ, MT_MPI="ulfm" if build == "ulfm" else "")
    cmd = ["launch/netns-cluster/cluster.sh", "exec", "login", "--name", name, "--", "launch/mpirun.sh",
           "--hostfile", f"{state}/hostfile", "--launch-agent", f"{state}/agent", "--iface", "eth0", "--allow-root",
           "--grace", "3", "--trainer", ulfm if build == "ulfm" else trainer, "--",
           "--data", f"{d}/data", "--model", "resnet8", "--batch-size", "32", "--lr-schedule", "constant", "--lr", "0.05",
           "--augment", "off", "--train-steps", str(n_steps), "--ckpt-dir", ck, "--ckpt-every-steps", "100",
           "--log-every-steps", str(max(1, n_steps // 10)), "--metrics", metrics, *flags]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    ev = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    summ = [e for e in ev if e["event"] == "summary"]
    if not summ:
        print(r.stdout[-2000:], r.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"cross_node.sh: {tag}: no summary (exit {r.returncode})")
    return r.returncode, ev, summ[-1], ck

def steady(ev):
    p = [e for e in ev if e["event"] == "progress"]
    a, b = p[2], p[-1]
    return (b["global_step"] - a["global_step"]) / (b["elapsed_seconds"] - a["elapsed_seconds"])

print(f"1 PS + 3 workers on 4 namespace nodes, links {rate} both ways; resnet8, batch 32")
print("quickstart's fault (worker rank 3 SIGKILLed at step 120 of 200):")
for build in builds:
    rc, ev, s, ck = run(build, f"qs-{build}", "--revoke", "rank=3@step=120", n_steps=200)
    latest = open(f"{ck}/LATEST").read().strip()
    ok = subprocess.run([trainer, "ckpt", "verify", f"{ck}/{latest}"], capture_output=True).returncode == 0
    rev = [e for e in ev if e["event"] == "revocation"]
    print(f"  {build:>7}: exit {rc}, {s['global_step']} steps, {s['revocations']} revocation(s) "
          f"(noticed at step {rev[0]['global_step'] if rev else '-'}), {s['workers_end']} workers at the end, "
          f"{s['images_per_second']:.0f} img/s, shared-memory workers {s['shared_memory_workers']}, "
          f"checkpoint {latest} {'verifies' if ok else 'DOES NOT VERIFY'}")

if kills:
    rng = random.Random(1)
    seconds, lost = [], []
    for k in range(kills):
        at = rng.randint(60, steps - 60)
        rc, ev, s, _ = run("ulfm", f"kill{k}", "--revoke", f"rank=0@step={at}:KILL", "--ps-standby", "1",
                           "--failure-timeout", "2")
        t = [e for e in ev if e["event"] == "ps_takeover"]
        if rc != 0 or not t or s["global_step"] != steps:
            raise SystemExit(f"cross_node.sh: takeover {k} (kill at step {at}): exit {rc}, takeover {t}, summary {s}")
        seconds.append(t[0]["seconds_to_first_step"])
        lost.append(t[0]["lost_updates"])
        print(f"  takeover {k + 1}/{kills}: PS killed at step {at}, first step {seconds[-1]:.3f} s later, "
              f"{t[0]['replayed']} replayed, {lost[-1]} lost", flush=True)
    q = statistics.quantiles(seconds, n=10) if len(seconds) >= 2 else seconds * 9
    print(f"takeover across nodes (ULFM), {kills} kills: kill -> first applied step median "
          f"{statistics.median(seconds):.3f} s, p90 {q[-1]:.3f} s, max {max(seconds):.3f} s; updates lost: "
          f"{sum(lost)} in all")

if runs:
    rates = {b: [] for b in builds}
    for i in range(runs):
        for build in builds:
            rc, ev, s, _ = run(build, f"tp-{build}-{i}")
            if rc != 0:
                raise SystemExit(f"cross_node.sh: throughput run {build} {i}: exit {rc}")
            rates[build].append(steady(ev) * 32)
    m = {b: statistics.median(v) for b, v in rates.items()}
    print(f"throughput without faults ({runs} run(s) each, alternated): " +
          ", ".join(f"{b} {m[b]:.0f} img/s ({', '.join(f'{v:.0f}' for v in rates[b])})" for b in builds) +
          (f": ULFM / default {m['ulfm'] / m['default']:.2f}" if len(m) == 2 else ""))
PY
