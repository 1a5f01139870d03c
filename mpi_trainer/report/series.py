"""What the report draws and tabulates, derived from a checked Run (metrics.py).

Times: a virtual run's virtual_seconds, else elapsed_seconds (seconds since the process
started); events without their own time get it from unix_time (against the first_step event)
or from their global step on the progress curve. Attempts (a restarted job appends a new config
event) and parameter-server takeovers (a new process, a new clock) are laid end to end: the time
axis is training time with the downtime between attempts left out.
"""
import bisect
import os
from collections import Counter

from metrics import is_number, percentile

# Table II of the ICAC'19 paper ($/hour: on demand, transient), as mpi_trainer's plan/cost.cpp.
TABLE2 = {"k80": (0.723, 0.256), "p100": (1.43, 0.551), "v100": (2.144, 0.861), "ps": (0.143, 0.041)}
MARK_KINDS = {"revocation": "revocation", "join": "join", "ps_takeover": "takeover",
              "ps_handover": "handover", "checkpoint": "checkpoint",
              "checkpoint_failed": "checkpoint_failed", "ps_replica_checkpoint": "replica_checkpoint",
              "stop": "stop", "error": "error"}

MARK_FIELDS = (("rank", "rank"), ("instance_type", "instance_type"), ("cause", "cause"),
               ("work_lost_steps", "lost_steps"), ("lost_updates", "lost_steps"))


def num(v):
    """v as a float when it is a finite number, else None."""
    return float(v) if is_number(v) else None


def _new_segment(state):
    _close_segment(state)
    state["offset"] += state["seg_max"]
    state.update(seg_max=0.0, t0=None, last_progress=None)
    state["segment"] += 1


def _close_segment(state):
    """Notes the segment's clock: (unix time of its start, unix time of its last event)."""
    if state["t0"] is not None:
        state["clocks"].append((state["t0"], state["t0"] + state["seg_max"]))


def _raw_time(ev, state, virtual):
    """An event's own time in its segment, or None."""
    key = "virtual_seconds" if virtual else "elapsed_seconds"
    t = num(ev.get(key))
    unix = None if virtual else num(ev.get("unix_time"))
    if t is not None and unix is not None and state["t0"] is None:
        state["t0"] = unix - t
    if t is None and ev["event"] == "first_step" and not virtual:
        since = num(ev.get("seconds_since_start"))
        if since is not None and unix is not None:
            state["t0"] = unix - since
        t = since
    if t is None and unix is not None and state["t0"] is not None:
        t = max(0.0, unix - state["t0"])
    if t is None and ev["event"] == "config":
        t = 0.0
    return t


def assign_times(run):
    """Sets _t (report time, or None), _attempt and _segment on every event of the run."""
    virtual = run.virtual
    state = {"offset": 0.0, "seg_max": 0.0, "t0": None, "last_progress": None, "segment": 0, "clocks": []}
    attempt, seen = 0, False
    for ev in run.events:
        kind = ev["event"]
        if kind == "config" and seen:
            _new_segment(state)
            attempt += 1
        elif kind == "ps_takeover":
            _new_segment(state)
        seen = True
        t = _raw_time(ev, state, virtual)
        if kind == "progress" and t is not None:
            if state["last_progress"] is not None and t < state["last_progress"] - 1e-6:
                _new_segment(state)  # the clock went back: a new process
            state["last_progress"] = t
        if t is not None:
            state["seg_max"] = max(state["seg_max"], t)
        ev["_t"] = None if t is None else state["offset"] + t
        ev["_attempt"], ev["_segment"] = attempt, state["segment"]
    _close_segment(state)
    clocks = state["clocks"]
    # Wall-clock seconds from the first start to the last event, downtime between attempts included.
    run.wall_seconds = clocks[-1][1] - clocks[0][0] if clocks and not virtual else None
    _interpolate_times(run.events)


def data_notes(run):
    """Notes for the page where the run has too little data for its panels (after assign_times)."""
    notes = []
    progress = [e for e in run.of("progress") if num(e.get("global_step")) is not None]
    per_segment = {}
    for e in progress:
        per_segment[e["_segment"]] = per_segment.get(e["_segment"], 0) + 1
    if not progress:
        notes.append("no progress events: the loss, throughput and staleness panels are empty (a run shorter "
                     "than --log-every-steps logs only its last step; the metrics file may be cut short)")
    elif max(per_segment.values()) < 2:
        what = "one progress point" if len(progress) == 1 else \
            f"{len(progress)} progress points, one per attempt or takeover"
        notes.append(f"{what}: too few for lines, drawn as points (progress is logged every --log-every-steps, "
                     "default 50, and at the last step: a smaller value draws curves for a short run)")
    elif len(progress) < 25:
        notes.append(f"{len(progress)} progress points: each is marked on the curves")
    if not run.of("eval"):
        notes.append("no evaluation: no test accuracy to draw")
    return notes


def _interpolate_times(events):
    """Gives events without a time the time of their global step in their segment."""
    points = {}
    for ev in events:
        step = num(ev.get("global_step"))
        if ev["_t"] is not None and step is not None:
            points.setdefault(ev["_segment"], []).append((step, ev["_t"]))
    for seg in points.values():
        seg.sort()
    for ev in events:
        step, seg = num(ev.get("global_step")), points.get(ev["_segment"])
        if ev["_t"] is None and step is not None and seg:
            ev["_t"] = _interp(step, seg)


def _interp(x, pts):
    steps = [p[0] for p in pts]
    i = bisect.bisect_left(steps, x)
    if i <= 0:
        return pts[0][1]
    if i >= len(pts):
        return pts[-1][1]
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def timeline(run):
    """The marked events: kind, global_step, time, attempt (and rank, type, cause, lost steps)."""
    out = []
    for ev in run.events:
        kind = ev["event"]
        if kind == "config" and ev["_attempt"] > 0:
            mark = {"kind": "restart"}
        elif kind in MARK_KINDS:
            mark = {"kind": MARK_KINDS[kind]}
        else:
            continue
        step = ev.get("global_step")
        mark.update(global_step=step if is_number(step) else None, time=ev["_t"], attempt=ev["_attempt"] + 1)
        for src, dst in () if kind == "config" else MARK_FIELDS:
            if ev.get(src) is not None:
                mark[dst] = ev[src]
        out.append(mark)
    _steps_of_restarts(run, out)
    return out


def _steps_of_restarts(run, marks):
    """A restart's global step is the step its resume event continues from."""
    resumes = {e["_attempt"]: e.get("global_step") for e in run.of("resume") if is_number(e.get("global_step"))}
    for m in marks:
        if m["kind"] == "restart" and m["global_step"] is None:
            m["global_step"] = resumes.get(m["attempt"] - 1, 0)


def _start_counts(config):
    """Workers per instance type at the start of an attempt."""
    types = [t for t in (config.get("worker_types") or []) if isinstance(t, str)]
    single = config.get("instance_type") or "worker"
    n = num(config.get("virtual_workers"))
    if n is None:
        n = num(config.get("workers"))
    if n is None and num(config.get("processes")) == 1:
        return Counter({single: 1})
    if n is None:
        return Counter(types)
    n = max(0, min(int(n), 100000))
    names = (types + [single] * n)[:n]
    return Counter(names)


def worker_counts(run):
    """{instance type: [(time, active workers)]}, each a step series (a value holds until the next)."""
    counts, points = Counter(), []
    for ev in run.events:
        kind, t = ev["event"], ev["_t"]
        if t is None:
            continue
        if kind == "config":
            counts = _start_counts(ev)
        elif kind == "revocation" and isinstance(ev.get("instance_type"), str):
            counts[ev["instance_type"]] = max(0, counts[ev["instance_type"]] - 1)
        elif kind == "join" and isinstance(ev.get("instance_type"), str):
            counts[ev["instance_type"]] += 1
        elif kind == "progress" and ev.get("workers"):
            listed = Counter(w.get("instance_type") or "worker" for w in ev["workers"] if w.get("active") is not False)
            counts = Counter({k: listed.get(k, 0) for k in set(counts) | set(listed)})
        else:
            continue
        points.append((t, dict(counts)))
    types = sorted({k for _, c in points for k in c})
    return {k: [(t, c.get(k, 0)) for t, c in points] for k in types}


def per_worker(run):
    """{rank: {"type", "t", "ips", "staleness"}} from the progress events' workers lists."""
    out = {}
    for ev in run.of("progress"):
        for w in ev.get("workers") or []:
            rank = num(w.get("rank"))
            if rank is None or ev["_t"] is None:
                continue
            s = out.setdefault(int(rank), {"type": w.get("instance_type") or "?", "t": [], "ips": [], "staleness": []})
            active = w.get("active") is not False
            s["t"].append(ev["_t"])
            s["ips"].append(num(w.get("images_per_second")) if active else None)
            s["staleness"].append(num(w.get("mean_staleness")) if active else None)
    return out


def _prices(run):
    """{type: (on demand, transient)} or None when the run's price file cannot be read."""
    source = run.config_value("prices", "table2")
    if source == "table2":
        return TABLE2
    try:
        if not isinstance(source, str) or not os.path.isfile(source):
            return None
        table = {}
        with open(source, encoding="utf-8") as f:
            for line in f.read(1 << 20).splitlines():
                fields = line.split("#", 1)[0].split()
                if len(fields) == 3 and fields[0] != "type":
                    table[fields[0]] = (float(fields[1]), float(fields[2]))
        return table or None
    except (OSError, ValueError, TypeError, UnicodeDecodeError):
        return None


def accumulated_cost(run):
    """([times], [dollars so far]) billed as mpi_trainer bills, or None with the prices unknown."""
    prices = _prices(run)
    counts = worker_counts(run)
    if prices is None or not counts:
        return None
    transient = run.config_value("pricing") == "transient"
    ps_transient = run.config_value("ps_pricing", run.config_value("pricing")) == "transient"
    single = num(run.config_value("processes")) == 1 and not run.virtual
    ps_rate = 0.0 if single else (num(run.config_value("num_ps")) or 1) * prices.get(
        run.config_value("ps_type", "ps"), (0, 0))[1 if ps_transient else 0]
    rate_of = {k: prices.get(k, (0, 0))[1 if transient else 0] for k in counts}
    times = sorted({t for series in counts.values() for t, _ in series})
    end = max([times[-1]] + [e["_t"] for e in run.events if e["_t"] is not None])
    ts, cost, total = [], [], 0.0
    for i, t in enumerate(times):
        t_next = times[i + 1] if i + 1 < len(times) else end
        rate = ps_rate + sum(rate_of[k] * value_at(counts[k], t) for k in counts)
        ts.append(t)
        cost.append(total)
        total += rate * max(0.0, t_next - t) / 3600.0
    ts.append(end)
    cost.append(total)
    return ts, cost


def value_at(series, t):
    """The value of a step series [(time, value), ...] at time t (0 before its first point)."""
    value = 0
    for ts, v in series:
        if ts > t:
            break
        value = v
    return value


def _sum(values):
    vals = [v for v in values if is_number(v)]
    return sum(vals) if vals else None


def _restart_lost_steps(run):
    """Steps trained again after restarts: each attempt's last step less where the next resumed."""
    last, lost = {}, 0
    for ev in run.events:
        step = ev.get("global_step")
        if is_number(step) and ev["event"] != "resume":
            last[ev["_attempt"]] = max(last.get(ev["_attempt"], 0), step)
    for ev in run.of("resume"):
        step, before = ev.get("global_step"), last.get(ev["_attempt"] - 1)
        if is_number(step) and before is not None:
            lost += max(0, before - step)
    return lost


SUMMARY_FIELDS = ("global_step", "train_seconds", "virtual_seconds", "cost_usd", "test_accuracy",
                  "test_loss", "revocations", "lost_workers", "left_workers", "joined_workers",
                  "workers_start", "workers_end", "checkpoint_failures", "attempts",
                  "resumed_from_step", "exit_code", "stopped_by", "lr_cuts")


def summary_row(run):
    """Every number of the run's summary table row (the summary event's own values where it has them)."""
    s = run.summary or {}
    row = {k: s.get(k) for k in SUMMARY_FIELDS}
    progress = run.of("progress")
    if row["global_step"] is None and progress:
        row["global_step"] = progress[-1].get("global_step")
    revs = run.of("revocation")
    if row["revocations"] is None and revs:
        row["revocations"] = len(revs)
    if row["checkpoint_failures"] is None and run.of("checkpoint_failed"):
        row["checkpoint_failures"] = len(run.of("checkpoint_failed"))
    if row["attempts"] is None:
        row["attempts"] = max([e["_attempt"] for e in run.events] + [0]) + 1
    row["revoked_lost"] = sum(1 for e in revs if e.get("cause") == "lost")
    row["revoked_notice"] = sum(1 for e in revs if e.get("cause") == "notice")
    row["work_lost_steps"] = _sum(e.get("work_lost_steps") for e in revs)
    row["takeover_lost_updates"] = _sum(e.get("lost_updates") for e in run.of("ps_takeover"))
    row["restart_lost_steps"] = _restart_lost_steps(run) if run.of("resume") else None
    parts = [row["work_lost_steps"], row["takeover_lost_updates"], row["restart_lost_steps"]]
    row["steps_lost"] = None if all(p is None for p in parts) else sum(p or 0 for p in parts)
    row["wall_seconds"] = getattr(run, "wall_seconds", None)
    row["job_revocations"] = _job_revocations(run)
    row["time_seconds"] = row["virtual_seconds"] if run.virtual else row["train_seconds"]
    if row["time_seconds"] is None:
        times = [e["_t"] for e in run.events if e["_t"] is not None]
        row["time_seconds"] = max(times) if times else None
    row["warnings"] = list(s.get("warnings") or [])
    row["from_summary"] = run.summary is not None
    return row


def _job_revocations(run):
    """Revocations over every attempt: revoked workers, parameter servers taken over, and
    attempts that ended without a summary (a lost parameter server stops the job)."""
    ended = {e["_attempt"] for e in run.of("summary")}
    last = max([e["_attempt"] for e in run.events] + [0])
    lost_ps = sum(1 for a in range(last) if a not in ended)
    return len(run.of("revocation")) + len(run.of("ps_takeover")) + lost_ps


def _plan_actuals(run, row):
    """(measure, value) of the run's time and revocations to score against a plan, which
    forecasts the whole job: wall-clock time with restarts, every attempt's revocations."""
    if run.virtual or row["wall_seconds"] is None:
        time = ("time_seconds", row["time_seconds"])
    else:
        time = ("wall_seconds", row["wall_seconds"])
    revs = row["revocations"] if is_number(row["revocations"]) else None
    if row["attempts"] and row["attempts"] > 1:
        return time, ("job_revocations", max(revs or 0, row["job_revocations"]))
    return time, ("revocations", revs if revs is not None else row["job_revocations"])


def _band(actual, p10, median, p90):
    inside = None if actual is None or p10 is None else bool(p10 - 1e-9 <= actual <= p90 + 1e-9)
    return {"actual": actual, "p10": p10, "median": median, "p90": p90, "inside_band": inside}


def score_plan(plan, run, row):
    """The plan's forecast of time, cost and revocations against what the run did."""
    out = {}
    (time_measure, time), (revs_measure, actual) = _plan_actuals(run, row)
    for name, key, value, measure in (("time_seconds", "seconds", time, time_measure),
                                      ("cost_usd", "cost_usd", row["cost_usd"], "cost_usd")):
        b = plan[key]
        out[name] = _band(value if is_number(value) else None, float(b["p10"]), float(b["median"]), float(b["p90"]))
        out[name]["measure"] = measure
    draws = plan["per_draw"].get("revocations")
    if draws:
        out["revocations"] = _band(actual, percentile(draws, 0.1), percentile(draws, 0.5), percentile(draws, 0.9))
        out["revocations"]["band_from"] = "per_draw"
    else:
        out["revocations"] = _band(None, None, None, None)
        out["revocations"].update(actual=actual, band_from=None,
                                  note="the plan has no per-draw revocations (plan --json --per-draw): no band")
    out["revocations"].update(mean=plan.get("revocations_mean"), measure=revs_measure)
    out["notes"] = _plan_mismatches(plan, run, row)
    return out


def _plan_mismatches(plan, run, row):
    notes = []
    pairs = (("global_steps", run.config_value("train_steps"), "global steps"),
             ("workers", row["workers_start"], "workers at the start"),
             ("model", run.config_value("model"), "model"))
    for key, actual, what in pairs:
        if plan.get(key) is not None and actual is not None and plan.get(key) != actual:
            notes.append(f"the plan's {what}: {plan.get(key)}, the run's: {actual}")
    if not run.virtual and run.config_value("emulation") is None:
        notes.append("a real run without --emulate-device: its speed is this machine's, the plan's the device table's")
    return notes
