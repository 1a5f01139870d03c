#!/usr/bin/env python3
"""The median of several bench/perf/link_plan.sh runs, point by point (issue 60's figures).

usage: bench/perf/link_plan_median.py RUN.json [RUN.json ...] [--markdown]

Each RUN.json is what one `bench/perf/link_plan.sh --out RUN.json` wrote (the same shapes in
each). For every point (rate, shards, push precision, workers) it prints the median measured
global steps/s and the range over the runs, plan's prediction (the median of each run's: they
differ only by the per-message overhead each run measured first), the error of the medians, the
steady bytes a step sent out of shard 0's node against the model's, the link efficiency (the
measured median over the rate's bound at the model's bytes per update), `used` (the share of the
rate the steady bytes filled), plan's use of the link, and the updates between two standby
replicas, measured against plan's. Then the knees of the median curves (the fewest workers
within 5% of the most steps/s) and the summary the issue asks for: the points within 15%, the
knees within one worker, the link efficiency where plan calls the link saturated (its use from
0.85). --markdown prints the table as Markdown (bench/README.md's).
"""
import json
import math
import statistics
import sys


def usage(code):
    print(__doc__.strip().split("\n\n")[1])
    sys.exit(code)


def median(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        usage(0)
    markdown = "--markdown" in argv
    files = [a for a in argv if a != "--markdown"]
    if not files or any(f.startswith("-") for f in files):
        print("link_plan_median.py: give one or more RUN.json files of bench/perf/link_plan.sh --out",
              file=sys.stderr)
        usage(2)
    points = {}
    for name in files:
        try:
            with open(name) as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"link_plan_median.py: {name}: not a link_plan.sh --out file ({e})")
        for r in rows:
            points.setdefault((r["rate"], r["shards"], r["push"], r["workers"]), []).append(r)
    table = []
    for key in sorted(points, key=lambda k: (k[0], k[1], k[2] != "fp32", k[3])):
        runs = points[key]
        rate = key[0]
        got = [r["measured"] for r in runs]
        m = median(got)
        plan = median([r["plan"] for r in runs])
        modelled = median([r["modelled_per_step"] for r in runs])
        table.append(dict(rate=rate, shards=key[1], push=key[2], workers=key[3], runs=len(runs), measured=m,
                          low=min(got), high=max(got), plan=plan, error=m / plan - 1,
                          steady=median([r["steady_per_step"] for r in runs]), modelled=modelled,
                          efficiency=m * modelled / (rate * 1e6 / 8),
                          used=median([r["link_used"] for r in runs]),
                          utilisation=median([r["utilisation"] for r in runs]),
                          every=median([r.get("replica_every") for r in runs]),
                          every_plan=median([r.get("replica_every_plan") for r in runs])))
    every = lambda t: "–" if math.isnan(t["every"]) else f"{t['every']:.1f} / {t['every_plan']:.1f}"
    if markdown:
        print("| Mbit/s | shards | push | workers | measured steps/s (range) | plan | error | steady B/step | modelled |"
              " link eff. | used | plan's link use | replica every (measured / plan) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        last = None
        for t in table:
            shape = (t["rate"], t["shards"], t["push"])
            head = f"| {t['rate']:g} | {t['shards']} | {t['push']} |" if shape != last else "| | | |"
            last = shape
            print(f"{head} {t['workers']} | {t['measured']:.2f} ({t['low']:.2f}–{t['high']:.2f}) | {t['plan']:.2f} | "
                  f"{t['error'] * 100:+.1f}% | {t['steady']:,.0f} | {t['modelled']:,.0f} | {t['efficiency']:.2f} | "
                  f"{t['used']:.2f} | {t['utilisation']:.2f} | {every(t)} |")
    else:
        print(f"{'Mbit/s':>6} {'shards':>6} {'push':>5} {'workers':>7} {'runs':>4} {'measured':>9} {'range':>13} "
              f"{'plan':>7} {'error':>7} {'steady':>9} {'model':>9} {'link eff.':>9} {'used':>5} {'plan util.':>10} "
              f"{'replica every':>13}")
        for t in table:
            print(f"{t['rate']:6g} {t['shards']:6d} {t['push']:>5} {t['workers']:7d} {t['runs']:4d} {t['measured']:9.2f} "
                  f"{t['low']:6.2f}-{t['high']:<6.2f} {t['plan']:7.2f} {t['error'] * 100:+6.1f}% {t['steady']:9,.0f} "
                  f"{t['modelled']:9,.0f} {t['efficiency']:9.2f} {t['used']:5.2f} {t['utilisation']:10.2f} "
                  f"{every(t):>13}")
    knees = []
    for shape in sorted({(t["rate"], t["shards"], t["push"]) for t in table}, key=lambda s: (s[0], s[1], s[2] != "fp32")):
        curve = [t for t in table if (t["rate"], t["shards"], t["push"]) == shape]
        knee = lambda k: min(t["workers"] for t in curve if t[k] >= 0.95 * max(c[k] for c in curve))
        knees.append((shape, knee("measured"), knee("plan")))
    print("knee of the median curves (fewest workers within 5% of the most steps/s): measured vs plan")
    for (rate, shards, push), measured, planned in knees:
        print(f"  {rate:g} Mbit/s, {shards} shard(s), {push}: {measured} vs {planned}"
              f"{'' if abs(measured - planned) <= 1 else '  (off by more than 1)'}")
    within = sum(abs(t["error"]) <= 0.15 for t in table)
    sat = [t for t in table if t["utilisation"] >= 0.85]
    print(f"{len(files)} run(s); within 15%: {within} of {len(table)} points (worst "
          f"{max(abs(t['error']) for t in table) * 100:.1f}%); knees within one worker: "
          f"{sum(abs(m - p) <= 1 for _, m, p in knees)} of {len(knees)}")
    if sat:
        eff = sorted(t["efficiency"] for t in sat)
        used = sorted(t["used"] for t in sat)
        print(f"saturated points (plan's link use from 0.85): {len(sat)}; link efficiency (the model's bytes) min "
              f"{eff[0]:.2f}, median {statistics.median(eff):.2f}, {sum(e >= 0.85 for e in eff)} from 0.85; used (the "
              f"measured bytes) min {used[0]:.2f}, median {statistics.median(used):.2f}, "
              f"{sum(u >= 0.85 for u in used)} from 0.85")


if __name__ == "__main__":
    main(sys.argv[1:])
