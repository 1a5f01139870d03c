#!/usr/bin/python3
"""Learning on real data: ResNet-32 on Fashion-MNIST, one epoch (468 batches of 128), constant
lr 0.1, momentum 0.9, weight decay 1e-4, no augmentation, inputs normalized by the training set's
per-channel mean and std. Prints test accuracy, wall time and the training process's peak
resident memory; --with-pytorch also runs bench/perf/pytorch_resnet.py's identical recipe.

  /usr/bin/python3 bench/accuracy/learn_fmnist.py [--threads 2] [--with-pytorch]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def last_json(text, event="summary"):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and f'"{event}"' in line:
            return json.loads(line)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=468)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--with-pytorch", action="store_true")
    ap.add_argument("--trainer", default=os.path.join(HERE, "..", "..", "build", "release", "mpi_trainer"))
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [a.trainer, "train", "--data", a.data, "--model", "resnet32", "--train-steps", str(a.steps),
               "--batch-size", "128", "--lr-schedule", "constant", "--lr", "0.1", "--momentum", "0.9",
               "--weight-decay", "1e-4", "--augment", "off", "--normalize", "channel",
               "--threads", str(a.threads), "--log-every-steps", "50", "--metrics", metrics]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        wall = time.monotonic() - t0
        rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        with open(metrics) as f:
            s = last_json(f.read())
    out = {"event": "summary", "who": "mpi_trainer", "test_accuracy": s["test_accuracy"],
           "train_seconds": round(s["train_seconds"], 1), "wall_seconds": round(wall, 1),
           "images_per_second": round(s["images_per_second"], 1), "peak_rss_mib": round(rss_mib, 1)}
    print(json.dumps(out), flush=True)

    if a.with_pytorch:
        cmd = ["/usr/bin/python3", os.path.join(HERE, "..", "perf", "pytorch_resnet.py"), "--mode", "fmnist",
               "--threads", str(a.threads), "--steps", str(a.steps)]
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        p = subprocess.run(cmd, check=True, capture_output=True, text=True)
        wall = time.monotonic() - t0
        s = last_json(p.stdout)
        print(json.dumps({"event": "summary", "who": "pytorch", "test_accuracy": s["test_accuracy"],
                          "train_seconds": round(s["train_seconds"], 1), "wall_seconds": round(wall, 1)}))


if __name__ == "__main__":
    main()
