"""mpi_trainer report --csv and --mlflow. --csv: every scalar of the runs as one long CSV table
(OUT/scalars.csv), the same tags TensorBoard shows for --tensorboard (app/tensorboard.cpp), one
row per value:

  run,attempt,event,global_step,seconds,unix_time,tag,value

`seconds` is the report's time axis (from the run's first start, downtime between attempts
included; virtual seconds in a virtual run), empty where the event has no time. Read it with
pandas (`pd.read_csv(...).pivot_table(index=["run", "global_step"], columns="tag", values="value")`),
a spreadsheet, or an importer into any tracker. --mlflow: the same scalars into MLflow runs
(log_mlflow below).
"""
import csv
import json
import math
import os
import time

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


# MLflow (report --mlflow URI): an importer through MLflow's own client, not a writer of its file
# store from the trainer: that store is in maintenance mode (MLflow 3 refuses it unless
# MLFLOW_ALLOW_FILE_STORE=true) and the client reaches every backend a team runs (a tracking
# server, sqlite:///..., Databricks) with the same code. Run it during training to see a run so
# far, and again after: each import replaces the MLflow run it made of the same metrics file.
MLFLOW_BATCH = 1000  # metrics per log_batch call (the tracking API's limit)
MLFLOW_PARAM_CHARS = 6000  # a parameter value's limit


def _mlflow_value(v):
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return text[:MLFLOW_PARAM_CHARS]


def log_mlflow(runs, uri, experiment):
    """One MLflow run per metrics file in EXPERIMENT at tracking URI: params from the first config
    event (fields a later attempt changed as tags config_changed.<field>), every scalar of
    write_csv with its global step and time, the summary's outcome as the run's status. Returns
    [(label, run id, metric values, replaced run id or None)]. Raises ImportError without mlflow."""
    import logging

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its store's set-up chatter
    logging.getLogger("alembic").setLevel(logging.WARNING)

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    exp_id = found.experiment_id if found else client.create_experiment(experiment)
    done = []
    for run in runs:
        source = os.path.abspath(run.path)
        old = client.search_runs([exp_id], filter_string=f"tags.`mpi_trainer.metrics` = '{source}'")
        for r in old:
            client.delete_run(r.info.run_id)
        times = [e["unix_time"] for e in run.events if isinstance(e.get("unix_time"), (int, float))]
        t0 = min(times) if times else time.time()
        configs = run.configs
        first = configs[0] if configs else {}
        tags = {"mpi_trainer.metrics": source, "mpi_trainer.attempts": str(max(1, len(configs)))}
        for c in configs[1:]:
            for k, v in c.items():
                if k != "event" and not k.startswith("_") and first.get(k) != v:
                    tags[f"config_changed.{k}"] = _mlflow_value(v)
        mr = client.create_run(exp_id, start_time=int(t0 * 1000), run_name=run.label, tags=tags)
        rid = mr.info.run_id
        params = [Param(k, _mlflow_value(v)) for k, v in first.items()
                  if k != "event" and not k.startswith("_") and v is not None]
        for i in range(0, len(params), 100):
            client.log_batch(rid, params=params[i:i + 100])
        metrics = []
        for ev in run.events:
            t = ev.get("unix_time")
            if not isinstance(t, (int, float)):
                t = t0 + (ev.get("_t") or 0.0)
            for tag, value in _scalars(ev):
                metrics.append(Metric(tag, float(value), int(t * 1000), int(ev.get("global_step") or 0)))
        for i in range(0, len(metrics), MLFLOW_BATCH):
            client.log_batch(rid, metrics=metrics[i:i + MLFLOW_BATCH])
        s = run.summary
        if s is None:
            client.set_tag(rid, "mpi_trainer.state", "no summary yet (running, or killed)")
        else:
            outcome = {k: s.get(k) for k in ("exit_code", "stopped_by", "revocations", "attempts")}
            client.log_batch(rid, tags=[RunTag(f"summary.{k}", _mlflow_value(v)) for k, v in outcome.items()])
            end = s.get("unix_time") if isinstance(s.get("unix_time"), (int, float)) else max(times, default=t0)
            client.set_terminated(rid, "FINISHED" if s.get("exit_code") == 0 else "FAILED", int(end * 1000))
        done.append((run.label, rid, len(metrics), old[0].info.run_id if old else None))
    return done
