#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs a short training of ResNet-32 on
# the default data (CIFAR-10 if $MT_CIFAR10_DIR is set, else Debian's Fashion-MNIST), then
# prints the summary. Extra arguments go to `mpi_trainer train`.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh
launch/build.sh release
mkdir -p runs
exec build/release/mpi_trainer train --train-steps "${MT_TRAIN_STEPS:-200}" --log-every-steps 25 \
  --metrics runs/quickstart.jsonl "$@"
