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
  python3-torch python3-venv       # the export test loads `mpi_trainer export` in PyTorch
)
# Python packages Debian lacks, in a project venv beside Debian's (system site packages: h5py,
# torch): .venv/bin/python. safetensors reads the export as users load it.
PIP_PACKAGES=(safetensors==0.4.5)
# --with-bench: kept for old scripts (python3-torch is always installed now). --no-slurm: leave out
# slurm-wlm and munge, e.g. on a cloud cluster's nodes, which run a Slurm of their own.
for arg in "$@"; do
  case $arg in
    --with-bench) ;;
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
python_venv() {
  local here venv
  here=$(cd "$(dirname "$0")/.." && pwd)
  venv="$here/.venv"
  if ! "$venv/bin/python" -c 'import safetensors, torch' 2>/dev/null; then
    [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
  fi
  echo "setup: python venv $venv ready (${PIP_PACKAGES[*]})"
}
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  python_venv
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
python_venv
echo "setup: done"
