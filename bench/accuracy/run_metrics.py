"""Reading virtual runs' metrics files (JSON lines): shared by time_to_accuracy.py and plot_curves.py."""
import json


def read_run(path):
    """(evals, summary) of one run: evals are (virtual seconds, test accuracy in 0..1) of every
    evaluation, summary the last event when the run finished (None when it did not). Raises
    OSError or ValueError for a file that is missing or not JSON lines."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    evals = [(r["virtual_seconds"], r["test_accuracy"]) for r in rows
             if r.get("event") == "eval" and "virtual_seconds" in r]
    summary = rows[-1] if rows and rows[-1].get("event") == "summary" else None
    return evals, summary


def mean_curve(curves):
    """The mean of several seeds' (time, accuracy) curves at each evaluation, up to the shortest
    (the runs must share --eval-every-steps)."""
    k = min(len(c) for c in curves)
    return ([sum(c[i][0] for c in curves) / len(curves) for i in range(k)],
            [sum(c[i][1] for c in curves) / len(curves) for i in range(k)])
