#!/usr/bin/python3
"""Rebuild the ICAC'19 paper's tables and figures (issue 20) with what this machine can run.

Each experiment is a small declarative file in bench/paper/experiments/ (its kind: R real
processes and real kills, E emulated device speeds or a virtual-clock run with real gradients,
S simulator only). This runner runs the S experiments through `mpi_trainer plan` and the E ones as virtual-clock
runs (`train --virtual-workers`), writes
docs/reproduction.md (every table with the paper's number beside ours and the difference) and
each figure as PNG and SVG in docs/figures/, checks the experiment's shape goals, and exits 1
when one is missed.

  /usr/bin/python3 bench/paper/run.py [--trainer PATH] [--only table1,fig6] [--out DIR]
                                      [--figures DIR] [--draws N] [--kinds S,E]
                                      [--e-steps N] [--e-data DIR] [--jobs N]

--out: where reproduction.md goes (default docs/); --figures: the plots (default docs/figures/);
--draws: replaces every experiment's draw count (a quick run). --kinds: which evidence kinds to
run (default S; E experiments are virtual-clock training runs, minutes each; --e-steps and
--e-data make them quick). Needs python3-matplotlib.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def plan(trainer, args):
    # The paper's clusters had no standby replica of the parameter server: a lost PS went back
    # to its last checkpoint. An experiment may still ask for one (--ps-standby in its args).
    if "--ps-standby" not in args:
        args = args + ["--ps-standby", "0"]
    out = subprocess.run([trainer, "plan", "--json"] + args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"run.py: mpi_trainer plan {' '.join(args)}: exit {out.returncode}: {out.stdout}{out.stderr}")
    return json.loads(out.stdout)


def with_draws(args, draws):
    if draws is None:
        return args
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--draws":
            skip = True
            continue
        out.append(a)
    return out + ["--draws", str(draws)]


def pct(a, b):
    """b relative to a, in percent."""
    return 100.0 * (b - a) / a


def fmt_diff(ours, paper):
    return f"{pct(paper, ours):+.1f}%" if paper else ""


class Report:
    def __init__(self):
        self.lines = []
        self.checks = []  # (experiment, what, ok, detail)

    def add(self, text=""):
        self.lines.append(text)

    def check(self, exp, what, ok, detail):
        self.checks.append((exp["id"], what, ok, detail))
        self.add(f"- {'**met**' if ok else '**missed**'}: {what} ({detail})")


def save(fig, figures, name):
    os.makedirs(figures, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = os.path.join(figures, f"{name}.{ext}")
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    return paths


def run_table(exp, trainer, draws, rep, plt, opts):
    results = {}
    for row in exp["rows"]:
        results[row["name"]] = plan(trainer, with_draws(exp["common"] + row["args"], draws))
    has_paper = any("paper" in r for r in exp["rows"])
    if has_paper:
        rep.add("| cluster | paper time | ours (mean; p10–p90) | diff | paper cost | ours | diff | ours: restarts, revocations/run |")
        rep.add("|---|---|---|---|---|---|---|---|")
    else:
        rep.add("| cluster | time (mean; p10–p90) | cost (mean) | revocations/run |")
        rep.add("|---|---|---|---|")
    for row in exp["rows"]:
        r = results[row["name"]]
        h = r["seconds"]["mean"] / 3600
        usd = r["cost_usd"]["mean"]
        spread = f"{r['seconds']['p10'] / 3600:.2f}–{r['seconds']['p90'] / 3600:.2f}"
        p = row.get("paper", {})
        if has_paper:
            ph, pu = p.get("hours"), p.get("usd")
            extra = f"{100 * r['probability_restart']:.1f}%, {r['revocations_mean']:.2f}"
            if "failed_percent" in p:
                extra += f" (paper: {p['failed_percent']}% failed)"
            pht = f"{ph:.2f} h" if ph else "–"
            put = f"${pu:.2f}" if pu else "–"
            rep.add(f"| {row['name']} | {pht} | {h:.2f} h ({spread}) | {fmt_diff(h, ph)} | "
                    f"{put} | ${usd:.2f} | {fmt_diff(usd, pu)} | {extra} |")
        else:
            rep.add(f"| {row['name']} | {h:.2f} h ({spread}) | ${usd:.2f} | {r['revocations_mean']:.2f} |")
    rep.add()
    for c in exp.get("compare", []):
        a, b = results[c["a"]], results[c["b"]]
        key = "seconds" if c["field"] == "hours" else "cost_usd"
        d = pct(a[key]["mean"], b[key]["mean"])
        rep.add(f"- {c['what']}: ours {d:+.1f}%, the paper {c['paper']}")
    if exp.get("compare"):
        rep.add()
    for c in exp.get("checks", []):
        if "within" in c:
            worst = 0.0
            for row in exp["rows"]:
                want = row.get("paper", {}).get(c["field"])
                if not want:
                    continue
                r = results[row["name"]]
                got = r["seconds"]["mean"] / 3600 if c["field"] == "hours" else r["cost_usd"]["mean"]
                worst = max(worst, abs(got - want) / want)
            rep.check(exp, c["what"], worst <= c["within"], f"largest difference {100 * worst:.1f}%")
        elif "faster" in c:
            a, b = (results[n]["seconds"]["mean"] for n in c["faster"])
            rep.check(exp, c["what"], a / b >= c["min"], f"{a / b:.2f}x")
        elif "cheaper" in c:
            a, b = (results[n]["cost_usd"]["mean"] for n in c["cheaper"])
            rep.check(exp, c["what"], 1 - b / a >= c["min"], f"{100 * (1 - b / a):.1f}% cheaper")
        elif "faster_percent" in c:
            a, b = (results[n]["seconds"]["mean"] for n in c["faster_percent"])
            f = 100 * (1 - b / a)
            rep.check(exp, c["what"], c["min"] <= f <= c["max"], f"{f:.1f}% faster")
    # The figure: time and cost per cluster, ours beside the paper's.
    names = [r["name"] for r in exp["rows"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, label in ((axes[0], "hours", "time (hours)"), (axes[1], "usd", "cost ($)")):
        ours = [results[n]["seconds"]["mean"] / 3600 if key == "hours" else results[n]["cost_usd"]["mean"] for n in names]
        paper = [r.get("paper", {}).get(key) for r in exp["rows"]]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="mpi_trainer plan (S)")
        if any(p is not None for p in paper):
            ax.bar([i + 0.2 for i in x], [p or 0 for p in paper], 0.4, label="paper")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(exp["title"], fontsize=9)
    return [fig]


def run_overhead(exp, trainer, draws, rep, plt, opts):
    rep.add("| revocations | workers | paper time overhead | ours | paper cost overhead | ours | draws |")
    rep.add("|---|---|---|---|---|---|---|")
    ours = {}
    for n in exp["sizes"]:
        r = plan(trainer, with_draws(exp["common"] + ["--workers", str(n)], draws))
        d = r["per_draw"]
        groups = {}
        for s, c, k in zip(d["seconds"], d["cost_usd"], d["revocations"]):
            groups.setdefault(int(k), []).append((s, c))
        base = groups.get(0)
        for k in (1, 2):
            g = groups.get(k)
            if not base or not g:
                continue
            t = pct(sum(s for s, _ in base) / len(base), sum(s for s, _ in g) / len(g))
            c = pct(sum(c for _, c in base) / len(base), sum(c for _, c in g) / len(g))
            ours[(k, n)] = (t, c, len(g))
    for k in (1, 2):
        for n in exp["sizes"]:
            p = exp["paper"].get(str(k), {}).get(str(n))
            o = ours.get((k, n))
            pt = f"{p['time']:.1f}%" if p else "–"
            pc = f"{p['cost']:.1f}%" if p else "–"
            ot = f"{o[0]:.1f}%" if o else "–"
            oc = f"{o[1]:.1f}%" if o else "–"
            rep.add(f"| r = {k} | {n} | {pt} | {ot} | {pc} | {oc} | {o[2] if o else 0} |")
    rep.add()
    for c in exp.get("checks", []):
        k = int(c["falls"])
        vals = [ours.get((k, n), (None,))[0] for n in exp["sizes"]]
        ok = all(v is not None for v in vals) and all(a > b for a, b in zip(vals, vals[1:]))
        rep.check(exp, c["what"], ok, ", ".join(f"{n}: {v:.1f}%" if v is not None else f"{n}: no draw"
                                                 for n, v in zip(exp["sizes"], vals)))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for k, style in ((1, "o-"), (2, "s--")):
        xs = [n for n in exp["sizes"] if (k, n) in ours]
        ax.plot(xs, [ours[(k, n)][0] for n in xs], style, label=f"ours, r = {k}")
        px = [n for n in exp["sizes"] if str(n) in exp["paper"].get(str(k), {})]
        ax.plot(px, [exp["paper"][str(k)][str(n)]["time"] for n in px], style, alpha=0.5, label=f"paper, r = {k}")
    ax.set_xlabel("K80 workers")
    ax.set_ylabel("time overhead (%)")
    ax.set_xticks(exp["sizes"])
    ax.legend(fontsize=8)
    ax.set_title(exp["title"], fontsize=9)
    return [fig]


def read_model(path):
    hours, frac = [], []
    for line in open(path):
        line = line.split("#")[0].strip()
        if not line:
            continue
        h, f = (float(x) for x in line.split(","))
        hours.append(h)
        frac.append(f)
    return hours, frac


def fraction_by(model, h):
    hours, frac = model
    if h <= 0:
        return 0.0
    for i in range(1, len(hours)):
        if h <= hours[i]:
            return frac[i - 1] + (frac[i] - frac[i - 1]) * (h - hours[i - 1]) / (hours[i] - hours[i - 1])
    return frac[-1]


def run_cdf(exp, trainer, draws, rep, plt, opts):
    models = {name: read_model(os.path.join(REPO, "mpi_trainer", "plan", f)) for name, f in exp["models"].items()}
    rep.add("| model | revoked by 1 h | by 2 h | by 12 h | before 24 h | at 24 h |")
    rep.add("|---|---|---|---|---|---|")
    for name, m in models.items():
        rep.add(f"| {name} | " + " | ".join(f"{100 * fraction_by(m, h):.1f}%" for h in (1, 2, 12, 24)) + " | 100% |")
    rep.add()
    for c in exp.get("checks", []):
        got = fraction_by(models[c["model"]], c["hours"])
        rep.check(exp, c["what"], abs(got - c["fraction"]) <= c["margin"], f"{100 * got:.1f}% by {c['hours']} h")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, (hours, frac) in models.items():
        ax.plot(hours + [26], frac + [1.0], label=name)
    ax.set_xlabel("server age (hours)")
    ax.set_ylabel("fraction revoked")
    ax.set_xlim(0, 26)
    ax.legend(fontsize=8)
    ax.set_title(exp["title"], fontsize=9)
    return [fig]


def run_series(exp, trainer, draws, rep, plt, opts):
    res = {}
    for t in exp["types"]:
        for n in exp["sizes"]:
            for s in exp["ps"]:
                r = plan(trainer, with_draws(exp["common"] + ["--workers", str(n), "--worker-types", t, "--num-ps", str(s)], draws))
                res[(t, n, s)] = r
    base = plan(trainer, with_draws(exp["common"] + ["--workers", "1", "--num-ps", "0"], draws))
    t1 = base["seconds"]["mean"]
    rep.add("| workers | " + " | ".join(f"{t.upper()}, {s} PS: speed-up, cost" for t in exp["types"] for s in exp["ps"])
            + " | " + " | ".join(f"{t.upper()}: 2 PS / 1 PS" for t in exp["types"]) + " |")
    rep.add("|---" * (1 + len(exp["types"]) * (len(exp["ps"]) + 1)) + "|")
    for n in exp["sizes"]:
        cells = [f"{t1 / res[(t, n, s)]['seconds']['mean']:.2f}x, ${res[(t, n, s)]['cost_usd']['mean']:.2f}"
                 for t in exp["types"] for s in exp["ps"]]
        ratios = [f"{res[(t, n, 1)]['seconds']['mean'] / res[(t, n, 2)]['seconds']['mean']:.2f}x" for t in exp["types"]]
        rep.add(f"| {n} | " + " | ".join(cells + ratios) + " |")
    rep.add()
    rep.add("Speed-up against one K80 alone; the PS's busy fraction with one shard and the most workers: "
            + ", ".join(f"{t.upper()} {100 * res[(t, exp['sizes'][-1], 1)]['ps_utilisation']:.0f}%" for t in exp["types"]) + ".")
    rep.add()
    for c in exp.get("checks", []):
        r = res[(c["type"], c["size"], 1)]["seconds"]["mean"] / res[(c["type"], c["size"], 2)]["seconds"]["mean"]
        ok = r >= c.get("min", 0) and r <= c.get("max", 1e9)
        rep.check(exp, c["what"], ok, f"{r:.2f}x")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for t in exp["types"]:
        for s in exp["ps"]:
            axes[0].plot(exp["sizes"], [t1 / res[(t, n, s)]["seconds"]["mean"] for n in exp["sizes"]], "o-" if s == 1 else "s--",
                         label=f"{t.upper()}, {s} PS")
            axes[1].plot(exp["sizes"], [res[(t, n, s)]["cost_usd"]["mean"] for n in exp["sizes"]], "o-" if s == 1 else "s--",
                         label=f"{t.upper()}, {s} PS")
    axes[0].set_ylabel("speed-up over one K80")
    axes[1].set_ylabel("cost ($)")
    for ax in axes:
        ax.set_xlabel("workers")
        ax.set_xticks(exp["sizes"])
        ax.legend(fontsize=8)
    fig.suptitle(exp["title"], fontsize=9)
    return [fig]


def run_timeline(exp, trainer, draws, rep, plt, opts):
    sizes = exp["sizes"]
    per = {}
    for n in sizes:
        r = plan(trainer, with_draws(exp["common"] + ["--workers", str(n)], draws))
        d = r["per_draw"]
        rows = []
        for total, ends in zip(d["first_attempt_seconds"], d["worker_ends"]):
            lived = sorted(min(1.0, e / total) for e in ends)
            rows.append((sum(1 for x in lived if x < 1.0 - 1e-9), lived))
        rows.sort(key=lambda x: (x[0], x[1]))
        per[n] = rows
    most = max(max(k for k, _ in rows) for rows in per.values())
    rep.add("| workers | " + " | ".join(f"clusters with r = {k}" for k in range(most + 1)) + " | paper |")
    rep.add("|---" * (most + 3) + "|")
    for n in sizes:
        counts = [sum(1 for k, _ in per[n] if k == r) for r in range(most + 1)]
        paper = exp.get("paper", {}).get(str(n))
        ptxt = ", ".join(f"r = {k}: {v}" for k, v in paper.items()) if paper else "–"
        rep.add(f"| {n} | " + " | ".join(f"{c} of {len(per[n])}" for c in counts) + f" | {ptxt} |")
    rep.add()
    fig, axes = plt.subplots(1, len(sizes), figsize=(3.2 * len(sizes), 4.2))
    for ax, n in zip(axes, sizes):
        grid = [lived for _, lived in per[n]]
        im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"{n} K80 workers", fontsize=9)
        ax.set_xlabel("worker (by lifetime)")
        ax.set_xticks(range(n))
        ax.set_xticklabels([f"W{j + 1}" for j in range(n)], fontsize=7)
        ax.set_ylabel("cluster (by revocations)")
    fig.colorbar(im, ax=list(axes), label="share of the run lived")
    fig.suptitle(exp["title"], fontsize=9)
    return [fig]


def run_virtual(exp, trainer, draws, rep, plt, opts):
    import tempfile
    steps = opts.e_steps or -(-exp["epochs"] * exp["train_images"] // 128)
    q = steps // 4
    common = list(exp["common"])
    if opts.e_data:
        common[common.index("--data") + 1] = opts.e_data
    results = {}

    def one(i, row, tmp):
        args = []
        it = iter(row["args"])
        for a in it:
            if a == "--joins-every-quarter":
                t = next(it)
                args += ["--virtual-joins", f"{t}@step={q},{t}@step={2 * q},{t}@step={3 * q}"]
            else:
                args.append(a)
        m = os.path.join(tmp, f"{i}.jsonl")
        cmd = [trainer, "train"] + common + args + [
            "--train-steps", str(steps), "--lr-schedule", f"step:{max(1, steps // 2)},{max(1, steps * 3 // 4)}",
            "--eval-every-steps", str(max(1, steps // 20)), "--log-every-steps", str(max(1, steps // 20)),
            "--quiet", "--metrics", m]
        out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        if out.returncode != 0:
            return f"run.py: {' '.join(cmd)}: exit {out.returncode}: {out.stdout}{out.stderr}"
        ev = [json.loads(line) for line in open(m)]
        results[row["name"]] = (ev[-1], [(e["virtual_seconds"], e["test_accuracy"]) for e in ev if e["event"] == "eval"])
        print(f"run.py: {exp['id']}: {row['name']} done", flush=True)
        return None

    from concurrent.futures import ThreadPoolExecutor
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        errors = [e for e in pool.map(lambda x: one(x[0], x[1], tmp), enumerate(exp["rows"])) if e]
    if errors:
        sys.exit(errors[0])
    base = results[exp["rows"][0]["name"]][0]
    rep.add(f"{steps} global steps of batch 128 per run.")
    rep.add()
    rep.add("| run | test accuracy | against the first row | virtual time | cost |")
    rep.add("|---|---|---|---|---|")
    for row in exp["rows"]:
        s = results[row["name"]][0]
        rep.add(f"| {row['name']} | {100 * s['test_accuracy']:.2f}% | {100 * (s['test_accuracy'] - base['test_accuracy']):+.2f} | "
                f"{s['virtual_seconds'] / 3600:.3f} h | ${s['cost_usd']:.3f} |")
    rep.add()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for row in exp["rows"]:
        pts = results[row["name"]][1]
        ax.plot([t / 3600 for t, _ in pts], [100 * a for _, a in pts], label=row["name"])
    ax.set_xlabel("virtual time (hours)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    ax.set_title(exp["title"], fontsize=8)
    return [fig]


RUNNERS = {"table": run_table, "overhead": run_overhead, "cdf": run_cdf, "series": run_series,
           "timeline": run_timeline, "virtual": run_virtual}
ORDER = ["table1", "table3", "table4", "fig4", "fig3", "fig5", "fig5_accuracy", "fig6", "fig7", "fig8"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainer", default=os.path.join(REPO, "build", "release", "mpi_trainer"))
    ap.add_argument("--only", default="", help="comma-separated experiment ids")
    ap.add_argument("--out", default=os.path.join(REPO, "docs"))
    ap.add_argument("--figures", default=None)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--kinds", default="S", help="evidence kinds to run: S, or S,E (E: virtual runs, minutes each)")
    ap.add_argument("--e-steps", type=int, default=None, help="E experiments: this many global steps (a quick run)")
    ap.add_argument("--e-data", default=None, help="E experiments: this data directory instead of theirs")
    ap.add_argument("--jobs", type=int, default=1, help="E experiments: training runs at once (one thread each)")
    a = ap.parse_args()
    figures = a.figures or os.path.join(a.out, "figures")
    if not os.access(a.trainer, os.X_OK):
        sys.exit(f"run.py: no trainer at {a.trainer} (build it: launch/build.sh release, or give --trainer)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    exps = {}
    for f in sorted(os.listdir(os.path.join(HERE, "experiments"))):
        if f.endswith(".json"):
            e = json.load(open(os.path.join(HERE, "experiments", f)))
            exps[e["id"]] = e
    wanted = [x for x in a.only.split(",") if x] or [x for x in ORDER if x in exps] + sorted(set(exps) - set(ORDER))
    for w in wanted:
        if w not in exps:
            sys.exit(f"run.py: no experiment '{w}' (have: {', '.join(sorted(exps))})")
    kinds = set(k.strip() for k in a.kinds.split(",") if k.strip())
    if not kinds <= {"S", "E", "R"}:
        sys.exit(f"run.py: --kinds '{a.kinds}': give S, E (or both, comma-separated)")
    skipped = [w for w in wanted if exps[w]["kind"] not in kinds]
    wanted = [w for w in wanted if exps[w]["kind"] in kinds]
    rep = Report()
    rep.add("# Reproducing the paper")
    rep.add()
    rep.add("Written by `bench/paper/run.py` (do not edit by hand): the ICAC'19 paper's tables and figures "
            "rebuilt with what this machine can run. Evidence kinds: **R** real processes and real kills, **E** "
            "emulated device speeds or a virtual-clock run with real gradients, **S** simulator only "
            "(`mpi_trainer plan`). Each experiment is a file in `bench/paper/experiments/`.")
    rep.add()
    for w in wanted:
        exp = exps[w]
        rep.add(f"## {exp['title']} ({exp['kind']})")
        rep.add()
        rep.add(f"Source: {exp['source']}.")
        rep.add()
        figs = RUNNERS[exp["type"]](exp, a.trainer, a.draws, rep, plt, a)
        for i, fig in enumerate(figs):
            name = f"paper_{exp['id']}" + (f"_{i}" if i else "")
            save(fig, figures, name)
            plt.close(fig)
            rel = os.path.relpath(os.path.join(figures, name + ".png"), a.out)
            rep.add()
            rep.add(f"![{exp['title']}]({rel})")
        rep.add()
        if exp.get("note"):
            rep.add(exp["note"])
            rep.add()
        print(f"run.py: {w} done", flush=True)
    if skipped:
        rep.add(f"Not run this time (evidence kinds other than {', '.join(sorted(kinds))}; `--kinds S,E` runs them): "
                + ", ".join(f"{exps[w]['title']} ({exps[w]['kind']})" for w in skipped) + ".")
        rep.add()
    rep.add("## Shape goals")
    rep.add()
    rep.add("| experiment | goal | result |")
    rep.add("|---|---|---|")
    for e, what, ok, detail in rep.checks:
        rep.add(f"| {e} | {what} | {'met' if ok else 'MISSED'}: {detail} |")
    rep.add()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "reproduction.md")
    with open(path, "w") as f:
        f.write("\n".join(rep.lines))
    missed = [c for c in rep.checks if not c[2]]
    print(f"run.py: wrote {path}; {len(rep.checks) - len(missed)} of {len(rep.checks)} shape goals met")
    for e, what, ok, detail in missed:
        print(f"run.py: MISSED {e}: {what} ({detail})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
