#!/usr/bin/env bash
# Where the parameter server's own network link stops a cluster from growing (issue 44): for
# each model and worker below, `mpi_trainer plan` at 10, 25 and 100 Gbit/s per shard link, one
# and two shards, fp32 and bf16 pushes (--push-precision), prints the worker count at which the shards' links are always busy, the count
# at which their updates would be, and which comes first; beside it the hand calculation
# (exchange cycle / one message's time on the busiest shard's link) and a simulated check: the
# global steps per second of twice that many workers against the link's bound (1 / that time).
#   resnet32-t2t on V100: the paper's workload and device (the shipped table's 0.069 s a step).
#   resnet32 on H200: measured here (bench/README.md, "Measured on an NVIDIA H200": 64,000 steps
#   in 407.5 s, 6.37 ms a step); not in the shipped table, so given here as a device file.
# Evidence S (simulator). Each worker on its own 0.1 ms / 10 Gbit/s link (plan's default).
#   bench/perf/plan_nic.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_parse "" "$@"
bench_env
printf 'h200 0.00637 0.02\n' > "$dir/devices"
# plan needs a price for every type; nothing here reads a cost.
printf 'h200 1 1\nps 1 1\n' > "$dir/prices"
/usr/bin/python3 - "$trainer" "$dir" <<'PY'
import json, subprocess, sys
trainer, d = sys.argv[1], sys.argv[2]
rows = [("resnet32-t2t", "v100", 0.069, 1857722, []),
        ("resnet32", "h200", 0.00637, 464154, ["--devices", f"{d}/devices", "--prices", f"{d}/prices"])]
def plan(model, typ, extra, workers, link, shards, precision):
    out = subprocess.run([trainer, "plan", "--json", "--model", model, "--worker-types", typ, "--workers", str(workers),
                          "--ps-link", str(link), "--num-ps", str(shards), "--revocation-model", "none",
                          "--push-precision", precision,
                          "--steps", "20000", "--draws", "1"] + extra, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
print(f"{'model':<13} {'worker':<6} {'Gbit/s':>6} {'shards':>6} {'push':>5} {'link sat.':>9} {'by hand':>8} {'updates sat.':>12} "
      f"{'first':>7} {'2x workers: steps/s':>20} {'link bound':>10}")
for model, typ, step, params, extra in rows:
    for link, shards, precision in ((l, s, p) for l in (10, 25, 100) for s in (1, 2) for p in ("fp32", "bf16")):
            value = 2 if precision == "bf16" else 4
            p = plan(model, typ, extra, 1, link, shards, precision)
            framing = 1514 / 1448  # TCP's headers on Ethernet: payload per frame
            wire = params * value / shards * 8 * framing / (link * 1e9)  # about half each with two shards
            # Each way the slower of the worker's own link (10 Gbit/s) and the shard's.
            cycle = step + 2 * (0.0001 + max(params * value * 8 * framing / 10e9, wire))
            n = p["ps_link_saturation_workers"]
            big = plan(model, typ, extra, max(2, round(2 * n)), link, shards, precision)
            rate = big["global_steps"] / big["seconds_without_revocations"]
            bound = min(n, p["ps_compute_saturation_workers"]) / cycle  # = 1 / the busier resource's time
            print(f"{model:<13} {typ:<6} {link:>6} {shards:>6} {precision:>5} {n:>9.1f} {cycle / wire:>8.1f} "
                  f"{p['ps_compute_saturation_workers']:>12.1f} {p['ps_limit']:>7} "
                  f"{round(2 * n):>4}: {rate:>14.0f} {bound:>10.0f}")
PY
