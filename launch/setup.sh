#!/usr/bin/env bash
# Installs every Debian package mpi_trainer needs to build, test and run. Idempotent and
# non-interactive: packages already present are skipped, so a second run changes nothing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev ocl-icd-opencl-dev   # oneDNN: CPU kernels (its CMake config asks for OpenCL)
  libopenmpi-dev openmpi-bin       # MPI (Open MPI 4.1)
  libhdf5-dev hdf5-tools           # checkpoints
  zlib1g-dev                       # gzip'd IDX files
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  catch2                           # tests (v2)
  dataset-fashion-mnist            # default real data
  python3-h5py python3-numpy       # checkpoint tests and tools
  slurm-wlm munge                  # the local Slurm cluster of the slurm tests (slurm/local-cluster)
  python3-yaml                     # the cloud-hpc config tests
)
# --with-bench: python3-torch for the PyTorch side-by-side benchmark. --no-slurm: leave out
# slurm-wlm and munge, e.g. on a cloud cluster's nodes, which run a Slurm of their own.
for arg in "$@"; do
  case $arg in
    --with-bench) PACKAGES+=(python3-torch) ;;
    --no-slurm) kept=(); for p in "${PACKAGES[@]}"; do [[ $p == slurm-wlm || $p == munge ]] || kept+=("$p"); done
                PACKAGES=("${kept[@]}") ;;
    *) echo "setup: unknown option '$arg' (--with-bench, --no-slurm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
