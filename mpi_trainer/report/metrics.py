"""The reader of `mpi_trainer train --metrics` files (JSON Lines) for `mpi_trainer report`.

read_run(path) parses and checks one file. An input it cannot use at all raises
ReportInputError (one line naming the file); damage it can read past (a truncated last line,
a line that is not JSON, a field of the wrong type, a file of an older version) is listed in
Run.problems, one line each, and the rest is kept. No input makes it raise anything else.
"""
import json
import math

SCHEMA = 1  # the newest metrics_schema this reader knows (mpi_trainer/app/version.hpp)
MAX_PROBLEMS = 20  # listed per file; the rest are counted
MAX_NUMBER = 1e15  # no step count, time, rate or price of a run is larger: beyond it is damage

NUM, STR, BOOL, LIST, OBJ = "a number", "a string", "true or false", "a list", "an object"

# The fields the report uses, per event; any other field is left alone. null is always allowed.
_STEP = {"global_step": NUM}
_WHEN = {"elapsed_seconds": NUM, "virtual_seconds": NUM, "unix_time": NUM}
FIELDS = {
    "config": {"version": STR, "metrics_schema": NUM, "model": STR, "train_steps": NUM,
               "batch_size": NUM, "workers": NUM, "virtual_workers": NUM, "processes": NUM,
               "worker_types": LIST, "instance_type": STR, "ps_type": STR, "num_ps": NUM,
               "pricing": STR, "ps_pricing": STR, "prices": STR},
    "first_step": {**_STEP, "unix_time": NUM, "seconds_since_start": NUM},
    "progress": {**_STEP, **_WHEN, "loss": NUM, "train_accuracy": NUM, "lr": NUM,
                 "images_per_second": NUM, "active_workers": NUM, "mean_staleness": NUM,
                 "eta_seconds": NUM, "predicted_seconds_left": NUM, "predicted_cost_usd": NUM,
                 "workers": LIST},
    "eval": {**_STEP, **_WHEN, "test_accuracy": NUM, "test_loss": NUM},
    "revocation": {**_STEP, **_WHEN, "rank": NUM, "instance_type": STR, "cause": STR,
                   "work_lost_steps": NUM, "active_workers": NUM},
    "join": {**_STEP, **_WHEN, "rank": NUM, "instance_type": STR, "active_workers": NUM},
    "checkpoint": {**_STEP, **_WHEN},
    "checkpoint_failed": {**_STEP, **_WHEN, "error": STR},
    "checkpoint_snapshot": {**_STEP, **_WHEN},
    "ps_takeover": {**_STEP, "unix_time": NUM, "lost_updates": NUM, "by": STR},
    "ps_handover": {**_STEP, "unix_time": NUM, "to": STR},
    "ps_replica_checkpoint": {**_STEP, "unix_time": NUM, "rank": NUM},
    "resume": {**_STEP, "attempt": NUM},
    "stop": {**_STEP, **_WHEN, "reason": STR},
    "error": {**_STEP, **_WHEN, "exit_code": NUM, "error": STR},
    "summary": {**_STEP, "train_seconds": NUM, "virtual_seconds": NUM, "test_accuracy": NUM,
                "test_loss": NUM, "cost_usd": NUM, "revocations": NUM, "workers_start": NUM,
                "workers_end": NUM, "lost_workers": NUM, "left_workers": NUM,
                "joined_workers": NUM, "checkpoint_failures": NUM, "attempts": NUM,
                "resumed_from_step": NUM, "exit_code": NUM, "images_per_second": NUM,
                "stopped_by": STR, "warnings": LIST, "virtual": BOOL},
}
WORKER_FIELDS = {"rank": NUM, "instance_type": STR, "images_per_second": NUM,
                 "mean_staleness": NUM, "active": BOOL}
STRING_LISTS = {("config", "worker_types"), ("summary", "warnings")}


class ReportInputError(Exception):
    """An input the report cannot use; str() is one line that names the file."""


class Run:
    """One metrics file: its checked events in file order, and what was wrong with it."""

    def __init__(self, path, label, events, problems, notes):
        self.path, self.label = path, label
        self.events, self.problems, self.notes = events, problems, notes

    def of(self, kind):
        """The events of one kind, in file order."""
        return [e for e in self.events if e["event"] == kind]

    @property
    def configs(self):
        return self.of("config")

    @property
    def summary(self):
        """The last summary event (the last attempt's), or None."""
        found = self.of("summary")
        return found[-1] if found else None

    @property
    def virtual(self):
        """A virtual-clock run (train --virtual-workers): times are virtual_seconds."""
        return any(c.get("virtual_workers") is not None for c in self.configs) or any(
            e["event"] in ("progress", "summary") and e.get("virtual_seconds") is not None
            for e in self.events)

    def config_value(self, name, default=None):
        """A field of the newest config event that has it."""
        for c in reversed(self.configs):
            if c.get(name) is not None:
                return c[name]
        return default


def one_line(text, limit=300):
    """text as one printable line of at most `limit` characters."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def is_number(v):
    """A finite JSON number (not true/false)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _kind_ok(kind, v):
    if kind == NUM:
        return is_number(v) and abs(v) <= MAX_NUMBER
    return isinstance(v, {STR: str, BOOL: bool, LIST: list, OBJ: dict}[kind])


def _type_name(v):
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, (int, float)):
        return "a number" if is_number(v) else "not a finite number"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(v), "null")


def _check_fields(ev, spec, where, problems):
    """Sets each field of `spec` that has the wrong type to None, noting it in `problems`."""
    for name, kind in spec.items():
        v = ev.get(name)
        if v is not None and not _kind_ok(kind, v):
            why = f"out of range (beyond {MAX_NUMBER:g})" if kind == NUM and is_number(v) else \
                f"{_type_name(v)}, expected {kind}"
            problems.append(f"{where}: '{name}' is {why}")
            ev[name] = None


def _check_event(ev, where, problems):
    """Checks an event's known fields in place (see FIELDS)."""
    kind = ev["event"]
    spec = FIELDS.get(kind)
    if not spec:
        return
    _check_fields(ev, spec, where, problems)
    for (k, name) in STRING_LISTS:
        if k == kind and isinstance(ev.get(name), list):
            if not all(isinstance(x, str) for x in ev[name]):
                problems.append(f"{where}: '{name}' holds something other than strings")
                ev[name] = [x for x in ev[name] if isinstance(x, str)]
    if kind == "progress" and isinstance(ev.get("workers"), list):
        good = []
        for i, w in enumerate(ev["workers"]):
            if not isinstance(w, dict):
                problems.append(f"{where}: workers[{i}] is {_type_name(w)}, expected an object")
                continue
            w = dict(w)
            _check_fields(w, WORKER_FIELDS, f"{where}: workers[{i}]", problems)
            good.append(w)
        ev["workers"] = good


def _parse_line(raw):
    """(event dict, None) or (None, why the line is not an event)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    try:
        ev = json.loads(text)
    except RecursionError:
        return None, "JSON nested too deeply"
    except (ValueError, TypeError) as e:
        return None, "not JSON (" + one_line(str(e).split(":")[0], 60) + ")"
    if not isinstance(ev, dict):
        return None, f"a JSON {type(ev).__name__}, not an object"
    if not isinstance(ev.get("event"), str) or not ev["event"]:
        return None, 'a JSON object without an "event" name'
    return ev, None


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportInputError(f"{path}: a directory, not a metrics file") from None
    except OSError as e:
        raise ReportInputError(f"{path}: cannot read it: {one_line(e.strerror or e)}") from None


def _split_lines(path, data):
    """(events, problems about lines, truncated) of a file's bytes."""
    if data.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (an editor's)
        data = data[3:]
    lines = data.split(b"\n")
    complete = data.endswith(b"\n")
    if complete:
        lines.pop()
    events, bad, truncated = [], [], False
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        ev, why = _parse_line(raw.rstrip(b"\r"))
        if ev is not None:
            ev["_line"] = number
            events.append(ev)
        elif number == len(lines) and not complete:
            truncated = True
        else:
            bad.append((number, why))
    if not events:
        if bad:
            n, why = bad[0]
            raise ReportInputError(f"{path}: not a --metrics JSON Lines file: line {n} is {why}")
        raise ReportInputError(f"{path}: no events (an incomplete line only: the run had just started?)")
    problems = []
    if truncated:
        problems.append(f"{path}: the last line ({len(lines)}) is incomplete: the run is still "
                        f"writing or was killed; the report shows the {len(events)} events before it")
    for n, why in bad:
        problems.append(f"{path}: line {n} is {why}; skipped")
    return events, problems, truncated


def _schema_problems(path, events):
    configs = [e for e in events if e["event"] == "config"]
    if not configs:
        return [f"{path}: no config event: the start of the file is missing"]
    out = []
    old = [c for c in configs if c.get("metrics_schema") is None]
    if old:
        out.append(f"{path}: metrics of an older mpi_trainer (its config event, line {old[0]['_line']}, "
                   "has no metrics_schema): the report may miss fields; rerun with this version")
    new = [c for c in configs if is_number(c.get("metrics_schema")) and c["metrics_schema"] > SCHEMA]
    if new:
        out.append(f"{path}: metrics_schema {new[0]['metrics_schema']} is newer than this report "
                   f"reads ({SCHEMA}): use the report of the mpi_trainer that wrote it")
    return out


def read_run(path, label=None):
    """The Run of one metrics file; raises ReportInputError when nothing of it can be used."""
    data = _read_bytes(path)
    if not data.strip():
        raise ReportInputError(f"{path}: empty: no events (did the run get --metrics?)")
    events, line_problems, _ = _split_lines(path, data)
    field_problems = []
    for ev in events:
        _check_event(ev, f"{path} line {ev['_line']} ({one_line(ev['event'], 40)})", field_problems)
    problems = line_problems + _schema_problems(path, events) + field_problems
    problems = [one_line(p) for p in problems]
    if len(problems) > MAX_PROBLEMS:
        extra = len(problems) - MAX_PROBLEMS
        problems = problems[:MAX_PROBLEMS] + [f"{path}: {extra} more problems not listed"]
    notes = []
    if not any(e["event"] == "summary" for e in events):
        notes.append("no summary event: the run had not finished when the file was read, or was killed; "
                     "the table shows what the events say")
    stem = path.rsplit("/", 1)[-1]
    stem = stem[:-6] if stem.endswith(".jsonl") else stem
    return Run(path, label or stem, events, problems, notes)


def percentile(values, p):
    """The p-quantile (0..1) with linear interpolation, as `mpi_trainer plan` computes it."""
    v = sorted(values)
    if not v:
        return None
    x = p * (len(v) - 1)
    lo = int(math.floor(x))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (x - lo)


def _plan_object(path, data):
    """The plan object of a `plan --json` output (one object, or JSON Lines holding one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReportInputError(f"{path}: not UTF-8 text: expected `mpi_trainer plan --json` output") from None
    candidates = []
    try:
        candidates.append(json.loads(text))
    except (ValueError, RecursionError, TypeError):
        for line in text.splitlines():
            try:
                candidates.append(json.loads(line))
            except (ValueError, RecursionError, TypeError):
                continue
    for c in candidates:
        if isinstance(c, dict) and c.get("event", "plan") == "plan":
            return c
    raise ReportInputError(f"{path}: not a plan: expected the JSON object of `mpi_trainer plan --json`")


def read_plan(path):
    """The checked plan: seconds and cost_usd bands, revocations, per-draw lists when given."""
    plan = _plan_object(path, _read_bytes(path))
    for name in ("seconds", "cost_usd"):
        band = plan.get(name)
        if not isinstance(band, dict) or not all(is_number(band.get(k)) for k in ("p10", "median", "p90")):
            raise ReportInputError(f"{path}: the plan has no '{name}' with numbers p10, median and p90 "
                                   "(is it `mpi_trainer plan --json` output, not --deadline's search?)")
    draws = plan.get("per_draw")
    per_draw = {}
    if isinstance(draws, dict):
        for name in ("seconds", "cost_usd", "revocations"):
            v = draws.get(name)
            if isinstance(v, list) and v and all(is_number(x) for x in v):
                per_draw[name] = [float(x) for x in v]
    if not is_number(plan.get("revocations_mean")):
        plan["revocations_mean"] = None
    plan["per_draw"] = per_draw
    plan["_path"] = path
    return plan
