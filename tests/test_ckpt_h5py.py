#!/usr/bin/python3
"""A checkpoint written by mpi_trainer, read with h5py as docs/checkpoint-format.md shows.

Usage: test_ckpt_h5py.py MPI_TRAINER
"""
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
                    "--train-steps", "3", "--threads", "1", "--quiet", "--ckpt-dir", f"{tmp}/ck"], check=True)
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
print("h5py read the checkpoint: ok")
