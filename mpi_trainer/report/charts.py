"""The charts of `mpi_trainer report`: matplotlib figures (Agg backend) saved as PNG files.

Each function draws one figure from a Run (metrics.py) after series.assign_times, or from the
series.py values passed in, and writes it to `path`. Missing data gives a chart that says so.
"""
import logging
import math
import warnings

logging.getLogger("matplotlib").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from series import num, value_at  # noqa: E402

DPI = 90
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf"]
MARKS = {  # timeline kind: (colour, marker, legend)
    "lost": ("#d62728", "v", "revoked: lost"),
    "notice": ("#ff7f0e", "v", "revoked: notice"),
    "join": ("#2ca02c", "^", "joined"),
    "takeover": ("#9467bd", "D", "PS takeover"),
    "handover": ("#8c564b", "D", "PS handover"),
    "restart": ("#1f77b4", ">", "restart (new attempt)"),
    "checkpoint": ("#7f7f7f", "|", "checkpoint"),
    "checkpoint_failed": ("#000000", "x", "checkpoint failed"),
    "replica_checkpoint": ("#17becf", "s", "standby's replica checkpoint"),
    "stop": ("#e377c2", "s", "stop"),
    "error": ("#000000", "X", "error"),
}
QUIET = ("checkpoint", "replica_checkpoint")  # many per run: ticks, no vertical line


def time_label(virtual):
    return "virtual seconds" if virtual else "seconds of training (attempts end to end)"


def _xy(events, xkey, ykey):
    """(xs, ys) of events with both values; NaN between segments so that lines break there."""
    return _broken_line(events, lambda ev: (ev["_t"] if xkey == "time" else num(ev.get("global_step")),
                                            num(ev.get(ykey))))


def _broken_line(events, point):
    """(xs, ys) of point(ev) = (x, y) for events where both are known, NaN between attempts."""
    xs, ys, seg = [], [], None
    for ev in events:
        x, y = point(ev)
        if x is None or y is None:
            continue
        if seg is not None and ev["_segment"] != seg:
            xs.append(math.nan)
            ys.append(math.nan)
        seg = ev["_segment"]
        xs.append(x)
        ys.append(y)
    return xs, ys


SPARSE = 25  # fewer points than this in a series: each is marked (a lone point draws no line)


def _style(ys):
    """Line keywords for a series: markers when it has few points, or one alone between breaks."""
    known = [y for y in ys if not math.isnan(y)]
    alone = any((i == 0 or math.isnan(ys[i - 1])) and (i + 1 == len(ys) or math.isnan(ys[i + 1]))
                for i, y in enumerate(ys) if not math.isnan(y))
    return {"marker": "o", "ms": 3.5} if len(known) < SPARSE or alone else {}


def _empty(ax, text):
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777")


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def curves(runs, xkey, path):
    """Loss, train and test accuracy, and the learning rate of every run against time or global steps."""
    fig, (loss_ax, acc_ax, lr_ax) = plt.subplots(1, 3, figsize=(15, 4.2))
    drawn = False
    for i, run in enumerate(runs):
        color = COLORS[i % len(COLORS)]
        progress, evals = run.of("progress"), run.of("eval")
        x, y = _xy(progress, xkey, "loss")
        loss_ax.plot(x, y, color=color, lw=1.4, label=run.label, **_style(y))
        x, y = _xy(progress, xkey, "train_accuracy")
        acc_ax.plot(x, y, color=color, lw=1.4, **_style(y))
        ex, ey = _xy(evals, xkey, "test_accuracy")
        acc_ax.plot(ex, ey, color=color, lw=1.2, ls="--", marker="o", ms=4)
        lx, ly = _xy(progress, xkey, "lr")
        lr_ax.plot(lx, ly, color=color, lw=1.4, **_style(ly))
        drawn = drawn or bool(x or ex)
    virtual = all(r.virtual for r in runs)
    xlabel = "global step" if xkey == "step" else time_label(virtual) if runs else "time"
    if xkey == "time" and len({r.virtual for r in runs}) > 1:
        xlabel = "seconds (virtual seconds for virtual runs)"
    loss_ax.set(title="training loss", xlabel=xlabel, ylabel="loss")
    acc_ax.set(title="accuracy", xlabel=xlabel, ylabel="accuracy", ylim=(-0.02, 1.02))
    lr_ax.set(title="learning rate (as applied, --spike-guard caps included)", xlabel=xlabel, ylabel="rate")
    if not drawn:
        _empty(acc_ax, "no progress or eval events")
        _empty(lr_ax, "no progress events")
    handles = [Line2D([], [], color=COLORS[i % len(COLORS)], label=r.label) for i, r in enumerate(runs)]
    handles += [Line2D([], [], color="#444444", label="train"),
                Line2D([], [], color="#444444", ls="--", marker="o", ms=4, label="test")]
    acc_ax.legend(handles=handles, fontsize=8, loc="lower right")
    for ax in (loss_ax, acc_ax, lr_ax):
        ax.grid(alpha=0.3)
    _save(fig, path)


def _mark_style(mark):
    kind = mark["kind"]
    if kind == "revocation":
        kind = "notice" if mark.get("cause") == "notice" else "lost"
    return kind, MARKS.get(kind, ("#000000", "o", kind))


def _step_series(series, end):
    ts = [t for t, _ in series] + [end]
    vs = [v for _, v in series] + [series[-1][1]]
    return ts, vs


def _draw_counts(ax, counts, end):
    top = 1
    for i, (kind, series) in enumerate(sorted(counts.items())):
        ts, vs = _step_series(series, end)
        ax.step(ts, vs, where="post", color=COLORS[i % len(COLORS)], lw=2, label=f"{kind} workers")
        top = max(top, max(vs))
    if len(counts) > 1:
        times = sorted({t for s in counts.values() for t, _ in s})
        total = [sum(value_at(s, t) for s in counts.values()) for t in times]
        ts, vs = _step_series(list(zip(times, total)), end)
        ax.step(ts, vs, where="post", color="#333333", lw=1, ls=":", label="all workers")
        top = max(top, max(vs))
    return top


def _draw_marks(ax, marks, y):
    seen = set()
    for m in marks:
        if m["time"] is None:
            continue
        kind, (color, marker, legend) = _mark_style(m)
        quiet = kind in QUIET
        if not quiet:
            ax.axvline(m["time"], color=color, alpha=0.35, lw=1)
        ax.plot([m["time"]], [0.15 if quiet else y], marker=marker, color=color, ms=9 if quiet else 8,
                ls="none", label=None if kind in seen else legend, clip_on=False)
        seen.add(kind)
        if m["kind"] == "revocation" and m.get("global_step") is not None:
            ax.annotate(f"step {m['global_step']:.0f}", (m["time"], y), xytext=(3, 6),
                        textcoords="offset points", fontsize=8, color=color, rotation=60)
        elif m["kind"] == "restart":
            ax.annotate(f"attempt {m['attempt']}", (m["time"], y), xytext=(3, -14),
                        textcoords="offset points", fontsize=8, color=color)


def timeline(run, counts, marks, path):
    """Active workers per instance type over time, with revocations, joins, takeovers,
    checkpoints and restarts marked (like Figs. 1 and 4 of the ICAC'19 paper); global steps below."""
    fig, (ax, step_ax) = plt.subplots(2, 1, figsize=(12, 5.6), sharex=True,
                                      gridspec_kw={"height_ratios": [2.2, 1]})
    times = [e["_t"] for e in run.events if e["_t"] is not None]
    end = max(times) if times else 0.0
    top = _draw_counts(ax, counts, end) if counts else 1
    if not counts:
        _empty(ax, "no worker counts (no config or progress events)")
    _draw_marks(ax, marks, top + 0.6)
    ax.set(ylim=(0, top + 2.2), ylabel="active workers", title=f"{run.label}: workers and events")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="lower left", ncol=3)
    ax.grid(alpha=0.3)
    x, y = _xy(run.of("progress"), "time", "global_step")
    step_ax.plot(x, y, color="#333333", lw=1.4, label="global step")
    for m in marks:
        if m["time"] is not None and m.get("global_step") is not None and m["kind"] not in QUIET:
            _, (color, marker, _) = _mark_style(m)
            step_ax.plot([m["time"]], [m["global_step"]], marker=marker, color=color, ls="none", ms=7)
    step_ax.set(xlabel=time_label(run.virtual), ylabel="global step")
    step_ax.grid(alpha=0.3)
    _save(fig, path)


def throughput(run, workers, path):
    """Images per second (all workers and each) and staleness over time."""
    fig, (ips_ax, st_ax) = plt.subplots(2, 1, figsize=(12, 5.6), sharex=True)
    progress = run.of("progress")
    x, y = _xy(progress, "time", "images_per_second")
    ips_ax.plot(x, y, color="#222222", lw=2, label="all workers", **_style(y))
    x2, y2 = _xy(progress, "time", "mean_staleness")
    st_ax.plot(x2, y2, color="#222222", lw=2, label="mean", **_style(y2))
    legend = len(workers) <= 12
    for i, (rank, s) in enumerate(sorted(workers.items())):
        color = COLORS[i % len(COLORS)]
        label = f"rank {rank} ({s['type']})" if legend else None
        ips = [math.nan if v is None else v for v in s["ips"]]
        stale = [math.nan if v is None else v for v in s["staleness"]]
        ips_ax.plot(s["t"], ips, color=color, lw=1, label=label, **_style(ips))
        st_ax.plot(s["t"], stale, color=color, lw=1, **_style(stale))
    if not x:
        _empty(ips_ax, "no progress events")
    elif len([v for v in y if not math.isnan(v)]) < 2:
        _empty(st_ax, "one progress point: too few for a curve (see the notes above)")
    ips_ax.set(ylabel="images / s", title=f"{run.label}: throughput and staleness")
    st_ax.set(ylabel="staleness (updates)", xlabel=time_label(run.virtual))
    ips_ax.legend(fontsize=8, loc="lower left", ncol=4)
    for ax in (ips_ax, st_ax):
        ax.grid(alpha=0.3)
    _save(fig, path)


def _finish(run, key):
    """(times, predicted finish times) from a progress field of seconds left."""
    def point(ev):
        left, t = num(ev.get(key)), ev["_t"]
        return (t, t + left) if left is not None and t is not None else (None, None)
    return _broken_line(run.of("progress"), point)


def _cost_panel(ax, run, accumulated, final_cost, band, end):
    if accumulated:
        ax.plot(accumulated[0], accumulated[1], color="#1f77b4", lw=2, label="spent so far (reconstructed)")
    x, y = _xy(run.of("progress"), "time", "predicted_cost_usd")
    ax.plot(x, y, color="#ff7f0e", lw=1.2, ls="--", marker=".", label="live prediction of the total")
    if final_cost is not None and end is not None:
        ax.plot([end], [final_cost], marker="*", ms=14, color="#d62728", ls="none",
                label=f"final cost ${final_cost:.4g}")
    if band:
        ax.axhspan(band["p10"], band["p90"], color="#2ca02c", alpha=0.15, label="plan p10-p90")
        ax.axhline(band["median"], color="#2ca02c", lw=1, ls=":", label="plan median")
    if not (accumulated or x or final_cost is not None):
        _empty(ax, "no cost data")
    ax.set(ylabel="US dollars", title=f"{run.label}: cost and finish time against their live predictions")
    ax.set_ylim(bottom=0)


def _finish_panel(ax, run, end, band):
    x, y = _finish(run, "predicted_seconds_left")
    ax.plot(x, y, color="#ff7f0e", lw=1.2, ls="--", marker=".", label="live prediction (revocations included)")
    if not run.virtual:  # a virtual run's eta_seconds is the simulation's real time left
        x2, y2 = _finish(run, "eta_seconds")
        ax.plot(x2, y2, color="#9467bd", lw=1, ls=":", marker=".", label="rate only (eta_seconds)")
    if end is not None:
        ax.axhline(end, color="#d62728", lw=1, label="the end")
    if band:
        ax.axhspan(band["p10"], band["p90"], color="#2ca02c", alpha=0.15, label="plan p10-p90")
    if not x:
        _empty(ax, "no predictions")
    ax.set(ylabel="finish time (s)", xlabel=time_label(run.virtual))


def cost(run, accumulated, final_cost, bands, path):
    """Dollars spent so far against the live prediction of the total, and the predicted finish
    time against the end (with the plan's bands when given)."""
    fig, (ax, fin_ax) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    times = [e["_t"] for e in run.events if e["_t"] is not None]
    end = max(times) if times else None
    _cost_panel(ax, run, accumulated, final_cost, bands.get("cost_usd"), end)
    _finish_panel(fin_ax, run, end, bands.get("time_seconds"))
    for a in (ax, fin_ax):
        a.legend(fontsize=8, loc="lower right")
        a.grid(alpha=0.3)
    _save(fig, path)
