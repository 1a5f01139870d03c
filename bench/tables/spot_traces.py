#!/usr/bin/python3
"""Reduce public spot-preemption traces to a revocation table for `plan` and `--revocation-model`
(issue 44): HOURS,FRACTION_REVOKED rows, the Kaplan-Meier estimate of the fraction of servers
revoked by each age, pooled over the trace's zones.

Source: the repository skypilot-org/spot-traces (the NSDI'24 paper "Can't Be Late: Optimizing
Spot Instance Savings under Deadlines", Wu et al.). Its single-node preemption traces ping one
spot server every `gap_seconds` and record 1 while it runs, 0 while there is none (preempted,
then waiting to be relaunched). Here:
- a lifetime is a run of 1s: from its first tick to the first 0 after it (a revocation), within
  one tick (32 s) of the truth;
- a run still going when the trace ends is censored (alive at that age, fate unknown);
- a run already going at the trace's first tick is left out (its start, so its age, is unknown);
- the multi-node traces (a count of up to 4 servers) are not used: they do not say which server
  a change belongs to.

  /usr/bin/python3 bench/tables/spot_traces.py SNAPSHOT [--commit C] [--files 'preemption/1-node/aws-04-22-2023/*_v100_1.json']
                                        [--name aws-v100] [--out FILE]

SNAPSHOT: a git directory of the repository (e.g. what the `fetch` tool brings:
/work/.mirror/skypilot-org+spot-traces/repo); the files are read at --commit (default HEAD) with
`git show`, so the table names the exact commit it came from.
"""
import argparse
import fnmatch
import json
import statistics
import subprocess
import sys


def git(snapshot, *args):
    return subprocess.run(["git", "--git-dir", snapshot] + list(args), capture_output=True, text=True,
                          check=True).stdout


def lifetimes(data, gap):
    """(hours, revoked) per run of 1s; runs going at the first tick are left out."""
    out, start = [], None
    for i, v in enumerate(data):
        if v not in (0, 1):
            sys.exit(f"spot_traces.py: a single-node trace holds 0 or 1, found {v}")
        if v == 1 and start is None:
            start = i
        elif v == 0 and start is not None:
            if start > 0:
                out.append(((i - start) * gap / 3600.0, True))
            start = None
    if start is not None and start > 0:
        out.append(((len(data) - start) * gap / 3600.0, False))
    return out


def kaplan_meier(obs):
    """[(hours, fraction revoked by then)] at each revocation age."""
    obs = sorted(obs)
    at_risk, survive, curve, i = len(obs), 1.0, [], 0
    while i < len(obs):
        t = obs[i][0]
        revoked = sum(1 for h, r in obs if h == t and r)
        ended = sum(1 for h, _ in obs if h == t)
        if revoked:
            survive *= 1 - revoked / at_risk
            curve.append((t, 1 - survive))
        at_risk -= ended
        i += ended
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--files", default="preemption/1-node/aws-04-22-2023/*_v100_1.json")
    ap.add_argument("--name", default="aws-v100")
    ap.add_argument("--title", default="AWS spot p3.2xlarge (1 V100), 4 zones of us-east-1 and us-west-2, "
                    "a week from 2023-04-22 (the traces' README)")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    commit = git(a.snapshot, "rev-parse", a.commit).strip()
    files = [f for f in git(a.snapshot, "ls-tree", "-r", "--name-only", commit).split()
             if fnmatch.fnmatch(f, a.files)]
    if not files:
        sys.exit(f"spot_traces.py: no file of {a.snapshot} at {commit[:7]} matches '{a.files}'")
    obs, per_file = [], []
    for f in files:
        d = json.loads(git(a.snapshot, "show", f"{commit}:{f}"))
        mine = lifetimes(d["data"], d["metadata"]["gap_seconds"])
        obs += mine
        hours = [h for h, r in mine if r]
        per_file.append((f, len(mine), sum(1 for _, r in mine if not r), statistics.median(hours) if hours else None,
                         len(d["data"]) * d["metadata"]["gap_seconds"] / 3600.0))
    curve = kaplan_meier(obs)
    revoked = sum(1 for _, r in obs if r)
    # A table of at most about 40 rows: every revocation age up to the 10th, then every few.
    step = max(1, len(curve) // 40)
    rows = [p for k, p in enumerate(curve) if k < 10 or k % step == 0 or k == len(curve) - 1]
    lines = [f"# Revocation model: {a.title}, from the public preemption traces of skypilot-org/spot-traces",
             f"# (NSDI'24 \"Can't Be Late\"), commit {commit}, reduced by bench/tables/spot_traces.py",
             "# (Kaplan-Meier, pooled over the files below; a lifetime is a run of ticks with a server up,",
             "# within one tick; runs up at the trace's end are censored, runs up at its start left out).",
             f"# {len(obs)} lifetimes, {revoked} ended by a revocation, {len(obs) - revoked} censored."]
    for f, n, cens, med, span in per_file:
        lines.append(f"#   {f}: {span:.0f} h of trace, {n} lifetimes ({cens} censored), median revoked at "
                     + (f"{med:.2f} h" if med is not None else "-"))
    last = max(h for h, _ in obs)
    lines.append(f"# Beyond {rows[-1][0]:.2f} h (the last revocation seen; the longest life seen {last:.1f} h) the "
                 "table ends: a server that outlives it is never revoked. An assumption of the data, not of AWS.")
    lines.append("# hours,fraction_revoked")
    lines.append("0,0")
    lines += [f"{h:.4f},{p:.4f}" for h, p in rows]
    text = "\n".join(lines) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
