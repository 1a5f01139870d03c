#!/usr/bin/python3
"""A checkpoint written by mpi_trainer, read with h5py as docs/checkpoint-format.md shows.

Usage: test_ckpt_h5py.py MPI_TRAINER
"""
import json
import subprocess
import sys
import tempfile

import h5py
import numpy as np

trainer = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([trainer, "gen-data", f"{tmp}/data", "--train", "128", "--test", "32"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([trainer, "train", "--data", f"{tmp}/data", "--model", "resnet8", "--batch-size", "16",
                    "--train-steps", "3", "--threads", "1", "--quiet", "--ckpt-dir", f"{tmp}/ck",
                    "--ckpt-every-steps", "1"], check=True)
    # Checkpoints 2 and 3 are written into the in-memory file of the one before (same layout).
    latest = open(f"{tmp}/ck/LATEST").read().strip()
    assert latest == "ckpt-0000000003.h5", latest
    with h5py.File(f"{tmp}/ck/{latest}", "r") as f:
        assert f.attrs["format_version"] == 1
        assert f.attrs["global_step"] == 3
        assert f.attrs["model"] == "resnet8", f.attrs["model"]
        w = f["params/stage2/block1/conv1/weight"]
        assert w.shape == (32, 16, 3, 3), w.shape
        assert w.dtype == np.float32
        assert w.fletcher32, "datasets must carry the Fletcher32 filter"
        assert f["optimizer/momentum/stage2/block1/conv1/weight"].shape == (32, 16, 3, 3)
        assert f["bn_stats/stem/bn/running_var"].shape == (16,)
        weights = {}
        f["params"].visititems(lambda name, obj: weights.__setitem__(name, obj[()])
                               if isinstance(obj, h5py.Dataset) else None)
        total = sum(v.size for v in weights.values())
        assert total == f.attrs["param_count"], (total, f.attrs["param_count"])
        assert np.all(np.isfinite(np.concatenate([v.ravel() for v in weights.values()])))
        # What it takes to use the model from the checkpoint alone: the input's normalization
        # and the labels' names.
        assert f.attrs["input_normalization"] == "channel-stats", f.attrs["input_normalization"]
        mean, std = json.loads(f.attrs["input_mean"]), json.loads(f.attrs["input_std"])
        assert len(mean) == 3 and len(std) == 3 and all(0 < m < 1 for m in mean) and all(s > 0 for s in std)
        assert json.loads(f.attrs["label_names"])[0] == "airplane"
        assert f.attrs["batch_size"] == 16
        assert f.attrs["data"].startswith("cifar10 train=128 test=32 fingerprint="), f.attrs["data"]
print("h5py read the checkpoint: ok")
