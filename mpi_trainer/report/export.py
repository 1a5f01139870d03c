"""mpi_trainer report --csv: every scalar of the runs as one long CSV table (OUT/scalars.csv), the
same tags TensorBoard shows for --tensorboard (app/tensorboard.cpp), one row per value:

  run,attempt,event,global_step,seconds,unix_time,tag,value

`seconds` is the report's time axis (from the run's first start, downtime between attempts
included; virtual seconds in a virtual run), empty where the event has no time. Read it with
pandas (`pd.read_csv(...).pivot_table(index=["run", "global_step"], columns="tag", values="value")`),
a spreadsheet, or an importer into any tracker.
"""
import csv
import math

COLUMNS = ["run", "attempt", "event", "global_step", "seconds", "unix_time", "tag", "value"]


def _scalars(ev):
    """[(tag, value)] of one event, as app/tensorboard.cpp names them."""
    out = []

    def add(src, key, tag):
        v = src.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((tag, v))

    kind = ev["event"]
    if kind == "progress":
        for key, tag in (("loss", "train/loss"), ("train_accuracy", "train/accuracy"), ("lr", "train/lr"),
                         ("momentum", "train/momentum"), ("images_per_second", "throughput/images_per_second"),
                         ("active_workers", "workers/active"), ("mean_staleness", "staleness/mean"),
                         ("dropped_stale_pushes", "staleness/dropped_pushes"),
                         ("predicted_seconds_left", "time/predicted_seconds_left"),
                         ("predicted_cost_usd", "cost/predicted_usd")):
            add(ev, key, tag)
        for w in ev.get("workers") or []:
            if isinstance(w, dict) and isinstance(w.get("rank"), int):
                add(w, "images_per_second", f"worker/{w['rank']}/images_per_second")
                add(w, "mean_staleness", f"worker/{w['rank']}/staleness")
    elif kind == "eval":
        add(ev, "test_accuracy", "test/accuracy")
        add(ev, "test_loss", "test/loss")
    elif kind in ("revocation", "join"):
        add(ev, "active_workers", "workers/active")
    elif kind == "summary":
        add(ev, "cost_usd", "cost/usd")
        add(ev, "train_seconds", "time/run_seconds")
        add(ev, "test_accuracy", "test/accuracy")
    return out


def write_csv(runs, path):
    """Writes the table; returns the number of rows. Events carry _t and _attempt (series.assign_times)."""
    rows = 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for run in runs:
            for ev in run.events:
                for tag, value in _scalars(ev):
                    t = ev.get("_t")
                    w.writerow([run.label, ev.get("_attempt", 0) + 1, ev["event"], ev.get("global_step", ""),
                                "" if t is None else f"{t:.6g}", ev.get("unix_time", ""), tag, repr(value)])
                    rows += 1
    return rows
