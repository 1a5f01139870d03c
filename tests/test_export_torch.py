"""`mpi_trainer export --format safetensors` loaded in PyTorch as a user would (issue 17, new
commands): load_state_dict(safetensors.torch.load_file(OUT)) on ckpt/pytorch_model.py's module,
strict, BatchNorm running statistics included; the test set through it with the normalization
the export's metadata records gives the accuracy `mpi_trainer eval` reports, to 0.1 points, and
the same loss. Both architectures: resnet8 (channel statistics) and resnet8-t2t (per-image).

Usage: .venv/bin/python test_export_torch.py MPI_TRAINER SOURCE_DIR   (launch/setup.sh makes .venv)
"""
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

trainer, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, f"{src}/ckpt")
from pytorch_model import ResNet, normalize  # noqa: E402


def run(*args):
    return subprocess.run([trainer, *args], check=True, capture_output=True, text=True).stdout


def cifar_test_set(data_dir):
    raw = np.fromfile(f"{data_dir}/test_batch.bin", dtype=np.uint8).reshape(-1, 3073)
    return torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).copy()), torch.from_numpy(raw[:, 0].astype(np.int64))


torch.set_num_threads(1)
with tempfile.TemporaryDirectory() as tmp:
    run("gen-data", f"{tmp}/data", "--train", "512", "--test", "300", "--seed", "7")
    images, labels = cifar_test_set(f"{tmp}/data")
    assert len(labels) == 300
    for model in ("resnet8", "resnet8-t2t"):
        ck, out = f"{tmp}/ck-{model}", f"{tmp}/{model}.safetensors"
        run("train", "--quiet", "--model", model, "--batch-size", "32", "--train-steps", "40", "--threads", "2",
            "--data", f"{tmp}/data", "--ckpt-dir", ck)
        ev = json.loads(run("eval", "--json", "--ckpt", ck, "--data", f"{tmp}/data"))
        print(run("export", "--ckpt", ck, "--format", "safetensors", out).strip())

        with safe_open(out, "pt") as f:
            meta = f.metadata()
        assert meta["model"] == model and int(meta["global_step"]) == 40, meta
        net = ResNet(meta["model"])
        state = load_file(out)
        missing, unexpected = net.load_state_dict(state, strict=True)
        assert not missing and not unexpected
        assert int(state["stem.bn.num_batches_tracked"]) == 40
        net.eval()
        with torch.no_grad():
            logits = torch.cat([net(normalize(images[i:i + 100], meta)) for i in range(0, len(images), 100)])
        accuracy = (logits.argmax(1) == labels).double().mean().item()
        loss = F.cross_entropy(logits.double(), labels).item()
        names = json.loads(meta["label_names"])
        assert names[0] == "airplane" and len(names) == 10, names
        print(f"{model}: PyTorch test accuracy {100 * accuracy:.2f}% loss {loss:.5f}; "
              f"mpi_trainer eval {100 * ev['test_accuracy']:.2f}% loss {ev['test_loss']:.5f}")
        assert abs(accuracy - ev["test_accuracy"]) <= 0.001, (accuracy, ev)
        assert abs(loss - ev["test_loss"]) <= 1e-3 * max(1.0, abs(ev["test_loss"])), (loss, ev)
print("ok: the export loads in PyTorch and evaluates as mpi_trainer does")
