#!/usr/bin/python3
"""Training throughput of mpi_trainer vs PyTorch, side by side in one run.

Both sides run as servers on the same cores (never at the same time): after their own warm-up,
this driver alternates rounds, asking each in turn (order flipped every round) for `--per-round`
timed training steps of the same model and batch size. It prints every step's images/s, the
medians and their ratio.

  /usr/bin/python3 bench/perf/speed_vs_pytorch.py [--model resnet32] [--threads 2] [--rounds 6] [--device cuda]

On a GPU both sides keep everything on the device and time each step to the end of its GPU work;
TF32 is off on both unless MT_CUDA_TF32=1.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def start(cmd, env):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    return p


def ask(p, k):
    p.stdin.write(f"STEP {k}\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        sys.exit(f"benchmark process {p.args[0]} died")
    return json.loads(line)["images_per_second_each"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet32")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter that has PyTorch")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--step-bench", default=os.path.join(HERE, "..", "..", "build", "release", "bench", "step_bench"))
    a = ap.parse_args()

    # The two never compute at the same time, so OpenMP's default spin-then-sleep policy is fair.
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    common = ["--model", a.model, "--batch-size", str(a.batch_size), "--threads", str(a.threads),
              "--warmup", str(a.warmup), "--serve", "--device", a.device]
    ours = start([a.step_bench] + common, env)
    torch = start([a.python, os.path.join(HERE, "pytorch_resnet.py"), "--mode", "speed"] + common, env)
    results = {"mpi_trainer": [], "pytorch": []}
    procs = {"mpi_trainer": ours, "pytorch": torch}
    # Both warm up concurrently at start; an empty request returns only once each is done.
    for p in procs.values():
        ask(p, 0)
    for r in range(a.rounds):
        order = ["mpi_trainer", "pytorch"] if r % 2 == 0 else ["pytorch", "mpi_trainer"]
        for name in order:
            ips = ask(procs[name], a.per_round)
            results[name] += ips
            print(json.dumps({"round": r, "who": name, "images_per_second_each": [round(x, 1) for x in ips]}), flush=True)
    for p in procs.values():
        p.stdin.write("QUIT\n")
        p.stdin.flush()
        p.wait(timeout=60)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(json.dumps({"event": "summary", "model": a.model, "batch_size": a.batch_size, "threads": a.threads,
                      "device": a.device,
                      "steps_each": len(results["pytorch"]),
                      "mpi_trainer_median_images_per_second": round(med["mpi_trainer"], 1),
                      "pytorch_median_images_per_second": round(med["pytorch"], 1),
                      "ratio": round(med["mpi_trainer"] / med["pytorch"], 3)}))


if __name__ == "__main__":
    main()
