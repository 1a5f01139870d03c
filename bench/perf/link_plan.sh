#!/usr/bin/env bash
# `plan`'s network model against a real link (issue 60): every rank on its own node of a namespace
# cluster (launch/netns-cluster/cluster.sh), the parameter-server shards' links shaped to each
# rate (a token bucket both ways; the workers' links unshaped), 1..N workers with emulated device
# step times (--emulate-device: real gradients, each step padded to the device's time) so that the
# link, not this machine's 2 cores, is the bottleneck. For every shape it prints the measured
# global steps/s (steady state: from the third progress line to the last) beside `plan`'s
# prediction for the same shape (its --ps-link, --num-ps, --push-precision, the device table; over
# 5,000 steps), the error, the bytes each global step sent out of shard 0's node (its interface's
# counter; over the whole run, and `steady`: between the third progress line and the last, without
# the run's fixed costs; `resent`: the TCP segments the node sent again per step, its own
# counters) against the model's, `used`: the share of the link's rate those steady bytes filled,
# and the link efficiency: measured steps/s over the link's bound,
# the rate over the bytes one update puts on the shard's busier (outbound) direction as the model
# counts them (the reply, and a standby replica's share: plan's ps_link_update_bytes), beside plan's
# utilisation of that link ("saturated" from 0.85: the link is shared fairly, so it nears full
# use only gradually as workers are added). Per shape it then prints the knee (the
# fewest workers within 5% of the most steps/s), measured and predicted, and `cores`: the machine's
# busy cores during the run (near all of them: the cores, not the link alone, set the pace), and
# `replica every`: the updates between two standby replicas, shard 0's measured (its summary) over
# the model's (plan's replica_interval_updates). What a
# message costs besides its bytes (the polling naps, MPI's own work) is measured first, apart
# from the compared runs, with one worker on unshaped links, and given to plan as the link's
# latency. Nothing is calibrated from the compared runs: the prediction uses only the shape and
# that overhead. Needs root (network namespaces).
#   --rates "25 50 100 200"  the shards' link rates, Mbit/s
#   --shards "1 2"           parameter-server shards (each on its own node and link)
#   --workers 5              1..N workers
#   --precisions "fp32 bf16" push precisions; bf16 runs at one shard only unless --bf16-shards
#   --ratio 1                each rate's step time = RATIO x one fp32 message's time on the link
#                            (so one shard saturates at about 2 + RATIO workers)
#   --seconds 8              measured seconds per run (its steps follow from plan's rate)
#   --model resnet8 --batch-size 4
#   --flags "..."            more flags for both train and plan (e.g. "--ps-standby 0")
#   --sysctl "K=V ..."       kernel settings for every node's own network stack (e.g.
#                            "net.ipv4.tcp_slow_start_after_idle=0"; a value of several numbers
#                            with commas: net.ipv4.tcp_wmem=4096,4194304,4194304); default:
#                            Linux's own
#   MT_MPI=ulfm in front runs the ULFM build (the default build's figures beside: run both)
#   bench/perf/link_plan.sh --rates "25 100" --workers 4
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --rates rates "25 50 100 200"
bench_opt --shards shards "1 2"
bench_opt --workers workers 5
bench_opt --precisions precisions "fp32 bf16"
bench_opt --bf16-shards bf16_shards 1
bench_opt --ratio ratio 1
bench_opt --seconds seconds 8
bench_opt --model model resnet8
bench_opt --batch-size batch 4
bench_opt --flags flags ""
bench_opt --sysctl sysctls ""
bench_opt --out out ""
bench_parse "[--rates R..] [--shards S..] [--workers N] [--precisions P..] [--ratio X] [--seconds S] [--sysctl K=V..] [--out FILE]" "$@"
bench_env
unset OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include  # the nodes' eth0, not loopback
[[ ${MT_MPI:-} == ulfm ]] && trainer=build/ulfm/mpi_trainer
[[ -x $trainer ]] || { echo "link_plan.sh: build $trainer first" >&2; exit 1; }
max_shards=$(tr ' ' '\n' <<<"$shards" | sort -n | tail -1)
cluster=launch/netns-cluster/cluster.sh
name=lp$(($$ % 100000))
msg=$("$cluster" up --name "$name" --nodes $((max_shards + workers)) 2>&1) || {
  echo "link_plan.sh: cannot make the cluster: $msg" >&2; exit 4; }
trap '"$cluster" down --name "$name" >/dev/null 2>&1; rm -rf "$dir"' EXIT
for ((i = 1; i <= max_shards + workers; i++)); do
  for kv in $sysctls; do ip netns exec "$name-n$i" sysctl -q -w "${kv//,/ }"; done
done
"$trainer" gen-data "$dir/data" --train 2048 --test 128 --seed 3 >/dev/null
/usr/bin/python3 - "$trainer" "$dir" "$name" "$rates" "$shards" "$workers" "$precisions" "$bf16_shards" "$ratio" \
  "$seconds" "$model" "$batch" "$flags" "${out:-}" <<'PY'
import json, os, shlex, subprocess, sys, threading, time
(trainer, d, name, rates, shards, workers, precisions, bf16_shards, ratio, seconds, model, batch, flags,
 out) = sys.argv[1:]
flags = shlex.split(flags)
rates = [float(r) for r in rates.split()]; shards = [int(s) for s in shards.split()]
workers = int(workers); ratio = float(ratio); seconds = float(seconds)
bf16_shards = [int(s) for s in bf16_shards.split()]
cluster = "launch/netns-cluster/cluster.sh"
state = f"/run/mt-netns/{name}"
params = int(next(l.split()[1] for l in subprocess.run([trainer, "model-info", "--model", model], capture_output=True,
                                                       text=True, check=True).stdout.splitlines()
                  if l.startswith("parameters:")))
fp32_bytes = params * 4

def sh(*cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

def tx_bytes(node):
    j = json.loads(subprocess.run(["ip", "-n", f"{name}-{node}", "-s", "-j", "link", "show", "eth0"],
                                  capture_output=True, text=True, check=True).stdout)
    return j[0]["stats64"]["tx"]["bytes"]

def retrans(node):
    # TCP segments the node sent again (its namespace's own counters): what a dropping queue costs.
    snmp = subprocess.run(["ip", "netns", "exec", f"{name}-{node}", "cat", "/proc/net/snmp"], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    tcp = [l.split()[1:] for l in snmp if l.startswith("Tcp:")]
    return int(dict(zip(tcp[0], tcp[1]))["RetransSegs"])

def cpu():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:8]]
    return sum(v) - v[3] - v[4], sum(v)  # busy, all (idle and iowait are not busy)

def plan(n, s, precision, step, steps, rate, latency_ms):
    args = [trainer, "plan", "--json", "--model", model, "--steps", str(steps), "--workers", str(n), "--num-ps", str(s),
            "--devices", f"{d}/devices", "--pricing", "on-demand", "--revocation-model", "none",
            "--ps-link", f"{latency_ms:.4f}/{rate / 1000}", "--worker-links", "0.05/10", "--push-precision", precision, "--draws", "1"] + flags
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)

def run(n, s, precision, steps):
    ck = f"{d}/ck"
    subprocess.run(["rm", "-rf", ck, f"{d}/m.jsonl"], check=True)
    hostfile = f"{d}/hosts"
    with open(hostfile, "w") as f:
        f.writelines(f"n{i} slots=1\n" for i in range(1, s + n + 1))
    before, (b0, a0) = tx_bytes("n1"), cpu()
    # The bytes out of shard 0's node at each progress line, read as the line appears (the file
    # polled every 20 ms): the steady state's bytes per step, apart from the run's fixed costs (the
    # wire-up, the joins' first parameters, the last replica and stops).
    marks, done = [], threading.Event()
    def watch():
        seen, size = 0, -1
        while not done.is_set():
            try:
                now = os.path.getsize(f"{d}/m.jsonl")
            except OSError:
                now = -1
            if now != size:
                size = now
                with open(f"{d}/m.jsonl") as f:
                    n_prog = sum('"event":"progress"' in l for l in f)
                if n_prog > seen:
                    marks.append((n_prog, tx_bytes("n1"), retrans("n1")))
                    seen = n_prog
            time.sleep(0.02)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cmd = [cluster, "exec", "login", "--name", name, "--", "launch/mpirun.sh", "--hostfile", hostfile,
           "--np", str(s + n), "--launch-agent", f"{state}/agent", "--iface", "eth0", "--allow-root", "--grace", "3",
           "--attempts", "1", "--trainer", trainer, "--", "--data", f"{d}/data", "--model", model,
           "--batch-size", batch, "--augment", "off", "--lr-schedule", "constant", "--lr", "0.02",
           # One thread each, no spinning: 5 workers of 2 threads each on the 2 cores took them all
           # at 200 Mbit/s (45 steps/s against 65 this way), the cores and not the link the limit.
           "--threads", "1", "--num-ps", str(s), "--train-steps", str(steps), "--log-every-steps", str(max(1, steps // 10)),
           "--ckpt-dir", ck, "--ckpt-every-steps", "0", "--emulate-device", f"{d}/devices",
           # A saturated link queues every message: the default 1.5 s calls a live parameter server
           # lost (issue 61's detector); the bench measures throughput, not detection.
           "--failure-timeout", "20", "--push-precision", precision, "--metrics", f"{d}/m.jsonl"] + flags
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    sent = tx_bytes("n1") - before
    done.set()
    watcher.join()
    b1, a1 = cpu()
    cores = os.cpu_count() * (b1 - b0) / max(1, a1 - a0)
    ev = [json.loads(l) for l in open(f"{d}/m.jsonl")] if os.path.exists(f"{d}/m.jsonl") else []
    summ = [e for e in ev if e["event"] == "summary"]
    prog = [e for e in ev if e["event"] == "progress"]
    if r.returncode != 0 or not summ or summ[-1]["global_step"] != steps or summ[-1]["revocations"] or len(prog) < 4:
        print(r.stdout[-3000:], r.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"link_plan.sh: the run of {n} worker(s), {s} shard(s), {precision} failed (exit {r.returncode})")
    a, b = prog[2], prog[-1]
    at = {k: (v, t) for k, v, t in marks}  # progress lines seen -> bytes, retransmitted segments then
    between = b["global_step"] - a["global_step"]
    seen = 3 in at and len(prog) in at
    steady = (at[len(prog)][0] - at[3][0]) / between if seen else float("nan")
    again = (at[len(prog)][1] - at[3][1]) / between if seen else float("nan")
    standby = summ[-1].get("ps_standby") or {}
    return (between / (b["elapsed_seconds"] - a["elapsed_seconds"]), sent / steps, steady, again, cores,
            standby.get("mean_interval_updates", float("nan")))

# What a message costs besides its bytes, measured apart from the runs compared below (calibrating
# nothing from them): 1 PS and 1 worker on unshaped links, each shape's shard count and push
# precision; the cycle over the step time and the bytes at the veth's speed, halved (the push and
# the reply). It is the two sides' polling naps (up to 1 ms each) and MPI's own work, given to plan
# as the shard link's latency (the trainer sends its messages eagerly, without MPI's rendezvous:
# ps/wire/mpi_env.hpp, tcp_eager_up_to). The veth's own time per message, at several Gbit/s, is
# left in: under 0.5 ms.
calib_step = 0.012
with open(f"{d}/devices", "w") as f:
    f.write(f"k80 {calib_step:.6f} 0\n")
overhead = {}
for i in range(1, max(shards) + workers + 1):
    sh(cluster, "throttle", f"n{i}", "off", "--name", name)
for s in shards:
    for precision in precisions.split():
        if precision == "bf16" and s not in bf16_shards:
            continue
        steps_per_s, *_ = run(1, s, precision, 300)
        overhead[(s, precision)] = max(0.0, (1 / steps_per_s - calib_step) / 2)

rows, knees = [], []
print(f"{model} ({params:,} parameters), batch {batch}, one rank per node; shards' links shaped, workers' unshaped; "
      f"{os.environ.get('MT_MPI') or 'default'} MPI build")
print("per-message overhead (1 worker, unshaped links): " +
      ", ".join(f"{s} shard(s) {p}: {v * 1000:.2f} ms" for (s, p), v in overhead.items()))
print(f"{'Mbit/s':>6} {'shards':>6} {'push':>5} {'workers':>7} {'step ms':>7} {'measured':>9} {'plan':>7} {'error':>7} "
      f"{'B/step sent':>11} {'steady':>9} {'resent':>6} {'model':>9} {'link eff.':>9} {'used':>5} {'plan util.':>10} {'cores':>5}")
for rate in rates:
    step = ratio * fp32_bytes * 8 / (rate * 1e6)
    with open(f"{d}/devices", "w") as f:
        f.write(f"k80 {step:.6f} 0\n")
    for s in shards:
        # Only the shards' links are shaped: nodes n1..nS at the rate, the others unshaped.
        for i in range(1, max(shards) + workers + 1):
            sh(cluster, "throttle", f"n{i}", f"{rate:g}mbit" if i <= s else "off", "--name", name)
        for precision in precisions.split():
            if precision == "bf16" and s not in bf16_shards:
                continue
            curve = []
            for n in range(1, workers + 1):
                p = plan(n, s, precision, step, 5000, rate, overhead[(s, precision)] * 1000)
                predicted = 5000 / p["seconds_without_revocations"]
                steps = max(60, int(predicted * seconds))
                measured, sent, steady, again, cores, every = run(n, s, precision, steps)
                modelled = p["ps_link_update_bytes"]  # what one update puts on shard 0's outbound link
                # The updates between two replicas: shard 0's, measured (its summary), and the model's.
                every_plan = p["replica_interval_updates"] or float("nan")
                bound = rate * 1e6 / 8 / modelled
                row = dict(rate=rate, shards=s, push=precision, workers=n, step_ms=step * 1000, measured=measured,
                           plan=predicted, error=measured / predicted - 1, sent_per_step=sent, steady_per_step=steady,
                           retransmitted_per_step=again, link_used=measured * steady / (rate * 1e6 / 8),
                           modelled_per_step=modelled,
                           efficiency=measured / bound, utilisation=p["ps_link_utilisation"], cores=cores,
                           replica_every=every, replica_every_plan=every_plan,
                           saturated=p["ps_link_utilisation"] >= 0.85)
                rows.append(row)
                curve.append((n, measured, predicted))
                print(f"{rate:6g} {s:6d} {precision:>5} {n:7d} {step * 1000:7.1f} {measured:9.2f} {predicted:7.2f} "
                      f"{row['error'] * 100:+6.1f}% {sent:11,.0f} {steady:9,.0f} {again:6.1f} {modelled:9,.0f} {row['efficiency']:9.2f} "
                      f"{row['link_used']:5.2f} {row['utilisation']:10.2f} {cores:5.2f} {every:6.1f}/{every_plan:<6.1f}"
                      f"{'  saturated' if row['saturated'] else ''}"
                      f"{'  cores busy: not the link alone' if cores > 0.9 * os.cpu_count() else ''}", flush=True)
            knee = lambda k: min(n for n, *v in curve if v[k] >= 0.95 * max(c[k + 1] for c in curve))
            knees.append(dict(rate=rate, shards=s, push=precision, measured=knee(0), plan=knee(1)))
print("knee (fewest workers within 5% of the most steps/s): measured vs plan")
for k in knees:
    print(f"  {k['rate']:g} Mbit/s, {k['shards']} shard(s), {k['push']}: {k['measured']} vs {k['plan']}"
          f"{'' if abs(k['measured'] - k['plan']) <= 1 else '  (off by more than 1)'}")
worst = max(abs(r["error"]) for r in rows)
sat = [r["efficiency"] for r in rows if r["saturated"]]
print(f"worst error {worst * 100:.1f}% over {len(rows)} shapes; link efficiency where saturated: "
      f"min {min(sat) if sat else float('nan'):.2f}, median {sorted(sat)[len(sat) // 2] if sat else float('nan'):.2f}")
if out:
    with open(out, "w") as f:
        json.dump(dict(rows=rows, knees=knees), f, indent=1)
PY
