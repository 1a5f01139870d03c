#!/usr/bin/python3
"""Tests of `mpi_trainer report` (mpi_trainer/report/): charts, HTML, report.json, forecast
scores, errors, and a quick fuzz of the metrics reader. One line per check; the last line is
"N passed, M failed"; exits 1 when any failed.

Usage: /usr/bin/python3 tests/test_report.py TRAINER_EXE
(TRAINER_EXE: gen-data, a virtual run and a plan; its `report` command once, when it has one.)
"""
import base64
import contextlib
import io
import html
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT_DIR = os.path.join(ROOT, "mpi_trainer", "report")
REPORT = os.path.join(REPORT_DIR, "report.py")
GOLDEN = os.path.join(ROOT, "tests", "golden", "report")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
sys.dont_write_bytecode = True
sys.path.insert(0, REPORT_DIR)
import metrics  # noqa: E402
import series  # noqa: E402

CHARTS_ALL = ("curves-time", "curves-steps")
CHARTS_RUN = ("timeline", "throughput", "cost")
# summary-table column: the summary field it shows
TABLE_FIELDS = ("global_step", "cost_usd", "test_accuracy", "revocations", "checkpoint_failures", "lr_cuts", "attempts",
                "exit_code")
RESULTS = {"passed": 0, "failed": 0}


def check(name, fn):
    t = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any failure is reported, the others still run
        RESULTS["failed"] += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        return
    RESULTS["passed"] += 1
    print(f"PASS {name} ({time.monotonic() - t:.1f} s)", flush=True)


def report(*args, exe=None):
    cmd = [exe, "report"] if exe else [PY, REPORT]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300)


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Page(HTMLParser):
    """The report page's images, table rows and flags."""

    def __init__(self, text):
        super().__init__()
        self.imgs, self.rows, self.flags, self.tables, self.stack = {}, [], [], set(), []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs[a.get("id")] = a
        elif tag == "table":
            self.tables.add(a.get("id"))
            self.stack.append(a.get("id"))
        elif tag == "tr" and self.stack and "data-run" in a:
            self.rows.append({"table": self.stack[-1], "attrs": a, "cells": {}})
        elif tag == "td" and self.rows and "data-field" in a and "data-value" in a:
            self.rows[-1]["cells"][a["data-field"]] = a.get("data-value")
        elif tag == "div" and "flag" in (a.get("class") or "").split():
            self.flags.append(a)

    def handle_endtag(self, tag):
        if tag == "table" and self.stack:
            self.stack.pop()


def check_out(out, stdout):
    """A report directory: its charts, page, and table against report.json; returns both."""
    index = os.path.join(out, "index.html")
    assert stdout.strip().splitlines()[-1] == f"report: {index}", stdout
    rep = json.load(open(os.path.join(out, "report.json")))
    page = Page(open(index, encoding="utf-8").read())
    assert "summary" in page.tables, "no <table id=summary>"
    n = len(rep["runs"])
    want = [f"chart-{c}" for c in CHARTS_ALL] + [f"chart-{c}-{i}" for i in range(1, n + 1) for c in CHARTS_RUN]
    assert [c["id"] for c in rep["charts"]] == want, [c["id"] for c in rep["charts"]]
    for c in rep["charts"]:
        data = open(os.path.join(out, c["file"]), "rb").read()
        assert data.startswith(b"\x89PNG") and len(data) > 2000, c["file"]
        img = page.imgs.get(c["id"])
        assert img and img.get("alt"), f"no <img id={c['id']}> with alt"
        assert img["src"] == "data:image/png;base64," + base64.b64encode(data).decode(), c["id"]
    text = open(index, encoding="utf-8").read()
    assert "http://" not in text and "https://" not in text, "an external URL in the page"
    return rep, page


def check_summary(rep, page, label, path):
    """The table's and report.json's numbers are the summary line's."""
    s = [e for e in events(path) if e["event"] == "summary"][-1]
    run = next(r for r in rep["runs"] if r["label"] == label)
    row = next(r for r in page.rows if r["table"] == "summary" and r["attrs"].get("data-run") == label)
    virtual = "virtual_seconds" in s
    for f in TABLE_FIELDS + ("time_seconds",):
        src = ("virtual_seconds" if virtual else "train_seconds") if f == "time_seconds" else f
        if src not in s:  # a field this kind of run does not write: the report derives it
            continue
        want = s[src]
        got = row["cells"][f]
        assert (json.loads(got) if got else None) == want, f"{label} {f}: table {got}, summary {want}"
        assert run["summary"][f] == want, f"{label} {f}: report.json {run['summary'][f]}, summary {want}"
    for f in series.SUMMARY_FIELDS:
        if f in s:
            assert run["summary"][f] == s[f], f"{label} report.json {f}"
    lost = sum(e.get("work_lost_steps", 0) for e in events(path) if e["event"] == "revocation")
    assert (run["summary"]["work_lost_steps"] or 0) == lost, "work_lost_steps"


def check_timeline(rep, label, path, key):
    """Every revocation and join of a single-attempt file is on the timeline at its step and time."""
    run = next(r for r in rep["runs"] if r["label"] == label)
    marks = run["timeline"]
    for e in events(path):
        kind = {"revocation": "revocation", "join": "join"}.get(e["event"])
        if not kind:
            continue
        found = [m for m in marks if m["kind"] == kind and m["global_step"] == e["global_step"]
                 and m.get("rank") == e["rank"]]
        assert len(found) == 1, f"{label}: {kind} of rank {e['rank']} at step {e['global_step']} not on the timeline"
        assert abs(found[0]["time"] - e[key]) < 1e-9, f"{label}: {kind} time {found[0]['time']} != {e[key]}"
        if kind == "revocation":
            assert found[0]["cause"] == e["cause"]


def one_line_error(p, expect_report, out, what):
    assert p.returncode == 3, f"{what}: exit {p.returncode}, stderr {p.stderr!r}"
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpi_trainer report: "), f"{what}: stderr {p.stderr!r}"
    assert "Traceback" not in p.stderr
    assert os.path.exists(os.path.join(out, "index.html")) == expect_report, f"{what}: index.html"
    return lines[0]


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    exe = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="test_report.")
    quick = os.path.join(GOLDEN, "quickstart.jsonl")
    restart = os.path.join(GOLDEN, "restart.jsonl")
    virtual = os.path.join(tmp, "virtual.jsonl")
    plan = os.path.join(tmp, "plan.json")
    try:
        check("quickstart: charts, page, summary table, timeline", lambda: quickstart(tmp, quick))
        check("virtual run with revocations and joins (TRAINER_EXE)", lambda: virtual_run(tmp, exe, virtual))
        check("overlay of two runs with --label", lambda: overlay(tmp, quick, virtual))
        check("restarted run: attempts, restart mark", lambda: restarted(tmp, restart))
        check("--plan: forecast bands and inside_band", lambda: with_plan(tmp, exe, virtual, quick, plan))
        check("summary warnings flagged", lambda: warnings_flag(tmp, quick))
        check("bad inputs: one line, exit 3", lambda: bad_inputs(tmp, quick))
        check("fuzz: 300 mutations, reader and report", lambda: fuzz(tmp, [quick, restart]))
        check("TRAINER_EXE report runs report.py", lambda: through_binary(tmp, exe, quick))
        check("runs of every length: 1 step, 20 steps, resumed 20 + 20, a takeover (issue 62)",
              lambda: short_runs(tmp, exe, quick))
        check("--csv: every scalar in one long table, TensorBoard's tags (issue 62)",
              lambda: csv_export(tmp, quick, restart))
        check("--mlflow: runs logged through MLflow's client, read back by it; a second import replaces (issue 62)",
              lambda: mlflow_export(tmp, exe, quick, restart))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


def csv_export(tmp, quick, restart):
    """OUT/scalars.csv: one row per value of every progress, eval, revocation, join and summary event,
    the attempt of each (a restarted run's second counts 2), equal to the metrics file's values."""
    import csv
    out = os.path.join(tmp, "csv")
    r = report(quick, restart, "--label", "q", "--label", "r", "--csv", "-o", out)
    assert r.returncode == 0 and "scalars.csv" in r.stdout, (r.returncode, r.stdout, r.stderr)
    rows = list(csv.DictReader(open(os.path.join(out, "scalars.csv"))))
    assert list(rows[0]) == ["run", "attempt", "event", "global_step", "seconds", "unix_time", "tag", "value"], rows[0]
    for label, path in (("q", quick), ("r", restart)):
        ev = events(path)
        progress = [e for e in ev if e["event"] == "progress"]
        losses = [float(x["value"]) for x in rows if x["run"] == label and x["tag"] == "train/loss"]
        assert losses == [e["loss"] for e in progress], (label, len(losses), len(progress))
        evals = [e["test_accuracy"] for e in ev if e["event"] == "eval"]
        got = [float(x["value"]) for x in rows if x["run"] == label and x["tag"] == "test/accuracy" and x["event"] == "eval"]
        assert got == evals, (label, got, evals)
        s = [e for e in ev if e["event"] == "summary"][-1]
        cost = [float(x["value"]) for x in rows if x["run"] == label and x["tag"] == "cost/usd"]
        assert cost[-1] == s["cost_usd"], (cost, s["cost_usd"])
    attempts = {x["attempt"] for x in rows if x["run"] == "r"}
    assert attempts == {"1", "2"}, attempts  # the golden restart: two attempts
    assert any(x["tag"].startswith("worker/") for x in rows if x["run"] == "q")
    assert all(x["seconds"] for x in rows if x["event"] == "progress")


MLFLOW_READ = """
import json, sys
from mlflow.tracking import MlflowClient
c = MlflowClient(tracking_uri=sys.argv[1])
exp = c.get_experiment_by_name("study")
out = {}
for r in c.search_runs([exp.experiment_id]):
    hist = {k: [[m.step, m.value] for m in c.get_metric_history(r.info.run_id, k)] for k in ("train/loss", "test/accuracy", "cost/usd")}
    out[r.info.run_name] = {"id": r.info.run_id, "status": r.info.status, "params": r.data.params, "tags": r.data.tags, "hist": hist}
print(json.dumps(out))
"""


def mlflow_export(tmp, exe, quick, restart):
    """report --mlflow sqlite:///...: one MLflow run per metrics file, its params the config's, every
    loss, evaluation and the cost with their global steps, status FINISHED, the restarted run's two
    attempts tagged; importing a file again replaces its run. Through the binary with
    MT_PYTHON at the project venv (launch/setup.sh installs mlflow-skinny there)."""
    py = os.path.join(ROOT, ".venv", "bin", "python")
    have = subprocess.run([py, "-c", "import mlflow"], capture_output=True, timeout=60) if os.path.exists(py) else None
    assert have is not None and have.returncode == 0, f"no MLflow client in {py}: run launch/setup.sh"
    uri = "sqlite:///" + os.path.join(tmp, "mlflow.db")
    env = dict(os.environ, MT_PYTHON=py)

    r = subprocess.run([exe, "report", quick, restart, "--label", "q", "--label", "r", "-o",
                        os.path.join(tmp, "mlflow-report"), "--mlflow", uri, "--mlflow-experiment", "study"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.count("mlflow: ") == 2, (r.returncode, r.stdout, r.stderr)
    got = subprocess.run([py, "-c", MLFLOW_READ, uri], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    first = json.loads(got.stdout)
    assert sorted(first) == ["q", "r"], sorted(first)
    for label, path in (("q", quick), ("r", restart)):
        ev, m = events(path), first[label]
        assert m["status"] == "FINISHED", m["status"]
        config = [e for e in ev if e["event"] == "config"][0]
        assert m["params"]["model"] == config["model"] and m["params"]["train_steps"] == str(config["train_steps"]), m["params"]
        progress = [e for e in ev if e["event"] == "progress"]
        assert m["hist"]["train/loss"] == [[e["global_step"], e["loss"]] for e in progress], label
        evals = [[e["global_step"], e["test_accuracy"]] for e in ev if e["event"] == "eval"]
        assert [x for x in m["hist"]["test/accuracy"] if x in evals] == evals, (label, m["hist"]["test/accuracy"])
        s = [e for e in ev if e["event"] == "summary"][-1]
        assert m["hist"]["cost/usd"][-1] == [s["global_step"], s["cost_usd"]], m["hist"]["cost/usd"]
        assert m["tags"]["summary.exit_code"] == str(s["exit_code"]), m["tags"]
    assert first["r"]["tags"]["mpi_trainer.attempts"] == "2", first["r"]["tags"]
    r = subprocess.run([exe, "report", quick, "--label", "q", "-o", os.path.join(tmp, "mlflow-report"),
                        "--mlflow", uri, "--mlflow-experiment", "study"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0 and f"replacing run {first['q']['id']}" in r.stdout, (r.returncode, r.stdout, r.stderr)


def short_runs(tmp, exe, quick):
    """Short runs draw points where there are too few for lines and say so; every page has the
    configuration table and the learning-rate panel's data."""
    data = os.path.join(tmp, "short-data")
    subprocess.run([exe, "gen-data", data, "--train", "128", "--test", "32"], check=True, capture_output=True, timeout=60)
    base = [exe, "train", "--model", "resnet8", "--batch-size", "8", "--data", data, "--threads", "1", "--quiet"]

    def train(path, *flags):
        subprocess.run(base + ["--metrics", path, *flags], check=True, capture_output=True, timeout=300)

    one, twenty, resumed = (os.path.join(tmp, f"{n}.jsonl") for n in ("one", "twenty", "resumed"))
    train(one, "--train-steps", "1")
    train(twenty, "--train-steps", "20")  # --log-every-steps 50: the last step only
    ck = os.path.join(tmp, "short-ck")
    train(resumed, "--train-steps", "20", "--ckpt-dir", ck)
    train(resumed, "--train-steps", "40", "--ckpt-dir", ck)
    # A takeover: the quickstart's events with one in the middle, the successor's clock from zero.
    evs = events(quick)
    mid = next(i for i, e in enumerate(evs) if e["event"] == "progress" and e["global_step"] >= 100)
    take = {"event": "ps_takeover", "global_step": evs[mid]["global_step"], "unix_time": evs[mid].get("unix_time", 0),
            "lost_updates": 0, "by": "ulfm", "replayed": 3}
    after = [dict(e, elapsed_seconds=e["elapsed_seconds"] - evs[mid]["elapsed_seconds"])
             if e["event"] == "progress" else e for e in evs[mid + 1:]]
    takeover = os.path.join(tmp, "takeover.jsonl")
    with open(takeover, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in evs[:mid + 1] + [take] + after)
    for path, label, note in ((one, "one", "one progress point: too few for lines, drawn as points"),
                              (twenty, "twenty", "one progress point: too few for lines, drawn as points"),
                              (resumed, "resumed", "2 progress points, one per attempt or takeover"),
                              (takeover, "takeover", None)):
        rep, page = clean_report(os.path.join(tmp, "short-" + label), path)
        assert "config" in page.tables, f"{label}: no configuration table"
        r = rep["runs"][0]
        assert r["config"]["model"] in ("resnet8", "resnet32") and r["config"]["train_steps"], r["config"]
        if note:
            assert any(note in n for n in r["notes"]), (label, r["notes"])
        else:
            assert not any("too few" in n for n in r["notes"]), (label, r["notes"])
        page_text = open(os.path.join(tmp, "short-" + label, "index.html"), encoding="utf-8").read()
        assert all(html.escape(n) in page_text for n in r["notes"]), label
    rep, _ = clean_report(os.path.join(tmp, "short-resumed2"), resumed)
    assert rep["runs"][0]["config"]["train_steps"] == "20 -> 40", rep["runs"][0]["config"]  # the attempts differ


def clean_report(out, *runs):
    """The report of `runs` (files and flags) into `out`: exit 0, nothing on stderr; (report.json, page)."""
    p = report(*runs, "-o", out)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)
    return check_out(out, p.stdout)


def quickstart(tmp, quick):
    rep, page = clean_report(os.path.join(tmp, "quick"), quick)
    check_summary(rep, page, "quickstart", quick)
    check_timeline(rep, "quickstart", quick, "elapsed_seconds")
    assert not page.flags and rep["exit_code"] == 0 and rep["runs"][0]["metrics_schema"] == 1


def virtual_run(tmp, exe, path):
    data = os.path.join(tmp, "data")
    subprocess.run([exe, "gen-data", data, "--train", "200", "--test", "100"], check=True, capture_output=True,
                   timeout=120)
    subprocess.run([exe, "train", "--virtual-workers", "3", "--virtual-joins", "k80@step=30", "--revoke",
                    "rank=2@step=15,rank=3@step=45:TERM", "--train-steps", "60", "--batch-size", "8", "--model",
                    "resnet8", "--data", data, "--pricing", "transient", "--log-every-steps", "5",
                    "--eval-every-steps", "20", "--threads", "1", "--quiet", "--metrics", path],
                   check=True, capture_output=True, timeout=300)
    kinds = [e["event"] for e in events(path)]
    assert kinds.count("revocation") == 2 and kinds.count("join") == 1, kinds
    rep, page = clean_report(os.path.join(tmp, "virtual"), path)
    check_summary(rep, page, "virtual", path)
    check_timeline(rep, "virtual", path, "virtual_seconds")
    assert rep["runs"][0]["virtual"] is True
    causes = sorted(m["cause"] for m in rep["runs"][0]["timeline"] if m["kind"] == "revocation")
    assert causes == ["lost", "notice"], causes


def overlay(tmp, quick, virtual):
    rep, page = clean_report(os.path.join(tmp, "overlay"), virtual, quick, "--label", "3 virtual workers")
    assert [r["label"] for r in rep["runs"]] == ["3 virtual workers", "quickstart"]
    check_summary(rep, page, "3 virtual workers", virtual)
    check_summary(rep, page, "quickstart", quick)
    p = report(quick, quick, "-o", os.path.join(tmp, "same"))
    assert p.returncode == 0 and "quickstart (2)" in open(os.path.join(tmp, "same", "index.html")).read()
    p = report(quick, "--label", "a", "--label", "b", "-o", os.path.join(tmp, "labels"))
    assert p.returncode == 2, "more labels than runs must be a usage error"


def restarted(tmp, path):
    rep, page = clean_report(os.path.join(tmp, "restart"), path)
    check_summary(rep, page, "restart", path)
    marks = rep["runs"][0]["timeline"]
    restarts = [m for m in marks if m["kind"] == "restart"]
    resume = next(e for e in events(path) if e["event"] == "resume")
    assert len(restarts) == 1 and restarts[0]["attempt"] == 2 and restarts[0]["global_step"] == resume["global_step"]
    times = [m["time"] for m in marks if m["kind"] == "checkpoint"]
    assert times == sorted(times), "checkpoint times go back across the restart"


def with_plan(tmp, exe, virtual, quick, plan):
    with open(plan, "w") as f:
        subprocess.run([exe, "plan", "--workers", "3", "--worker-types", "k80", "--steps", "60", "--model",
                        "resnet8", "--json", "--per-draw", "--draws", "40"], stdout=f, check=True, timeout=120)
    out = os.path.join(tmp, "plan")
    rep, page = clean_report(out, virtual, quick, "--plan", plan)
    assert "forecast" in page.tables
    rows = [r for r in page.rows if r["table"] == "forecast"]
    assert len(rows) == 6, len(rows)
    for run in rep["runs"]:
        for metric in ("time_seconds", "cost_usd", "revocations"):
            b = run["plan"][metric]
            assert b["inside_band"] == (b["p10"] <= b["actual"] <= b["p90"]), (metric, b)
            row = next(r for r in rows
                       if r["attrs"]["data-run"] == run["label"] and r["attrs"]["data-metric"] == metric)
            assert json.loads(row["attrs"]["data-inside-band"]) == b["inside_band"]
        t = run["plan"]["time_seconds"]
        assert t["actual"] == run["summary"][t["measure"]], t
        assert t["measure"] == ("time_seconds" if run["virtual"] else "wall_seconds"), t
    assert rep["runs"][0]["plan"]["revocations"]["band_from"] == "per_draw"
    no_draws = json.load(open(plan))
    del no_draws["per_draw"]
    json.dump(no_draws, open(plan + ".2", "w"))
    p = report(virtual, "--plan", plan + ".2", "-o", os.path.join(tmp, "plan2"))
    rep = json.load(open(os.path.join(tmp, "plan2", "report.json")))
    r = rep["runs"][0]["plan"]["revocations"]
    assert p.returncode == 0 and r["inside_band"] is None and "per-draw" in r["note"], r
    open(plan + ".3", "w").write("predicted time 3 h\n")
    out3 = os.path.join(tmp, "plan3")
    assert "not a plan" in one_line_error(report(virtual, "--plan", plan + ".3", "-o", out3), False, out3, "plan")


def warnings_flag(tmp, quick):
    lines = open(quick).read().splitlines()
    s = json.loads(lines[-1])
    s["warnings"] = ["test accuracy 10.0% is chance level for 10 classes (10%; test loss 2.303, ln 10 = 2.303): "
                     "the network learned nothing. Likely causes: a learning rate too large"]
    lines[-1] = json.dumps(s)
    path = os.path.join(tmp, "nothing.jsonl")
    open(path, "w").write("\n".join(lines) + "\n")
    out = os.path.join(tmp, "nothing")
    p = report(path, "-o", out)
    assert p.returncode == 0, p.stderr
    rep, page = check_out(out, p.stdout)
    assert len(page.flags) == 1 and page.flags[0]["data-run"] == "nothing", page.flags
    text = open(os.path.join(out, "index.html")).read()
    assert "this run learned nothing" in text
    assert rep["runs"][0]["summary"]["warnings"] == s["warnings"]
    row = next(r for r in page.rows if r["table"] == "summary")
    assert row["attrs"]["data-status"] == "warnings"


def bad_inputs(tmp, quick):
    data = open(quick, "rb").read()
    cases = {
        "missing": (None, False, "no such file"),
        "garbage": (b"\x00\xffhello, not json\n\x13\x37\n", False, "not a --metrics JSON Lines file"),
        "empty": (b"", False, "empty"),
        "no events": (b'{"a": 1}\n[1, 2]\n', False, "not a --metrics"),
        "truncated": (data[:-40], True, "incomplete"),
        "older": (data.replace(b'"metrics_schema":1,', b"", 1), True, "older"),
        "newer": (data.replace(b'"metrics_schema":1,', b'"metrics_schema":99,', 1), True, "newer"),
        "damaged line": (data.replace(b'{"event":"eval"', b'{"event":"eval" oops', 1), True, "not JSON"),
    }
    for name, (content, partial, words) in cases.items():
        path = os.path.join(tmp, f"bad-{name.replace(' ', '_')}.jsonl")
        if content is not None:
            open(path, "wb").write(content)
        out = os.path.join(tmp, f"out-bad-{name.replace(' ', '_')}")
        p = report(path, "-o", out)
        line = one_line_error(p, partial, out, name)
        assert words in line and path in line, f"{name}: {line}"
        if partial:
            rep, _ = check_out(out, p.stdout)
            assert rep["exit_code"] == 3 and rep["problems"], name
    p = report(quick)
    assert p.returncode == 2 and "-o" in p.stderr, "no -o: usage error"
    d = os.path.join(tmp, "a-directory")
    os.makedirs(d)
    one_line_error(report(d, "-o", os.path.join(tmp, "o-dir")), False, os.path.join(tmp, "o-dir"), "directory")


def mutate(rng, data):
    """One random damage of a metrics file."""
    lines = data.split(b"\n")
    if len(lines) < 3 or not data:
        return data + b"\n{}"
    how = rng.randrange(7)
    if how == 0:  # byte flips
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if how == 1:  # truncation
        return data[: rng.randrange(len(data))]
    if how == 2:  # lines dropped, repeated or swapped
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines[: rng.randrange(len(lines) + 1)] + lines[i:j])
    if how == 3:  # another event name: the fields of one event under another's
        i = rng.randrange(len(lines) - 1)
        try:
            ev = json.loads(lines[i])
        except ValueError:
            return data
        if not isinstance(ev, dict):
            return data
        ev["event"] = rng.choice(list(metrics.FIELDS) + ["unknown", "", 7])
        lines[i] = json.dumps(ev).encode()
        return b"\n".join(lines)
    # a field, or a worker's field, given a random JSON value
    values = [None, True, False, 0, -1, 1, 2**70, 1e308, -1e308, float("nan"), float("inf"), 1e-320, "", "x",
              "NaN", [], {}, [1, "a"], {"a": {"b": []}}, 0.5, -0.5, "k80", "lost"]
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(lines) - 1)
        try:
            ev = json.loads(lines[i])
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        target = ev
        if isinstance(ev.get("workers"), list) and ev["workers"] and rng.random() < 0.4:
            target = rng.choice(ev["workers"])
        if isinstance(target, dict) and target:
            target[rng.choice(list(target))] = rng.choice(values)
        lines[i] = json.dumps(ev).encode()
    return b"\n".join(lines)


def reader_pipeline(path, plan):
    """Everything but the charts, as report.py runs it; returns the report.json text."""
    import report as rp
    run = metrics.read_run(path)
    series.assign_times(run)
    row = series.summary_row(run)
    rec = {"summary": row, "timeline": series.timeline(run), "counts": series.worker_counts(run),
           "workers": series.per_worker(run), "cost": series.accumulated_cost(run),
           "plan": series.score_plan(plan, run, row) if plan else None}
    return json.dumps(rp.finite(rec), allow_nan=False, default=str)


def fuzz(tmp, fixtures):
    import report as rp
    seed = int(os.environ.get("FUZZ_SEED", "1"))
    rng = random.Random(seed)
    plan_path = os.path.join(tmp, "plan.json")
    plan = metrics.read_plan(plan_path) if os.path.exists(plan_path) else None
    sources = [open(f, "rb").read() for f in fixtures]
    outcomes = {"read": 0, "refused": 0}
    for n in range(300):
        data = mutate(rng, rng.choice(sources))
        path = os.path.join(tmp, f"fuzz-{n % 20}.jsonl")
        open(path, "wb").write(data)
        try:
            reader_pipeline(path, plan)
            outcomes["read"] += 1
        except metrics.ReportInputError as e:
            assert "\n" not in str(e), f"mutation {n} (FUZZ_SEED={seed}): a multi-line error"
            outcomes["refused"] += 1
        except Exception as e:
            raise AssertionError(f"mutation {n} (FUZZ_SEED={seed}): {type(e).__name__}: {e}") from e
        if n % 100 == 0:  # the whole report, charts included, in this process (3: each draws every chart)
            err, out = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = rp.main([path, "-o", os.path.join(tmp, "fuzz-out")])
            assert code in (0, 3), f"mutation {n} (FUZZ_SEED={seed}): exit {code}: {err.getvalue()}"
            assert len(err.getvalue().splitlines()) == (1 if code else 0), f"mutation {n}: stderr {err.getvalue()!r}"
    for n in range(3):  # and a few as the command line runs it
        path = os.path.join(tmp, f"fuzz-cli-{n}.jsonl")
        open(path, "wb").write(mutate(rng, rng.choice(sources)))
        p = report(path, "-o", os.path.join(tmp, "fuzz-cli"))
        assert p.returncode in (0, 3) and "Traceback" not in p.stderr, (p.returncode, p.stderr)
        assert len(p.stderr.splitlines()) == (1 if p.returncode else 0), p.stderr
    print(f"  fuzz: {outcomes['read']} read (in full or in part), {outcomes['refused']} refused")


def through_binary(tmp, exe, quick):
    helps = subprocess.run([exe, "report", "--help"], capture_output=True, text=True, timeout=60)
    if helps.returncode != 0:
        print(f"  note: {exe} has no working report command yet (exit {helps.returncode}): report.py ran directly")
        return
    out = os.path.join(tmp, "binary")
    p = report(quick, "-o", out, exe=exe)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)
    check_out(out, p.stdout)
    p = report(os.path.join(tmp, "no-such.jsonl"), "-o", out + "2", exe=exe)
    assert p.returncode == 3 and len(p.stderr.splitlines()) == 1, (p.returncode, p.stderr)


if __name__ == "__main__":
    sys.exit(main())
