"""Test accuracy against virtual time for any virtual runs' metrics files, grouped into curves.

usage: /usr/bin/python3 bench/accuracy/plot_curves.py OUT "LABEL=RUN.jsonl[,RUN.jsonl...]" ... \
           [--target PERCENT] [--deadline MINUTES] [--title TEXT] [--ymin PERCENT] [--legend LOC]

Each LABEL=FILES argument is one curve: with several files (seeds), the mean of their evaluations
at each global step (the runs must share --eval-every-steps), each seed drawn thin beside it.
--target draws a horizontal line (one worker's final accuracy less 1 point, say), --deadline a
vertical one (one worker's minutes to that target divided by the speed-up goal). Writes OUT.png
and OUT.svg (needs python3-matplotlib, which launch/setup.sh installs). bench/README.md's
docs/figures/time_to_accuracy_20epochs_momentum.png came from it.
"""
import argparse

import matplotlib

from run_metrics import mean_curve, read_run

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def evals(path):
    """(virtual minutes, test accuracy %) of every evaluation of one run."""
    return [(t / 60, a * 100) for t, a in read_run(path)[0]]


p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("out")
p.add_argument("curves", nargs="+", metavar="LABEL=FILES")
p.add_argument("--target", type=float)
p.add_argument("--deadline", type=float)
p.add_argument("--title", default="")
p.add_argument("--ymin", type=float)
p.add_argument("--legend", default="lower right", help="where the legend goes (matplotlib's loc)")
a = p.parse_args()

fig, ax = plt.subplots(figsize=(8, 5))
for i, spec in enumerate(a.curves):
    label, sep, files = spec.partition("=")
    if not sep or not files:
        p.error(f"'{spec}': expected LABEL=RUN.jsonl[,RUN.jsonl...]")
    try:
        runs = [evals(f) for f in files.split(",")]
    except (OSError, ValueError, KeyError) as e:
        p.error(f"'{spec}': {e}")
    if not all(runs):
        p.error(f"'{spec}': a file without evaluations of a virtual run")
    color = f"C{i}"
    if len(runs) > 1:
        for r in runs:
            ax.plot([t for t, _ in r], [y for _, y in r], color=color, alpha=0.3, lw=1)
        label += f" (mean of {len(runs)})"
    ax.plot(*mean_curve(runs), color=color, lw=2, label=label)
if a.target is not None:
    ax.axhline(a.target, color="gray", lw=1, ls=":")
    ax.text(0.01, a.target, f" target {a.target:g}%", color="gray", fontsize=8, va="bottom",
            transform=ax.get_yaxis_transform())
if a.deadline is not None:
    ax.axvline(a.deadline, color="tab:red", lw=1, ls=":")
    ax.text(a.deadline, 0.5, f" {a.deadline:g} min", color="tab:red", fontsize=8, transform=ax.get_xaxis_transform())
if a.ymin is not None:
    ax.set_ylim(bottom=a.ymin)
ax.set_xlabel("virtual minutes")
ax.set_ylabel("test accuracy (%)")
ax.set_title(a.title, fontsize=9)
ax.grid(alpha=0.3)
ax.legend(fontsize=8, loc=a.legend)
fig.tight_layout()
for ext in ("png", "svg"):
    fig.savefig(f"{a.out}.{ext}", dpi=110)
print(f"wrote {a.out}.png and {a.out}.svg")
