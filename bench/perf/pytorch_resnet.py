#!/usr/bin/python3
"""PyTorch reference for mpi_trainer's ResNets: training speed and learning on Fashion-MNIST.

Run with Debian's interpreter (/usr/bin/python3, python3-torch), not the first python3 on PATH.

Models (same architectures as mpi_trainer/nn/resnet.cpp):
  resnet32      He et al. 2015 CIFAR ResNet-32, post-activation, option-A shortcuts (464,154 params)
  resnet32-t2t  Tensor2Tensor resnet_cifar_32, pre-activation, 1x1 projections (1,857,722 params)

Modes:
  --mode speed          random data, timed full training steps; one JSON line per measured step
  --mode speed --serve  for alternating benchmarks: stdin "STEP k" -> k timed steps, "QUIT" -> exit
  --mode fmnist         one epoch on Fashion-MNIST (468 x 128), then test accuracy
"""

import argparse
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECTED_PARAMS = {"resnet32": 464_154, "resnet32-t2t": 1_857_722}
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"


# ------------------------------------------------------------------------------ models

class PostActBlock(nn.Module):
    """He et al. 2015 basic block: conv3x3-BN-ReLU-conv3x3-BN, + shortcut, ReLU.

    Option-A shortcut: identity; when the shape changes, x[:, :, ::2, ::2] zero-padded by
    planes // 4 channels on each side (no parameters)."""

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = stride != 1 or in_planes != planes
        self.pad = planes // 4

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample:
            sc = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))
        else:
            sc = x
        return F.relu(out + sc)


class PreActBlock(nn.Module):
    """T2T resnet_cifar block: BN-ReLU of the input, conv3x3 (stride), BN, ReLU, conv3x3,
    + shortcut. A stage's first block projects the *pre-activated* input with 1x1 conv + BN."""

    def __init__(self, in_planes, planes, stride, projection):
        super().__init__()
        self.bn_in = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.shortcut = None
        if projection:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, 0, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        p = F.relu(self.bn_in(x))
        out = F.relu(self.bn1(self.conv1(p)))
        out = self.conv2(out)
        sc = self.shortcut(p) if self.shortcut is not None else x
        return out + sc


class CifarResNet(nn.Module):
    def __init__(self, t2t, blocks_per_stage=5, classes=10):
        super().__init__()
        if t2t:
            # Stem: conv 7x7 stride 1, 3->16 (2,352) + BN(16)+ReLU (32). Stage 1's first block
            # then has its own pre-activation BN(16) (another 32) on top of the stem's; both
            # BNs are needed to reach 1,857,722, and mpi_trainer (nn/resnet.cpp) does the same:
            # stem.bn (with ReLU) followed by stage1.block1.bn_in.
            #   stem 2,384 + stage1 88,736 + stage2 353,600 + stage3 1,411,712 + fc 1,290
            #   = 1,857,722.  No final BN-ReLU before the pool.
            stem_k, widths, strides = 7, (32, 64, 128), (1, 2, 2)
        else:
            stem_k, widths, strides = 3, (16, 32, 64), (1, 2, 2)
        stem_w = 16
        self.conv = nn.Conv2d(3, stem_w, stem_k, 1, stem_k // 2, bias=False)
        self.bn = nn.BatchNorm2d(stem_w)
        layers = []
        in_planes = stem_w
        for width, stride in zip(widths, strides):
            for b in range(blocks_per_stage):
                s = stride if b == 0 else 1
                if t2t:
                    layers.append(PreActBlock(in_planes, width, s, projection=(b == 0)))
                else:
                    layers.append(PostActBlock(in_planes, width, s))
                in_planes = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(in_planes, classes)  # default PyTorch init
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        out = F.relu(self.bn(self.conv(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def build_model(name):
    if name not in EXPECTED_PARAMS:
        raise SystemExit(f"unknown model {name!r}; choose one of {sorted(EXPECTED_PARAMS)}")
    model = CifarResNet(t2t=name.endswith("-t2t"))
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n == EXPECTED_PARAMS[name], f"{name}: {n} parameters, expected {EXPECTED_PARAMS[name]}"
    return model, n


def make_optimizer(model, args):
    return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                           weight_decay=args.weight_decay, nesterov=args.nesterov)


def emit(obj, stream=sys.stdout):
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


# ------------------------------------------------------------------------------ speed

def speed(args):
    model, nparams = build_model(args.model)
    dev = torch.device(args.device)
    model.to(dev)
    model.train()
    opt = make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch_size, 3, 32, 32, generator=gen).to(dev)
    y = torch.randint(0, 10, (args.batch_size,), generator=gen).to(dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sync()
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        step()

    if args.serve:
        emit({"event": "ready", "model": args.model, "params": nparams, "threads":
              torch.get_num_threads(), "torch": torch.__version__}, sys.stderr)
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "QUIT":
                break
            if words[0] == "STEP" and len(words) == 2:
                k = int(words[1])
                emit({"images_per_second_each": [args.batch_size / step() for _ in range(k)]})
            else:
                emit({"error": f"unknown command {line.strip()!r}; expected 'STEP k' or 'QUIT'"})
        return

    rates = []
    for i in range(args.steps):
        t = step()
        rates.append(args.batch_size / t)
        emit({"step": i, "seconds": t, "images_per_second": args.batch_size / t})
    emit({"event": "summary", "model": args.model, "params": nparams,
          "batch_size": args.batch_size, "steps": args.steps,
          "median_images_per_second": statistics.median(rates) if rates else None,
          "threads": torch.get_num_threads(), "torch": torch.__version__})


# ------------------------------------------------------------------------------ fmnist

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    assert (magic >> 8) == 0x08, f"{path}: not an unsigned-byte IDX file"
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load_fmnist(split, data_dir):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = np.pad(images.astype(np.float32) / 255.0, ((0, 0), (2, 2), (2, 2)))  # 28 -> 32
    x = np.repeat(x[:, None, :, :], 3, axis=1)  # (N, 3, 32, 32)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(labels.astype(np.int64))


def fmnist(args):
    model, nparams = build_model(args.model)
    opt = make_optimizer(model, args)
    x_train, y_train = load_fmnist("train", args.data_dir)
    x_test, y_test = load_fmnist("test", args.data_dir)
    # Per-channel mean/std of the padded training images (channels identical after replication).
    mean = x_train.mean(dim=(0, 2, 3), keepdim=True)
    std = x_train.std(dim=(0, 2, 3), keepdim=True, unbiased=False)
    x_train = (x_train - mean) / std
    x_test = (x_test - mean) / std

    B = args.batch_size
    steps = args.steps if args.steps else len(x_train) // B  # 468 full batches of 128
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(len(x_train), generator=gen)
    emit({"event": "start", "model": args.model, "params": nparams, "steps": steps,
          "batch_size": B, "mean": mean.flatten()[0].item(), "std": std.flatten()[0].item(),
          "threads": torch.get_num_threads(), "torch": torch.__version__})

    model.train()
    t0 = time.perf_counter()
    loss_sum, correct, seen = 0.0, 0, 0
    for i in range(steps):
        idx = perm[(i * B) % len(perm):][:B]
        xb, yb = x_train[idx], y_train[idx]
        opt.zero_grad(set_to_none=True)
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        loss.backward()
        opt.step()
        loss_sum += loss.item() * len(yb)
        correct += (logits.argmax(1) == yb).sum().item()
        seen += len(yb)
        if (i + 1) % 50 == 0 or i + 1 == steps:
            emit({"step": i + 1, "loss": loss_sum / seen, "train_accuracy": correct / seen,
                  "elapsed_seconds": time.perf_counter() - t0})
            loss_sum, correct, seen = 0.0, 0, 0
    train_seconds = time.perf_counter() - t0

    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for s in range(0, len(x_test), 500):
            logits = model(x_test[s:s + 500])
            yb = y_test[s:s + 500]
            loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
            correct += (logits.argmax(1) == yb).sum().item()
    emit({"event": "summary", "model": args.model, "test_accuracy": correct / len(x_test),
          "test_loss": loss_sum / len(x_test), "train_seconds": train_seconds, "steps": steps,
          "threads": torch.get_num_threads(), "torch": torch.__version__})


# ------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet32", choices=sorted(EXPECTED_PARAMS))
    ap.add_argument("--mode", default="speed", choices=["speed", "fmnist"])
    ap.add_argument("--serve", action="store_true",
                    help="speed mode: read 'STEP k' / 'QUIT' from stdin (warm-up once at start)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: cuDNN autotuning on; TF32 only when MT_CUDA_TF32=1, as for mpi_trainer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None,
                    help="speed: measured steps (default 20); fmnist: default one epoch (468)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default=FMNIST_DIR)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        tf32 = os.environ.get("MT_CUDA_TF32", "0") not in ("", "0")
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.manual_seed(args.seed)
    if args.mode == "speed":
        if args.steps is None:
            args.steps = 20
        speed(args)
    else:
        if args.serve:
            ap.error("--serve is for --mode speed")
        fmnist(args)


if __name__ == "__main__":
    main()
