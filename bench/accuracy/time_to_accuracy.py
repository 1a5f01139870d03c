"""Tables and plot for bench/accuracy/time_to_accuracy.sh (issue 19): reads OUT/NAME.sSEED.jsonl.

usage: time_to_accuracy.py OUT SEEDS "1 2 4 8" STEPS MODEL EPOCHS [POLICY]
POLICY: the flags of the "default" column (--policy of the script; empty: the trainer's defaults).
"""
import json
import re
import statistics
import sys

from run_metrics import mean_curve, read_run

if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0)
if len(sys.argv) < 7:
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    sys.exit(2)
out, seeds, workers, steps, model, epochs = sys.argv[1], int(sys.argv[2]), [int(w) for w in sys.argv[3].split()], \
    int(sys.argv[4]), sys.argv[5], sys.argv[6]
policy = sys.argv[7].strip() if len(sys.argv) > 7 else ""
NAME = {"naive": "naive", "default": f"`{policy}`" if policy else "default"}
# The paper (ICAC'19, Table I / Fig. 2: ResNet-32 on CIFAR-10, 64K steps, K80 workers, TensorFlow's
# asynchronous SGD with one worker's rate): hours and final accuracy per cluster size.
PAPER = {1: (3.91, 93.07), 2: (2.16, 91.93), 4: (1.05, 91.23), 8: (0.51, 88.79)}


def load(name, seed):
    """(evals, summary) of a finished run, None when it did not run or finish (a cut-short bench)."""
    try:
        evals, summary = read_run(f"{out}/{name}.s{seed}.jsonl")
    except FileNotFoundError:
        return None
    return (evals, summary) if summary is not None else None


def runs(name):
    return [r for r in (load(name, s) for s in range(1, seeds + 1)) if r is not None]


def mean(xs):
    return statistics.mean(xs) if xs else float("nan")


base = runs("w1")
if not base:
    sys.exit(f"time_to_accuracy: no finished one-worker run in {out}")
base_acc = mean([s["test_accuracy"] for _, s in base]) * 100
target = base_acc - 1.0


def reach(evals):
    """Virtual seconds when the test accuracy first reaches the target (None: never)."""
    return next((t for t, a in evals if a * 100 >= target), None)


def row(name, label):
    rs = runs(name)
    if not rs:
        return None  # not run yet (a bench cut short): left out of the table
    accs = [s["test_accuracy"] * 100 for _, s in rs]
    times = [reach(e) for e, _ in rs]
    got = [t for t in times if t is not None]
    return {
        "config": name, "label": label,
        "accuracy": mean(accs), "accuracy_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
        "delta_points": mean(accs) - base_acc,
        "minutes_to_target": mean(got) / 60 if got else None, "reached": len(got), "seeds": len(rs),
        "run_minutes": mean([s["virtual_seconds"] for _, s in rs]) / 60,
        "cost_usd": mean([s["cost_usd"] for _, s in rs]),
        "revocations": mean([s["revocations"] for _, s in rs]),
        "curves": [e for e, _ in rs],
    }


table = [row("w1", "1 worker")]
for n in workers:
    if n == 1:
        continue
    for p in ("naive", "default"):
        table.append(row(f"w{n}-{p}", f"{n} workers, {NAME[p]}"))
for p in ("naive", "default"):
    table.append(row(f"w4-revoked-{p}", f"4 workers, one revoked at 25%, {NAME[p]}"))
    table.append(row(f"fig5-{p}", f"Fig. 5: 1 worker, +1 every quarter, {NAME[p]}"))
missing = [r for r in table if r is None]
table = [r for r in table if r is not None]
if missing:
    print(f"time_to_accuracy: {len(missing)} configuration(s) have no finished run yet; left out")
t1 = table[0]["minutes_to_target"]
for r in table:
    r["speedup"] = t1 / r["minutes_to_target"] if t1 and r["minutes_to_target"] else None

lines = [f"{model}, {steps} global steps ({epochs} epochs), batch per step as the run's, emulated K80 workers, "
         f"up to {seeds} seed(s) (fewer where a row says so). Target: one worker's final test accuracy minus 1 point = {target:.2f}%.", "",
         "| configuration | final test accuracy | vs 1 worker (points) | virtual minutes to target | speed-up | run (virtual min) | cost ($) | paper: accuracy vs 1 / speed-up |",
         "|---|---|---|---|---|---|---|---|"]
for r in table:
    static = re.fullmatch(r"w(\d+)(-naive|-default)?", r["config"])  # a static cluster of n workers
    n = int(static.group(1)) if static else None
    paper = ""
    if n in PAPER and n > 1:
        paper = f"{PAPER[n][1] - PAPER[1][1]:+.2f} / {PAPER[1][0] / PAPER[n][0]:.2f}x"
    elif n == 1:
        paper = f"{PAPER[1][1]:.2f}% in {PAPER[1][0]} h"
    reached = "" if r["reached"] == r["seeds"] else f" ({r['reached']}/{r['seeds']} seeds)"
    label = r["label"] + ("" if r["seeds"] == seeds else f" ({r['seeds']} seed{'s' if r['seeds'] > 1 else ''})")
    lines.append(
        f"| {label} | {r['accuracy']:.2f}% ± {r['accuracy_sd']:.2f} | {r['delta_points']:+.2f} | "
        + (f"{r['minutes_to_target']:.2f}{reached}" if r["minutes_to_target"] else "not reached") + " | "
        + (f"{r['speedup']:.2f}x" if r["speedup"] else "-") + f" | {r['run_minutes']:.2f} | {r['cost_usd']:.3f} | {paper} |")
text = "\n".join(lines)
print(text)
open(f"{out}/table.md", "w").write(text + "\n")
json.dump({"target": target, "base_accuracy": base_acc, "steps": steps, "model": model, "seeds": seeds,
           "rows": [{k: v for k, v in r.items() if k != "curves"} for r in table]},
          open(f"{out}/results.json", "w"), indent=1)

goals = []
for n, points, speed in ((4, 1.0, 3.5), (8, 2.0, 6.5)):
    r = next((x for x in table if x["config"] == f"w{n}-default"), None)
    if r is None:
        continue
    ok_a = r["delta_points"] >= -points
    ok_s = r["speedup"] is not None and r["speedup"] >= speed
    goals.append(ok_a and ok_s)
    print(f"goal {n} workers ({NAME['default']} policy): accuracy {r['delta_points']:+.2f} points (at most {points} lower: "
          f"{'met' if ok_a else 'MISSED'}), speed-up " + (f"{r['speedup']:.2f}x" if r["speedup"] else "never reached")
          + f" (at least {speed}x: {'met' if ok_s else 'MISSED'})")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, p in zip(axes, ("naive", "default")):
        for r in table:
            if r["config"] != "w1" and not r["config"].endswith(p):
                continue
            ts, acc = mean_curve(r["curves"])
            ax.plot([t / 60 for t in ts], [a * 100 for a in acc], label=r["label"].replace(f", {NAME[p]}", ""), lw=1.3)
        ax.axhline(target, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_title(f"{NAME[p]} policy".replace("`", ""))
        ax.set_xlabel("virtual time (minutes, log scale)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].set_ylim(max(0, target - 40), 100)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Test accuracy against virtual time, emulated K80 workers ({model}, {steps} steps, mean of {seeds} seeds)")
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(f"{out}/accuracy_vs_time.{ext}", dpi=110)
except ImportError:
    print("no plot: matplotlib missing (launch/setup.sh --with-bench installs it)")
sys.exit(0 if all(goals) else 1)
