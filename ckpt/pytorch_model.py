"""mpi_trainer's ResNets as PyTorch modules whose state_dict names and layouts are those of
`mpi_trainer export --format safetensors` (docs/checkpoint-format.md, "Export"):

    import json, torch
    from safetensors import safe_open
    from safetensors.torch import load_file
    from pytorch_model import ResNet, normalize          # this file (ckpt/pytorch_model.py)

    with safe_open("model.safetensors", "pt") as f:
        meta = f.metadata()                              # model, input normalization, label names
    net = ResNet(meta["model"])
    net.load_state_dict(load_file("model.safetensors"))  # strict: every name and shape matches
    net.eval()
    logits = net(normalize(images_uint8_nchw, meta))     # (N, 3, 32, 32) uint8 -> (N, 10)
    labels = json.loads(meta["label_names"])

Models: resnetN (He et al. 2015 CIFAR ResNet, post-activation, option-A shortcuts) and resnetN-t2t
(Tensor2Tensor resnet_cifar, pre-activation, 1x1 projections), N = 6n + 2. Names follow
mpi_trainer's layers: stem.conv, stem.bn, stage<s>.block<b>.{bn_in, conv1, bn1, conv2, bn2,
shortcut.conv, shortcut.bn}, fc. BatchNorm: eps 1e-5, momentum 0.1, as mpi_trainer trains it.
"""

import json
import re

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_model(name):
    m = re.fullmatch(r"resnet(\d+)(-t2t)?", name)
    if not m or (int(m.group(1)) - 2) % 6 != 0 or int(m.group(1)) < 8:
        raise ValueError(f"unknown model {name!r}: resnetN or resnetN-t2t with N = 6n + 2")
    return (int(m.group(1)) - 2) // 6, m.group(2) is not None


def _bn(channels):
    return nn.BatchNorm2d(channels, eps=1e-5, momentum=0.1)


class Stem(nn.Module):
    def __init__(self, kernel, width):
        super().__init__()
        self.conv = nn.Conv2d(3, width, kernel, 1, kernel // 2, bias=False)
        self.bn = _bn(width)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class PostActBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU. Option-A shortcut: identity, or (when the shape
    changes) x[:, :, ::2, ::2] zero-padded by planes // 4 channels on each side."""

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = _bn(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = _bn(planes)
        self.downsample = stride != 1 or in_planes != planes
        self.pad = (planes - in_planes) // 2

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad)) if self.downsample else x
        return F.relu(out + sc)


class Shortcut(nn.Module):
    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv = nn.Conv2d(in_planes, planes, 1, stride, 0, bias=False)
        self.bn = _bn(planes)

    def forward(self, x):
        return self.bn(self.conv(x))


class PreActBlock(nn.Module):
    """BN-ReLU of the input, conv3x3 (stride), BN-ReLU, conv3x3, + shortcut; a stage's first block
    projects the pre-activated input (1x1 conv + BN)."""

    def __init__(self, in_planes, planes, stride, projection):
        super().__init__()
        self.bn_in = _bn(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = _bn(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.shortcut = Shortcut(in_planes, planes, stride) if projection else None

    def forward(self, x):
        p = F.relu(self.bn_in(x))
        out = self.conv2(F.relu(self.bn1(self.conv1(p))))
        return out + (self.shortcut(p) if self.shortcut is not None else x)


class Stage(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        for i, b in enumerate(blocks, 1):
            self.add_module(f"block{i}", b)

    def forward(self, x):
        for b in self.children():
            x = b(x)
        return x


class ResNet(nn.Module):
    def __init__(self, model="resnet32", classes=10):
        super().__init__()
        n, t2t = parse_model(model)
        kernel, widths = (7, (32, 64, 128)) if t2t else (3, (16, 32, 64))
        self.stem = Stem(kernel, 16)
        in_planes = 16
        for s, (width, stride) in enumerate(zip(widths, (1, 2, 2)), 1):
            blocks = []
            for b in range(n):
                st = stride if b == 0 else 1
                blocks.append(PreActBlock(in_planes, width, st, b == 0) if t2t else PostActBlock(in_planes, width, st))
                in_planes = width
            self.add_module(f"stage{s}", Stage(blocks))
        self.fc = nn.Linear(in_planes, classes)

    def forward(self, x):
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def normalize(images, meta):
    """uint8 images (N, 3, 32, 32) -> the float input mpi_trainer fed the model, as the export's
    metadata (or a checkpoint's attributes) records it."""
    x = images.float() / 255.0
    kind = meta.get("input_normalization", "channel-stats")
    if kind == "channel-stats":
        mean = torch.tensor(json.loads(meta["input_mean"])).view(1, 3, 1, 1)
        std = torch.tensor(json.loads(meta["input_std"])).view(1, 3, 1, 1)
        return (x - mean) / std
    if kind == "per-image":
        flat = x.flatten(1)
        mean = flat.mean(1).view(-1, 1, 1, 1)
        std = flat.std(1, unbiased=False).clamp_min(1.0 / (3 * 32 * 32) ** 0.5).view(-1, 1, 1, 1)
        return (x - mean) / std
    if kind == "none":
        return x
    raise ValueError(f"unknown input_normalization {kind!r}")
