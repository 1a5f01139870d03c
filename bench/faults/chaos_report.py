#!/usr/bin/python3
"""The fault suite's conformance report (bench/faults/chaos.sh, issue 43): one record per run, then one
versioned JSON document per suite run (schema in docs/fault-model.md, "The conformance report").

  chaos_report.py run --metrics M.jsonl --log LOOP.txt --scenario S --out RUNS.jsonl [...]
      Checks one run's invariants and appends its record to RUNS.jsonl. Prints why the run
      failed (nothing when it passed): the job finished (summary at the last step, exit 0); no
      attempt resumed from a step older than a checkpoint published before it; a PS kill under
      ULFM was taken over in the same attempt; a damaged checkpoint was skipped and reported; the
      newest --ckpt-keep published checkpoints are still there and verify (--present).
  chaos_report.py report --runs RUNS.jsonl --out REPORT.json [--version TEXT] [--job JSON]
      Summarises the records per scenario, writes the document, prints its table (Markdown).

Times come from the processes' own clocks on one machine: the fault (a "revoked (...) at unix T"
line of the process that signalled itself, or --fault-unix for a signal sent from outside), its
detection (the parameter server's `revocation` event for a worker, the first worker's "at unix T:
the parameter server is lost" line or the standby's takeover for the PS, the PS's `stop` event for
a notice) and the first step applied after it (the next `first_step` event: a takeover's, or the
restart's).
"""
import argparse
import json
import re
import statistics
import sys
import time

SCHEMA = "mpi_trainer.chaos_report/1"
PS_KILLS = ("ps-kill", "ps-kill-mid", "ps-kill-rep", "ps-shard-kill")
# Faults of the parameter server: the job stops applying steps until a takeover or a restart.
PS_FAULTS = PS_KILLS + ("takeover-kill", "ps-term-mid", "hung-ps", "hung-ps-remote", "notice-all", "truncated",
                        "bit-flipped", "wrong-version")
# The history checker's counts kept in each run's record (bench/faults/history_check.py).
HISTORY_COUNTS = ("acknowledged", "acknowledged_lost", "rolled_back_by_restart", "lost_with_their_worker", "applied_twice", "steps_made_twice",
                  "steps_missing", "takeover_lost_updates", "superseded_lines", "checkpoint_violations", "epochs")
SCENARIOS = ["worker-kill", "ps-kill", "ps-kill-mid", "ps-kill-rep", "ps-shard-kill", "takeover-kill", "ps-term-mid",
             "hung-worker",
             "hung-ps", "hung-ps-remote", "notice-one", "notice-all", "disk-full", "read-only", "fsync-fail", "truncated", "bit-flipped",
             "wrong-version"]

REVOKED = re.compile(r"mpi_trainer: rank (\d+): revoked \(.*\): (\S+) to itself at unix ([0-9.]+)")
PS_LOST = re.compile(r"at unix ([0-9.]+): the parameter server is lost")


def check_run(a, events, log):
    """(why, record fields): why is empty when every invariant holds."""
    rec = {"updates_lost": None, "detection_seconds": None, "first_step_seconds": None, "checkpoints_lost": 0,
           "resumed_behind_durable": False}
    faults = [(int(r), sig, float(t)) for r, sig, t in REVOKED.findall(log)]
    fault_unix = a.fault_unix if a.fault_unix is not None else (min(t for _, _, t in faults) if faults else None)
    rec["fault_unix"] = fault_unix
    if not events:
        return "no metrics were written", rec
    s = events[-1]
    # Each later attempt (a "config" event) resumed from a "resume" event just before it, or from 0.
    # The step never goes back past what was durable: a resume starts at or after the newest
    # checkpoint published (a "checkpoint" event) before. Work lost: the last step the PS reported
    # before it was lost minus the step the next attempt resumed from.
    lost, last, durable, resumed, configs, behind = [], 0, 0, None, 0, ""
    for e in events:
        kind, step = e["event"], e.get("global_step")
        if kind == "resume":
            resumed = step
        elif kind == "config":
            configs += 1
            if configs > 1:
                start = resumed if resumed is not None else 0
                if start < durable and not behind:
                    behind = f"resumed from step {start}, older than the checkpoint of step {durable} published before"
                lost.append(max(0, last - start))
                last = start
            resumed = None
        elif kind in ("progress", "checkpoint") and step is not None:
            last = max(last, step)
            if kind == "checkpoint" and step != a.damaged:
                durable = max(durable, step)
    rec["resumed_behind_durable"] = bool(behind)
    takeovers = [e for e in events if e["event"] == "ps_takeover"]
    if (a.scenario in PS_KILLS and a.ulfm) or (a.scenario in PS_FAULTS and takeovers and not lost):
        rec["updates_lost"] = takeovers[0]["lost_updates"] if takeovers else None
    elif a.scenario in PS_FAULTS:
        rec["updates_lost"] = max(lost) if lost else None
    # Detection and the first step after the fault.
    if fault_unix is not None:
        if a.scenario in ("worker-kill", "hung-worker", "notice-one"):
            # Each worker's own fault to its own revocation event; the slowest of them.
            at = {r: t for r, _, t in faults} if faults else {a.rank: fault_unix}
            seen = {}
            for e in events:
                r = e.get("rank")
                if e["event"] == "revocation" and r in at and r not in seen and e.get("unix_time", 0) >= at[r]:
                    seen[r] = e["unix_time"] - at[r]
            rec["detection_seconds"] = max(seen.values()) if len(seen) == len(at) else None
        elif a.scenario in PS_FAULTS:
            if takeovers:
                rec["detection_seconds"] = takeovers[0]["lost_at_unix"] - fault_unix
            elif a.scenario in ("ps-term-mid", "notice-all"):
                stops = [e["unix_time"] for e in events if e["event"] == "stop" and e["unix_time"] >= fault_unix]
                rec["detection_seconds"] = min(stops) - fault_unix if stops else None
            else:
                losses = [float(t) for t in PS_LOST.findall(log) if float(t) >= fault_unix]
                rec["detection_seconds"] = min(losses) - fault_unix if losses else None
            firsts = [e["unix_time"] for e in events if e["event"] == "first_step" and e["unix_time"] > fault_unix]
            rec["first_step_seconds"] = min(firsts) - fault_unix if firsts else None
    # The newest --ckpt-keep checkpoints published (all with 0) must be there and verify. A
    # takeover's replica, written as a checkpoint before the new PS goes on, is one of them, and so
    # is a standby's replica written for the restart (ps_replica_checkpoint, the default build): each
    # newer than the old PS's last, so retention may rightly remove an older one for it.
    published = sorted(({e["global_step"] for e in events if e["event"] == "checkpoint"}
                        | {e["replica_step"] for e in events if e["event"] == "ps_takeover"}
                        | {e["global_step"] for e in events if e["event"] == "ps_replica_checkpoint"}) - {a.damaged})
    expected = published[-a.keep:] if a.keep > 0 else published
    present = {int(m) for m in re.findall(r"ckpt-0*(\d+)\.h5", a.present)}
    missing = [st for st in expected if st not in present]
    rec["checkpoints_lost"] = len(missing)
    if s["event"] != "summary" or s["global_step"] != a.steps or s["exit_code"] != 0:
        return f"did not finish: {s}", rec
    if behind:
        return behind, rec
    if a.damaged is not None:
        name = f"ckpt-{a.damaged:010d}.h5"
        if not any(e["event"] == "checkpoint_skipped" and name in e["reason"] for e in events):
            return f"the damaged {name} was not reported as skipped", rec
    # Under ULFM a hung PS is ended by a worker on its node, or reported failed through the runtime,
    # and taken over too (Worker::end_hung_shard).
    if (a.scenario in PS_KILLS or a.scenario in ("hung-ps", "hung-ps-remote")) and a.ulfm:
        if configs != 1 or len(takeovers) != 1:
            return (f"ULFM: the PS fault was not taken over in the same attempt ({configs} attempt(s), "
                    f"{len(takeovers)} takeover(s))"), rec
        seen = [e["global_step"] for e in events if e["event"] == "progress"]
        if seen != sorted(seen):
            return f"the global step went back: {seen}", rec
        # The survivors' push journals are replayed after the replica (docs/fault-model.md,
        # "Zero-loss takeover"): a PS (or shard) lost alone loses nothing.
        config = next((e for e in events if e["event"] == "config"), {})
        if config.get("push_journal", "on") == "on" and takeovers[0].get("lost_updates") != 0:
            return f"the takeover lost {takeovers[0].get('lost_updates')} update(s) with the push journal on", rec
    elif a.scenario in PS_KILLS + ("hung-ps", "hung-ps-remote") and not lost:
        return "the PS fault did not lead to a second attempt", rec
    if missing:
        return f"published checkpoint(s) of step(s) {missing} missing or failing to verify at the end", rec
    return "", rec


def run(a):
    try:
        events = [json.loads(l) for l in open(a.metrics)]
    except FileNotFoundError:
        events = []
    log = open(a.log, errors="replace").read() if a.log else ""
    why, rec = check_run(a, events, log) if not a.skipped else ("", {})
    why = a.why or why
    # The history checker's verdict on the run (bench/faults/history_check.py --json): a violation
    # fails the run; a history it could not read is recorded as such.
    if a.history and not a.skipped:
        try:
            h = json.load(open(a.history))
            rec["history"] = {"verdict": "ok" if not h["violations"] else "violation",
                              "first_violation": (f"{h['violations'][0]['kind']}: {h['violations'][0]['evidence']}"
                                                  if h["violations"] else None),
                              **{k: h["counts"][k] for k in HISTORY_COUNTS}}
            if h["violations"] and not why:
                why = f"history: {rec['history']['first_violation']}"
        except (OSError, ValueError, KeyError) as e:
            rec["history"] = {"verdict": "unreadable", "first_violation": None, "why": a.history_why or str(e)}
    rec = {k: round(v, 3) if isinstance(v, float) else v for k, v in rec.items()}
    record = {"run": a.run, "scenario": a.scenario, "fault": a.note, "skipped": a.skipped,
              "finished": not why and not a.skipped, "why": why or None, "seconds": a.seconds,
              "attempts": a.attempts, **rec}
    with open(a.out, "a") as f:
        f.write(json.dumps(record) + "\n")
    if why and not a.why:
        print(why)


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def history_summary(runs):
    """The history checker's verdicts over a scenario's runs: ok / checked, unreadable, and the
    counts that must stay 0 (acknowledged pushes lost, applied twice) summed."""
    hs = [r["history"] for r in runs if r.get("history")]
    if not hs:
        return None
    ok = [h for h in hs if h["verdict"] in ("ok", "violation")]
    return {"checked": len(ok), "ok": sum(h["verdict"] == "ok" for h in hs),
            "unreadable": sum(h["verdict"] == "unreadable" for h in hs),
            **{k: sum(h.get(k) or 0 for h in ok) for k in ("acknowledged", "acknowledged_lost", "applied_twice",
                                                           "rolled_back_by_restart", "lost_with_their_worker",
                                                           "takeover_lost_updates")}}


def report(a):
    runs = [json.loads(l) for l in open(a.runs)] if a.runs else []
    scenarios = []
    for name in SCENARIOS + sorted({r["scenario"] for r in runs} - set(SCENARIOS)):
        rs = [r for r in runs if r["scenario"] == name]
        if not rs:
            continue
        done = [r for r in rs if not r["skipped"]]
        lost = [r["updates_lost"] for r in done if r.get("updates_lost") is not None]
        scenarios.append({
            "scenario": name, "runs": len(done), "finished": sum(r["finished"] for r in done),
            "skipped": len(rs) - len(done),
            "detection_seconds": summary(r.get("detection_seconds") for r in done),
            "first_step_seconds": summary(r.get("first_step_seconds") for r in done),
            "updates_lost": ({**summary(lost), "total": sum(lost)} if lost else None),
            "checkpoints_lost": sum(r.get("checkpoints_lost") or 0 for r in done),
            "resumed_behind_durable": sum(bool(r.get("resumed_behind_durable")) for r in done),
            "history": history_summary(done)})
    ran = [r for r in runs if not r["skipped"]]
    doc = {"schema": SCHEMA, "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "trainer": [l for l in a.version.split(";") if l], "job": json.loads(a.job) if a.job else {},
           "invariants": {"every_run_finished": all(r["finished"] for r in ran),
                          "no_checkpoint_lost": all(not r.get("checkpoints_lost") for r in ran),
                          "never_behind_durable": all(not r.get("resumed_behind_durable") for r in ran),
                          "history_ok": all((r.get("history") or {}).get("verdict") != "violation" for r in ran)},
           "scenarios": scenarios, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    fmt = lambda s: "–" if s is None else f"{s['median']:g} / {s['max']:g}"
    def hist(h):
        if not h:
            return "–"
        unread = f", {h['unreadable']} unreadable" if h["unreadable"] else ""
        return (f"{h['ok']}/{h['checked']} ok{unread}; acked {h['acknowledged']}: lost {h['acknowledged_lost']}, "
                f"twice {h['applied_twice']}, rolled back {h['rolled_back_by_restart']}, "
                f"lost with their worker {h['lost_with_their_worker']}")
    print("| scenario | finished | detection s (median / max) | first step s (median / max) | updates lost (median / max) | checkpoints lost | resumed behind durable | history (checker) |")
    print("|---|---|---|---|---|---|---|---|")
    for s in scenarios:
        skipped = f" ({s['skipped']} skipped)" if s["skipped"] else ""
        print(f"| {s['scenario']} | {s['finished']}/{s['runs']}{skipped} | {fmt(s['detection_seconds'])} | "
              f"{fmt(s['first_step_seconds'])} | {fmt(s['updates_lost'])} | {s['checkpoints_lost']} | "
              f"{s['resumed_behind_durable']} | {hist(s['history'])} |")
    print(f"chaos report: {a.out} ({SCHEMA}); invariants: "
          + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in doc["invariants"].items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--metrics", required=True)
    r.add_argument("--log", default="")
    r.add_argument("--scenario", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--run", type=int, default=0)
    r.add_argument("--note", default="")
    r.add_argument("--steps", type=int, default=200)
    r.add_argument("--keep", type=int, default=3)
    r.add_argument("--damaged", type=int, default=None)
    r.add_argument("--ulfm", type=int, default=0)
    r.add_argument("--rank", type=int, default=-1, help="the worker a fault from outside hit")
    r.add_argument("--fault-unix", type=float, default=None, help="when a fault from outside was sent")
    r.add_argument("--present", default="", help="the checkpoint files there at the end that verify")
    r.add_argument("--seconds", type=float, default=0)
    r.add_argument("--attempts", type=int, default=0)
    r.add_argument("--why", default="", help="a failure found by chaos.sh itself")
    r.add_argument("--skipped", action="store_true")
    r.add_argument("--history", default="", help="the history checker's --json output for this run")
    r.add_argument("--history-why", default="", help="why the history checker could not read the run's history")
    p = sub.add_parser("report")
    p.add_argument("--runs", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--version", default="")
    p.add_argument("--job", default="")
    a = ap.parse_args()
    run(a) if a.cmd == "run" else report(a)


if __name__ == "__main__":
    sys.exit(main())
