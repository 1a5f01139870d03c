#!/usr/bin/python3
"""mpi_trainer report: one self-contained HTML page (and its PNG charts, and report.json) from
runs' --metrics files, optionally scored against an `mpi_trainer plan --json` forecast.

Exit codes: 0 done; 2 usage; 3 an input it cannot use (nothing written) or one it read only in
part (a truncated last line, metrics of an older version, damaged lines: a partial report is
written); 1 a bug here. Problems go to stderr as one line, all of them into the page.
"""
import argparse
import base64
import datetime
import html
import json
import math
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from metrics import ReportInputError, one_line, read_plan, read_run  # noqa: E402
import series  # noqa: E402

PROG = "mpi_trainer report"
EXIT_INPUT = 3
STYLE = """body{font-family:sans-serif;margin:24px;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}
th{background:#eee}td.l,th.l{text-align:left}
.flag{background:#fde2e1;border:2px solid #d62728;padding:8px 12px;margin:8px 0}
.problem{background:#fff4d6;border:1px solid #e0a800;padding:6px 10px;margin:6px 0}.note{color:#555}
.inside{background:#e3f6e3}.outside{background:#fde2e1}img{max-width:100%;display:block;margin:6px 0 18px}"""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Turn runs' --metrics JSON Lines files into one self-contained HTML page: loss and "
                    "accuracy against time and steps (runs overlaid), a timeline of workers with "
                    "revocations, joins, takeovers, checkpoints and restarts, throughput and staleness, "
                    "cost against its live prediction, a summary table, and with --plan the forecast "
                    "next to what happened. Writes OUT/index.html, OUT/report.json and the charts as PNG "
                    "(with --csv also OUT/scalars.csv).",
        epilog="Exit 0: done; 2: usage; 3: an input that cannot be used (no report) or was read only in "
               "part (truncated, an older version, damaged lines: a partial report is written, the first "
               "problem is printed, all are in the page).")
    p.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="metrics file of a run (train --metrics)")
    p.add_argument("--plan", metavar="PLAN.json", help="output of `mpi_trainer plan --json [--per-draw]`: "
                   "each run's time, cost and revocations against the forecast's p10-p90 band")
    p.add_argument("--label", action="append", default=[], metavar="NAME",
                   help="name of a run in the charts, once per run in order (default: the file name)")
    p.add_argument("-o", "--out", required=True, metavar="OUT", help="output directory (created)")
    p.add_argument("--mlflow", metavar="URI",
                   help="also log each run into MLflow at tracking URI (a server's http(s)://..., "
                        "sqlite:///FILE, databricks): its config as params, every scalar (the tags --csv "
                        "writes) with its step, the outcome as the run's status; importing the same metrics "
                        "file again replaces its MLflow run. Needs MLflow's client (pip install "
                        "mlflow-skinny; launch/setup.sh puts it in .venv: MT_PYTHON=.venv/bin/python)")
    p.add_argument("--mlflow-experiment", metavar="NAME", default="mpi_trainer",
                   help="the MLflow experiment (created when missing; default mpi_trainer)")
    p.add_argument("--csv", action="store_true",
                   help="also write OUT/scalars.csv: every scalar of the runs (the tags --tensorboard writes), "
                        "one row per value: run,attempt,event,global_step,seconds,unix_time,tag,value")
    args = p.parse_args(argv)
    if len(args.label) > len(args.runs):
        p.error(f"{len(args.label)} --label for {len(args.runs)} run(s)")
    return args


def unique_labels(runs):
    seen = {}
    for run in runs:
        n = seen.get(run.label, 0) + 1
        seen[run.label] = n
        if n > 1:
            run.label = f"{run.label} ({n})"


def load(args):
    """(runs, plan); raises ReportInputError for an input that cannot be used at all."""
    runs = []
    for i, path in enumerate(args.runs):
        run = read_run(path, args.label[i] if i < len(args.label) else None)
        series.assign_times(run)
        runs.append(run)
    unique_labels(runs)
    return runs, read_plan(args.plan) if args.plan else None


def draw(name, problems, fn, *a):
    """Draws one chart; a failure becomes a problem, not a traceback."""
    try:
        fn(*a)
        return True
    except Exception as e:  # noqa: BLE001 - any chart failure is reported as one line
        problems.append(one_line(f"chart {name} could not be drawn: {type(e).__name__}: {e}"))
        return False


def build(runs, plan, out):
    """Draws every chart into `out`; returns (charts, records, problems)."""
    import charts  # matplotlib loads only once the inputs have been read
    problems = [p for r in runs for p in r.problems]
    shown = []

    def chart(cid, file, title, fn, *a, run=None):
        if draw(cid, problems, fn, *a, os.path.join(out, file)):
            shown.append({"id": f"chart-{cid}", "file": file, "title": title, "run": run})

    chart("curves-time", "curves_time.png", "Loss and accuracy against time", charts.curves, runs, "time")
    chart("curves-steps", "curves_steps.png", "Loss and accuracy against global steps", charts.curves, runs, "step")
    records = []
    for i, run in enumerate(runs, 1):
        row = series.summary_row(run)
        marks = series.timeline(run)
        scores = series.score_plan(plan, run, row) if plan else None
        bands = {k: scores[k] for k in ("cost_usd", "time_seconds")} if scores else {}
        for cid, title, fn, a in (
                ("timeline", "Workers and events over time", charts.timeline, (run, series.worker_counts(run), marks)),
                ("throughput", "Throughput and staleness", charts.throughput, (run, series.per_worker(run))),
                ("cost", "Cost and finish time against their live predictions", charts.cost,
                 (run, series.accumulated_cost(run), series.num(row["cost_usd"]), bands))):
            chart(f"{cid}-{i}", f"{cid}_{i}.png", f"{run.label}: {title}", fn, *a, run=run.label)
        records.append({"label": run.label, "file": run.path, "virtual": run.virtual,
                        "version": run.config_value("version"), "metrics_schema": run.config_value("metrics_schema"),
                        "summary": row, "timeline": marks, "plan": scores,
                        "problems": run.problems, "notes": run.notes + series.data_notes(run),
                        "config": config_fields(run)})
    return shown, records, problems


def config_fields(run):
    """The run's configuration: its first config event's fields (a later attempt's that differ
    are given as "first -> last")."""
    cfgs = run.configs
    if not cfgs:
        return {}
    out = {k: v for k, v in cfgs[0].items() if k != "event" and not k.startswith("_")}
    for k, v in cfgs[-1].items():
        if k in out and v != out[k] and not k.startswith("_"):
            out[k] = f"{json.dumps(out[k]) if not isinstance(out[k], str) else out[k]} -> " \
                     f"{json.dumps(v) if not isinstance(v, str) else v}"
    return out


def config_table(records):
    """One row per configuration field, one column per run."""
    fields = []
    for r in records:
        fields += [k for k in r["config"] if k not in fields]
    if not fields:
        return '<p class="note">no config event: the configuration is not known</p>'
    head = "".join(f'<th data-run="{esc(r["label"])}">{esc(r["label"])}</th>' for r in records)
    rows = []
    for f in fields:
        cells = []
        for r in records:
            v = r["config"].get(f)
            text = "" if v is None else v if isinstance(v, str) else json.dumps(v)
            cells.append(f'<td class="l" data-field="{esc(f)}">{esc(text)}</td>')
        rows.append(f'<tr><th class="l">{esc(f)}</th>{"".join(cells)}</tr>')
    return (f'<table id="config"><thead><tr><th class="l">field</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def fmt(field, v):
    """A table cell's text."""
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if field == "cost_usd":
        return f"${v:.4g}" if abs(v) < 1 else f"${v:,.2f}"
    if field in ("test_accuracy",):
        return f"{100 * v:.2f}%"
    if field.endswith("seconds"):
        return f"{v:,.1f} s"
    return f"{v:g}" if isinstance(v, float) else str(v)


def esc(v):
    return html.escape(str(v), quote=True)


def cell(field, v, title=None):
    value = "" if v is None else (json.dumps(v) if not isinstance(v, str) else v)
    tip = f' title="{esc(title)}"' if title else ""
    return f'<td data-field="{field}" data-value="{esc(value)}"{tip}>{esc(fmt(field, v))}</td>'


COLUMNS = (("global_step", "global steps"), ("time_seconds", "time"), ("cost_usd", "cost"),
           ("test_accuracy", "test accuracy"), ("revocations", "revocations"), ("steps_lost", "steps lost"),
           ("checkpoint_failures", "checkpoint failures"), ("lr_cuts", "rate caps"), ("attempts", "attempts"),
           ("exit_code", "exit code"))


def summary_table(records):
    head = "".join(f'<th data-field="{f}">{esc(t)}</th>' for f, t in COLUMNS)
    rows = []
    for r in records:
        s = r["summary"]
        tips = {"revocations": f"lost {s['revoked_lost']}, notice {s['revoked_notice']}",
                "steps_lost": f"revoked workers' {s['work_lost_steps']}, takeovers' {s['takeover_lost_updates']}, "
                              f"restarts' {s['restart_lost_steps']}",
                "time_seconds": "virtual seconds" if r["virtual"] else "train_seconds",
                "lr_cuts": "times --spike-guard capped the learning rate"}
        cells = "".join(cell(f, s[f], tips.get(f)) for f, _ in COLUMNS)
        status = "warnings" if s["warnings"] else ("summary" if s["from_summary"] else "no summary")
        rows.append(f'<tr data-run="{esc(r["label"])}" data-status="{status}"><td class="l">{esc(r["label"])}</td>'
                    f"{cells}</tr>")
    return (f'<table id="summary"><thead><tr><th class="l">run</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


MEASURES = {("time_seconds", "time_seconds", True): "time (virtual)",
            ("time_seconds", "time_seconds", False): "time (train_seconds)",
            ("time_seconds", "wall_seconds", False): "time (wall clock, restarts included)",
            ("cost_usd", "cost_usd", True): "cost", ("cost_usd", "cost_usd", False): "cost",
            ("revocations", "revocations", True): "revocations", ("revocations", "revocations", False): "revocations",
            ("revocations", "job_revocations", False): "revocations (every attempt)"}


def forecast_table(records, plan):
    draws = "per-draw revocations" if plan["per_draw"].get("revocations") else "no per-draw data"
    rows = []
    for r in records:
        for metric in ("time_seconds", "cost_usd", "revocations"):
            b = r["plan"][metric]
            what = MEASURES.get((metric, b.get("measure"), r["virtual"]), metric)
            inside = b["inside_band"]
            word, cls = {True: ("inside", "inside"), False: ("outside", "outside")}.get(inside, ("no band", "note"))
            nums = "".join(f'<td data-field="{k}">{esc(fmt(metric, b[k]))}</td>'
                           for k in ("actual", "p10", "median", "p90"))
            rows.append(f'<tr data-run="{esc(r["label"])}" data-metric="{metric}" '
                        f'data-inside-band="{json.dumps(inside)}"><td class="l">{esc(r["label"])}</td>'
                        f'<td class="l">{what}</td>{nums}<td class="{cls}">{word}</td></tr>')
    notes = "".join(f'<p class="note" data-run="{esc(r["label"])}">{esc(r["label"])}: {esc(n)}</p>'
                    for r in records for n in r["plan"]["notes"])
    return (f'<p>Forecast: <code>{esc(plan["_path"])}</code> ({esc(plan.get("draws", "?"))} draws, {draws}; '
            f'revocations mean {esc(fmt("x", plan.get("revocations_mean")))}).</p>'
            '<table id="forecast"><thead><tr><th class="l">run</th><th class="l">outcome</th><th>actual</th>'
            '<th>p10</th><th>median</th><th>p90</th><th>p10-p90 band</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{notes}')


def headline(warning):
    if "learned nothing" in warning:
        return "this run learned nothing"
    return one_line(warning.split(":")[0], 80)


def flags(records):
    out = []
    for r in records:
        for w in r["summary"]["warnings"]:
            out.append(f'<div class="flag" role="alert" id="warning-{len(out) + 1}" data-run="{esc(r["label"])}">'
                       f'<strong>&#9888; {esc(r["label"])}: {esc(headline(w))}</strong><br>{esc(w)}</div>')
    return "".join(out)


def img(out, c):
    with open(os.path.join(out, c["file"]), "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    return (f'<figure><img id="{c["id"]}" data-chart="{c["id"][6:]}" alt="{esc(c["title"])}" '
            f'src="data:image/png;base64,{data}"><figcaption>{esc(c["title"])} ({esc(c["file"])})'
            "</figcaption></figure>")


def page(out, shown, records, problems, plan):
    parts = [f"<h1>mpi_trainer report</h1><p>{len(records)} run(s): "
             + ", ".join(f'<code>{esc(r["file"])}</code>' for r in records)
             + f'. Written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.</p>']
    if problems:
        parts.append('<div id="problems">' + "".join(f'<p class="problem">{esc(p)}</p>' for p in problems) + "</div>")
    parts.append('<div id="warnings">' + flags(records) + "</div>")
    parts += [f'<p class="note" data-run="{esc(r["label"])}">{esc(r["label"])}: {esc(n)}</p>'
              for r in records for n in r["notes"]]
    parts += ["<h2>Summary</h2>", summary_table(records)]
    parts += ['<h2 id="config-section">Configuration</h2>', config_table(records)]
    if plan:
        parts += ['<h2 id="forecast-section">Forecast and outcome</h2>', forecast_table(records, plan)]
    parts.append("<h2>Training curves</h2>")
    parts += [img(out, c) for c in shown if c["run"] is None]
    for i, r in enumerate(records, 1):
        parts.append(f'<section id="run-{i}" data-run="{esc(r["label"])}"><h2>{esc(r["label"])}</h2>')
        parts += [img(out, c) for c in shown if c["run"] == r["label"]]
        parts.append("</section>")
    parts.append('<p class="note">Times: virtual seconds for virtual runs, else seconds since the process '
                 "started; restarted attempts and takeovers are laid end to end. Data: report.json.</p>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>mpi_trainer report</title>'
            f'<style>{STYLE}</style></head><body>{"".join(parts)}</body></html>\n')


def plan_record(plan):
    if not plan:
        return None
    keep = ("seconds", "cost_usd", "revocations_mean", "draws", "global_steps", "workers", "worker_types", "model")
    rec = {k: plan.get(k) for k in keep}
    rec.update(file=plan["_path"], per_draw=sorted(plan["per_draw"]))
    return rec


def finite(v):
    """v with every non-finite number replaced by None (JSON has none)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def write(out, name, text):
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    args = parse_args(argv)
    try:
        runs, plan = load(args)
    except ReportInputError as e:
        print(f"{PROG}: {one_line(e)}", file=sys.stderr)
        return EXIT_INPUT
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: {one_line(args.out)}: cannot create the directory: {one_line(e.strerror or e)}",
              file=sys.stderr)
        return EXIT_INPUT
    shown, records, problems = build(runs, plan, args.out)
    code = EXIT_INPUT if problems else 0
    report = {"report_version": 1, "exit_code": code, "problems": problems, "plan": plan_record(plan),
              "charts": shown, "runs": records}
    write(args.out, "report.json", json.dumps(finite(report), indent=1, allow_nan=False, default=str) + "\n")
    write(args.out, "index.html", page(args.out, shown, records, problems, plan))
    if args.csv:
        import export
        rows = export.write_csv(runs, os.path.join(args.out, "scalars.csv"))
        print(f"scalars: {os.path.join(args.out, 'scalars.csv')} ({rows} rows)")
    if args.mlflow:
        import export
        try:
            logged = export.log_mlflow(runs, args.mlflow, args.mlflow_experiment)
        except ImportError:
            print(f"{PROG}: --mlflow needs MLflow's client in {sys.executable}: pip install mlflow-skinny "
                  "(launch/setup.sh installs it in .venv: run with MT_PYTHON=.venv/bin/python)", file=sys.stderr)
            return EXIT_INPUT
        for label, rid, n, old in logged:
            again = f", replacing run {old}" if old else ""
            print(f"mlflow: {label} -> run {rid} in experiment '{args.mlflow_experiment}' at {args.mlflow} "
                  f"({n} metric values{again})")
    if problems:
        more = f" (+{len(problems) - 1} more in the report)" if len(problems) > 1 else ""
        print(f"{PROG}: {problems[0]}{more}; partial report written", file=sys.stderr)
    print(f"report: {os.path.join(args.out, 'index.html')}")
    return code


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback (MT_REPORT_DEBUG=1 shows it)
        if os.environ.get("MT_REPORT_DEBUG"):
            raise
        print(f"{PROG}: internal error (a bug in report.py): {type(e).__name__}: {one_line(e)}", file=sys.stderr)
        sys.exit(1)
