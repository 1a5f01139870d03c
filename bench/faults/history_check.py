#!/usr/bin/python3
"""The history checker: reads a run's whole history (--push-log FILE and the workers' FILE.acks/,
app/history_log.hpp) and proves, from the run's own record, what the fault suite only estimates
(docs/fault-model.md, "The history and its checker"):

  - no acknowledged push lost: every push a worker was told made global step s is the push that
    made step s in the run's final history, unless a restart resumed behind it (the documented
    loss of a restart: counted as rolled back, not a violation) or a takeover did while that
    worker was gone (its push journal lost with it, a second failure: counted, not a violation);
  - none applied twice: a worker's push (its attempt, data slot and push number) makes one step of
    the final history at most;
  - one push per step and epoch: no parameter server made one step twice; no step of a parameter
    server's own range is missing (steps a takeover could not replay are counted as lost updates);
  - checkpoints published in step order, each by the newest epoch only: none by a parameter server
    after a newer one had started, none of a step its epoch had not made;
  - the run's summary (--metrics) ends at the history's last step.

The final history is built epoch by epoch: each parameter server (a `start` line: a new run or a
resume; a `takeover` line: a lost one taken over inside the job) discards the steps after the state
it starts from and adds its own. A takeover's replayed pushes re-make the lost one's steps.

  history_check.py PUSH_LOG [--acks DIR] [--metrics M.jsonl] [--json OUT]

Prints the counts, then `history: ok` or `history: N violation(s)` with the first one and its
evidence (--all: every one). Exit 0: ok; 1: a violation; 2: the history cannot be read.
"""
import argparse
import csv
import glob
import json
import os
import sys

PUSH_KINDS = ("applied", "counted", "replayed", "replayed-counted")
START_KINDS = ("start", "takeover")


class InputError(Exception):
    pass


def read_push_log(path):
    """The parameter servers' lines in file order: dicts with step, rank, slot, push_id, epoch, kind, line."""
    try:
        f = open(path, newline="")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    with f:
        rows = list(csv.reader(f))
    if not rows or rows[0][:9] != ["step", "rank", "pulled", "staleness", "seconds", "slot", "push_id", "epoch", "kind"]:
        raise InputError(f"{path}: not a push log with the history's columns (step,...,epoch,kind): "
                         "written by an older mpi_trainer, or not a push log")
    out = []
    for n, r in enumerate(rows[1:], start=2):
        if len(r) != 9 or r[8] not in PUSH_KINDS + START_KINDS + ("checkpoint",):
            raise InputError(f"{path}:{n}: malformed line {','.join(r)!r}")
        try:
            out.append({"step": int(r[0]), "rank": int(r[1]), "slot": int(r[5]), "push_id": int(r[6]),
                        "epoch": int(r[7]), "kind": r[8], "line": n})
        except ValueError:
            raise InputError(f"{path}:{n}: malformed line {','.join(r)!r}")
    return out


def read_acks(directory):
    """Every worker's acknowledged pushes: dicts with slot, push_id, step, applied, epoch, file, line."""
    acks = []
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows or rows[0] != ["slot", "push_id", "step", "applied", "epoch", "unix_time"]:
            raise InputError(f"{path}: not an acknowledgment log")
        for n, r in enumerate(rows[1:], start=2):
            try:
                acks.append({"slot": int(r[0]), "push_id": int(r[1]), "step": int(r[2]), "applied": r[3] == "1",
                             "epoch": int(r[4]), "file": os.path.basename(path), "line": n})
            except (ValueError, IndexError):
                raise InputError(f"{path}:{n}: malformed line {','.join(r)!r}")
    return acks


def read_summary(path):
    summary = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                e = json.loads(line)
                if e.get("event") == "summary":
                    summary = e
    return summary


def describe(entry):
    if entry is None:
        return "no push"
    return f"slot {entry['slot']} push {entry['push_id']} ({entry['kind']}, epoch {entry['epoch']}, line {entry['line']})"


def check(lines, acks=None, summary=None):
    """(counts, violations): violations is a list of (kind, evidence) in the order found."""
    violations = []
    counts = {"epochs": 0, "restarts": 0, "takeovers": 0, "push_lines": 0, "steps": 0, "first_step": None,
              "last_step": None, "acknowledged": 0, "acknowledged_in_history": 0, "rolled_back_by_restart": 0,
              "lost_with_their_worker": 0, "acknowledged_lost": 0, "applied_twice": 0, "steps_made_twice": 0, "steps_missing": 0,
              "takeover_lost_updates": 0, "superseded_lines": 0, "checkpoints": 0, "checkpoint_violations": 0}

    def violate(kind, evidence):
        violations.append((kind, evidence))

    # Epochs: each start or takeover line begins one; its attempt (restarts count up).
    starts = [ln for ln in lines if ln["kind"] in START_KINDS]
    if not starts:
        raise InputError("the push log has no start line: it is not the history of a parameter-server run")
    epoch_of = {}
    attempt = 0
    for ln in starts:
        if ln["epoch"] in epoch_of:
            raise InputError(f"epoch {ln['epoch']} starts twice (line {ln['line']}): the run had no --ckpt-dir "
                             "(no epochs), or the push log holds several runs")
        if ln["kind"] == "start":
            attempt += 1
        epoch_of[ln["epoch"]] = {"attempt": max(attempt, 1), "base": ln["step"], "kind": ln["kind"], "line": ln["line"]}
    counts["epochs"] = len(epoch_of)
    counts["restarts"] = sum(e["kind"] == "start" for e in epoch_of.values()) - 1
    counts["takeovers"] = sum(e["kind"] == "takeover" for e in epoch_of.values())
    for ln in lines:
        if ln["kind"] not in START_KINDS and ln["epoch"] not in epoch_of:
            raise InputError(f"line {ln['line']}: epoch {ln['epoch']} has no start line")

    # File order: lines of an epoch after a newer one began are a superseded parameter server's;
    # checkpoints must come from the newest epoch, in step order, of steps their epoch had made.
    newest = None
    made = {}        # epoch -> highest step made so far
    ckpt_last = {}   # epoch -> last checkpoint step
    for ln in lines:
        e = ln["epoch"]
        if ln["kind"] in START_KINDS:
            newest = e if newest is None else max(newest, e)
            made[e] = ln["step"]
            continue
        if newest is not None and e < newest:
            counts["superseded_lines"] += 1
        if ln["kind"] in PUSH_KINDS:
            made[e] = max(made.get(e, ln["step"]), ln["step"])
            continue
        counts["checkpoints"] += 1  # a checkpoint
        if e < newest:
            violate("checkpoint by a superseded epoch",
                    f"line {ln['line']}: epoch {e} published its checkpoint of step {ln['step']} after epoch {newest} "
                    f"had started (line {epoch_of[newest]['line']})")
        elif ln["step"] < ckpt_last.get(e, -1):
            violate("checkpoints out of order",
                    f"line {ln['line']}: epoch {e} published step {ln['step']} after step {ckpt_last[e]}")
        elif not epoch_of[e]["base"] <= ln["step"] <= made.get(e, epoch_of[e]["base"]):
            violate("checkpoint of a step not made",
                    f"line {ln['line']}: epoch {e} published step {ln['step']}; it had made steps "
                    f"{epoch_of[e]['base']}..{made.get(e, epoch_of[e]['base'])}")
        ckpt_last[e] = max(ckpt_last.get(e, -1), ln["step"])
    counts["checkpoint_violations"] = sum(k.startswith("checkpoint") for k, _ in violations)

    # The final history, epoch by epoch.
    history = {}                 # step -> entry (with its attempt)
    replay_ranges = []           # (base, first live step) of each takeover: steps it could not re-make
    by_epoch = {}
    for ln in lines:
        if ln["kind"] in PUSH_KINDS:
            counts["push_lines"] += 1
            by_epoch.setdefault(ln["epoch"], []).append(ln)
    for e in sorted(epoch_of):
        info = epoch_of[e]
        base = info["base"]
        for s in [s for s in history if s > base]:
            del history[s]
        own = {}
        for ln in by_epoch.get(e, []):
            entry = dict(ln, attempt=info["attempt"])
            if ln["step"] <= base:
                violate("step at or before its epoch's start",
                        f"line {ln['line']}: epoch {e} made step {ln['step']}, starting from step {base}")
                continue
            if ln["step"] in own:
                counts["steps_made_twice"] += 1
                violate("step made twice",
                        f"epoch {e} made step {ln['step']} twice: {describe(own[ln['step']])} and {describe(entry)}")
                continue
            own[ln["step"]] = entry
            history[ln["step"]] = entry
        if info["kind"] == "takeover":
            live = [s for s, x in own.items() if x["kind"] in ("applied", "counted")]
            replay_ranges.append((base, min(live) if live else max(own, default=base) + 1, e))
    if history:
        counts["first_step"], counts["last_step"] = min(history), max(history)
        counts["steps"] = len(history)
        lowest = min(epoch_of[e]["base"] for e in epoch_of)
        for s in range(lowest + 1, max(history) + 1):
            if s in history:
                continue
            if any(b < s < live for b, live, _ in replay_ranges):
                counts["takeover_lost_updates"] += 1
            else:
                counts["steps_missing"] += 1
                violate("step missing", f"no push made step {s} in the final history")

    # Applied twice: one push (attempt, slot, number) at two steps of the final history.
    seen = {}
    for s in sorted(history):
        x = history[s]
        if x["push_id"] <= 0:
            continue
        key = (x["attempt"], x["slot"], x["push_id"])
        if key in seen:
            counts["applied_twice"] += 1
            violate("applied twice", f"slot {x['slot']} push {x['push_id']} (attempt {x['attempt']}) made steps "
                                     f"{seen[key]} and {s}: {describe(history[seen[key]])}; {describe(x)}")
        else:
            seen[key] = s

    # Acknowledged pushes: each is in the final history at its step, or a restart discarded it.
    last_epoch = {}  # each worker process's newest acknowledging epoch
    for a in acks or []:
        last_epoch[a["file"]] = max(last_epoch.get(a["file"], 0), a["epoch"])
    for a in acks or []:
        counts["acknowledged"] += 1
        info = epoch_of.get(a["epoch"])
        where = f"{a['file']}:{a['line']}"
        if info is None:
            counts["acknowledged_lost"] += 1
            violate("acknowledged by an unknown epoch",
                    f"{where}: slot {a['slot']} push {a['push_id']} acknowledged as step {a['step']} by epoch "
                    f"{a['epoch']}, which has no start line")
            continue
        x = history.get(a["step"])
        if x is not None and (x["attempt"], x["slot"], x["push_id"]) == (info["attempt"], a["slot"], a["push_id"]):
            counts["acknowledged_in_history"] += 1
            if a["applied"] != (x["kind"] in ("applied", "replayed")):
                violate("acknowledged otherwise", f"{where}: slot {a['slot']} push {a['push_id']} acknowledged as "
                                                  f"{'applied' if a['applied'] else 'counted'} at step {a['step']}; "
                                                  f"the history has {describe(x)}")
            continue
        # A restart after the acknowledgment resumed from a state before its step.
        if any(e > a["epoch"] and r["kind"] == "start" and r["base"] < a["step"] for e, r in epoch_of.items()):
            counts["rolled_back_by_restart"] += 1
            continue
        # A takeover after it started from a state before its step, and the worker told of it was
        # gone by then (no acknowledgment from that takeover's epoch on): its journal, the one copy
        # of the push, was lost with it (a second failure). Counted, not a violation.
        later = [e for e, r in epoch_of.items() if e > a["epoch"] and r["kind"] == "takeover"
                 and r["attempt"] == info["attempt"] and r["base"] < a["step"]]
        if later and last_epoch[a["file"]] < min(later):
            counts["lost_with_their_worker"] += 1
            continue
        counts["acknowledged_lost"] += 1
        violate("acknowledged push lost",
                f"{where}: slot {a['slot']} push {a['push_id']} acknowledged as step {a['step']} by epoch {a['epoch']}; "
                f"the final history's step {a['step']} is {describe(x)}")

    if summary is not None and history and summary.get("global_step") != max(history):
        violate("summary differs", f"the summary ends at step {summary.get('global_step')}, the history at {max(history)}")
    return counts, violations


def report(counts, violations, show_all=False, out=None):
    out = out or sys.stdout
    c = counts
    print(f"history: {c['epochs']} epoch(s) ({c['restarts']} restart(s), {c['takeovers']} takeover(s)), "
          f"{c['push_lines']} push line(s), {c['steps']} step(s) in the final history "
          f"({c['first_step']}..{c['last_step']}); {c['acknowledged']} acknowledged push(es): "
          f"{c['acknowledged_in_history']} in the history, {c['rolled_back_by_restart']} rolled back by a restart, "
          f"{c['lost_with_their_worker']} lost with their worker in a takeover, {c['acknowledged_lost']} lost; {c['applied_twice']} applied twice; {c['steps_made_twice']} step(s) made "
          f"twice; {c['steps_missing']} missing, {c['takeover_lost_updates']} lost in takeovers; "
          f"{c['superseded_lines']} line(s) of superseded epochs; {c['checkpoints']} checkpoint(s), "
          f"{c['checkpoint_violations']} out of order or superseded", file=out)
    if not violations:
        print("history: ok", file=out)
        return
    print(f"history: {len(violations)} violation(s); first: {violations[0][0]}: {violations[0][1]}", file=out)
    if show_all:
        for kind, evidence in violations[1:]:
            print(f"  {kind}: {evidence}", file=out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("push_log", help="the run's --push-log FILE")
    p.add_argument("--acks", help="the workers' acknowledgments (default: PUSH_LOG.acks when it exists)")
    p.add_argument("--metrics", help="the run's --metrics file: its summary must end at the history's last step")
    p.add_argument("--json", help="write the counts and the violations here (JSON)")
    p.add_argument("--all", action="store_true", help="print every violation, not only the first")
    a = p.parse_args(argv)
    try:
        lines = read_push_log(a.push_log)
        acks_dir = a.acks or (a.push_log + ".acks")
        if a.acks and not os.path.isdir(a.acks):
            raise InputError(f"--acks {a.acks}: no such directory")
        acks = read_acks(acks_dir) if os.path.isdir(acks_dir) else []
        summary = read_summary(a.metrics) if a.metrics else None
        if a.metrics and summary is None:
            raise InputError(f"--metrics {a.metrics}: no summary line (the run did not finish)")
        counts, violations = check(lines, acks, summary)
    except (InputError, OSError, json.JSONDecodeError) as e:
        print(f"history_check: {e}", file=sys.stderr)
        return 2
    report(counts, violations, a.all)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"counts": counts, "violations": [{"kind": k, "evidence": v} for k, v in violations]}, f, indent=1)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
