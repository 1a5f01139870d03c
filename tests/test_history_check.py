#!/usr/bin/python3
"""bench/faults/history_check.py on hand-made histories: a clean run, a restart, a takeover, and one
history per violation, each found with its evidence (and the exit code the chaos suite reads).

  test_history_check.py [REPO]
"""
import contextlib
import io
import os
import pathlib
import sys
import tempfile

repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(repo / "bench" / "faults"))
import history_check as hc  # noqa: E402

HEADER = "step,rank,pulled,staleness,seconds,slot,push_id,epoch,kind\n"
failures = []


def line(step, slot=-1, push=-1, epoch=1, kind="applied", rank=None):
    rank = (slot + 1 if slot >= 0 else -1) if rank is None else rank
    return f"{step},{rank},{max(step - 2, 0)},1,0.5,{slot},{push},{epoch},{kind}\n"


def steady(first, last, epoch=1, workers=2, pushes=None, kind="applied"):
    """Steps first..last made round-robin by `workers` slots; `pushes` counts each slot's number."""
    pushes = pushes if pushes is not None else {}
    out = []
    for s in range(first, last + 1):
        slot = s % workers
        pushes[slot] = pushes.get(slot, 0) + 1
        out.append((line(s, slot, pushes[slot], epoch, kind), (slot, pushes[slot], s, 1, epoch)))
    return out


def run(name, ps_lines, acks=(), summary_step=None, want_rc=0, want=None, counts=None):
    """Writes the history, runs the checker's command line, checks its exit code, its first
    violation's kind (`want`) and the given counts. `acks`: one worker's acknowledgments, or
    {file name: acknowledgments} for several workers."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "push.csv")
        with open(log, "w") as f:
            f.write(HEADER + "".join(ps_lines))
        os.mkdir(log + ".acks")
        for fname, rows in (acks if isinstance(acks, dict) else {"rank1-pid1.csv": acks}).items():
            with open(os.path.join(log + ".acks", fname), "w") as f:
                f.write("slot,push_id,step,applied,epoch,unix_time\n")
                f.writelines(f"{a[0]},{a[1]},{a[2]},{a[3]},{a[4]},1.5\n" for a in rows)
        args = [log]
        if summary_step is not None:
            m = os.path.join(d, "m.jsonl")
            with open(m, "w") as f:
                f.write('{"event":"config"}\n{"event":"summary","global_step":%d}\n' % summary_step)
            args += ["--metrics", m]
        js = os.path.join(d, "out.json")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = hc.main(args + ["--json", js])
        text = out.getvalue() + err.getvalue()
        problems = []
        if rc != want_rc:
            problems.append(f"exit {rc}, wanted {want_rc}")
        if want and f"first: {want}:" not in text:
            problems.append(f"first violation not {want!r}")
        if rc in (0, 1):
            import json
            got = json.load(open(js))["counts"]
            for k, v in (counts or {}).items():
                if got[k] != v:
                    problems.append(f"{k} = {got[k]}, wanted {v}")
        if problems:
            failures.append(name)
            print(f"FAIL: {name}: {'; '.join(problems)}\n{text}")
        else:
            print(f"ok: {name}: {text.strip().splitlines()[-1]}")


def split(pairs):
    return [p[0] for p in pairs], [p[1] for p in pairs]


# A clean run: 40 steps, every push acknowledged, two checkpoints.
ps, acks = split(steady(1, 40))
clean = [line(0, kind="start")] + ps[:20] + [line(20, kind="checkpoint")] + ps[20:] + [line(40, kind="checkpoint")]
run("clean", clean, acks, summary_step=40,
    counts={"steps": 40, "acknowledged": 40, "acknowledged_in_history": 40, "checkpoints": 2})

# A restart: epoch 1 made 1..27, published 20, died; epoch 2 resumed from 20 and made 21..40.
# The acknowledgments of 21..27 by epoch 1 were rolled back by the restart: not a violation.
p1, a1 = split(steady(1, 27))
p2, a2 = split(steady(21, 40, epoch=2))
restart = ([line(0, kind="start")] + p1[:20] + [line(20, kind="checkpoint")] + p1[20:] +
           [line(20, epoch=2, kind="start")] + p2 + [line(40, epoch=2, kind="checkpoint")])
run("restart", restart, a1 + a2, summary_step=40,
    counts={"restarts": 1, "rolled_back_by_restart": 7, "acknowledged_lost": 0, "acknowledged_in_history": 40})

# A takeover: epoch 1 made 1..30 (its replica of 25); epoch 2 took over from 25, replayed 26..30
# from the journals, went on. Every acknowledgment is in the history.
pushes = {}
p1, a1 = split(steady(1, 30, pushes=pushes))
replay = [line(s, s % 2, (s + 1) // 2 if s % 2 else s // 2, 2, "replayed") for s in range(26, 31)]
p2, a2 = split(steady(31, 40, epoch=2, pushes=pushes))
takeover = [line(0, kind="start")] + p1 + [line(25, epoch=2, kind="takeover")] + replay + p2
run("takeover", takeover, a1 + a2, summary_step=40,
    counts={"takeovers": 1, "acknowledged_in_history": 40, "acknowledged_lost": 0, "takeover_lost_updates": 0})

# A takeover that could not replay step 29 (its worker died with the parameter server): a lost
# update, counted, not a violation, as long as no acknowledgment names it.
run("takeover gap", [x for x in takeover if not (x.startswith("29,") and x.endswith(",replayed\n"))],
    [a for a in a1 + a2 if a[2] != 29], summary_step=40, counts={"takeover_lost_updates": 1, "steps": 39})

# A second failure inside the takeover: the worker of slot 1 (its own acknowledgment file) died
# with the parameter server, so its push of step 29, acknowledged, had no journal left to replay:
# lost with its worker, counted, not a violation (the case after it: the same gap with that worker
# alive, a violation).
gone = [x for x in takeover if not (x.startswith("29,") and x.endswith(",replayed\n"))]
slot1 = [a for a in a1 if a[0] == 1]                       # the dead worker: epoch 1 only
slot0 = [a for a in a1 + a2 if a[0] == 0]                  # the survivor: epochs 1 and 2
run("lost with its worker", gone, {"rank1-pid1.csv": slot1, "rank2-pid2.csv": slot0},
    counts={"lost_with_their_worker": 1, "acknowledged_lost": 0, "takeover_lost_updates": 1})
run("lost, its worker alive", gone, {"rank1-pid1.csv": slot1 + [(1, 99, 40, 1, 2)], "rank2-pid2.csv": slot0},
    want_rc=1, want="acknowledged push lost")

# Violations, each first found with its evidence.
run("acknowledged push lost", [x for x in takeover if not (x.startswith("28,") and x.endswith(",replayed\n"))],
    a1 + a2, want_rc=1, want="acknowledged push lost", counts={"acknowledged_lost": 1})
dup = list(clean)
dup[33] = line(32, 0, 15)  # step 32 made by slot 0's push 15, which made step 30
run("applied twice", dup, acks, want_rc=1, want="applied twice", counts={"applied_twice": 1})
run("step made twice", clean[:11] + [line(10, 1, 99)] + clean[11:], acks, want_rc=1, want="step made twice")
run("step missing", [x for x in clean if not x.startswith("17,")], [a for a in acks if a[2] != 17], want_rc=1,
    want="step missing", counts={"steps_missing": 1})
superseded = takeover + [line(32, kind="checkpoint")]  # epoch 1 (hung, woken) publishes after epoch 2 began
run("checkpoint by a superseded epoch", superseded, a1 + a2, want_rc=1, want="checkpoint by a superseded epoch",
    counts={"superseded_lines": 1})
run("checkpoints out of order", clean + [line(30, kind="checkpoint")], acks, want_rc=1,
    want="checkpoints out of order")
run("checkpoint of a step not made", clean[:11] + [line(20, kind="checkpoint")] + clean[11:], acks, want_rc=1,
    want="checkpoint of a step not made")
run("acknowledged otherwise", clean, [(a[0], a[1], a[2], 0 if a[2] == 5 else 1, a[4]) for a in acks], want_rc=1,
    want="acknowledged otherwise")
run("acknowledged by an unknown epoch", clean, acks + [(0, 21, 41, 1, 7)], want_rc=1,
    want="acknowledged by an unknown epoch")
run("summary differs", clean, acks, summary_step=39, want_rc=1, want="summary differs")
# A superseded parameter server that answered a worker after its successor had begun: the
# acknowledged step belongs to another push in the final history.
late = takeover + [line(33, 0, 77, 1, "applied")]
run("late answer of a superseded epoch", late, a1 + a2 + [(0, 77, 33, 1, 1)], want_rc=1, want="acknowledged push lost",
    counts={"superseded_lines": 1})

# Input the checker refuses (exit 2): not a history, repeated epochs (no --ckpt-dir).
with tempfile.TemporaryDirectory() as d:
    old = os.path.join(d, "old.csv")
    with open(old, "w") as f:
        f.write("step,rank,pulled,staleness,seconds\n1,1,0,0,0.1\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = hc.main([old])
    if rc != 2 or "older mpi_trainer" not in err.getvalue():
        failures.append("old push log")
        print(f"FAIL: old push log: exit {rc}: {err.getvalue()}")
    else:
        print(f"ok: old push log: {err.getvalue().strip()}")
run("repeated epoch", [line(0, epoch=0, kind="start"), line(1, 1, 1, 0), line(0, epoch=0, kind="start")], want_rc=2)

print(f"{len(failures)} failed: {', '.join(failures)}" if failures else "every history check passed")
sys.exit(1 if failures else 0)
