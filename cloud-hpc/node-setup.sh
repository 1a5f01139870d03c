#!/usr/bin/env bash
# Sets up a compute node of a cloud Slurm cluster (cloud-hpc/) to run mpi_trainer, which is built
# once on the login/head node in /shared/mpi_trainer: installs the run-time libraries only (no
# -dev packages), and with --gpu the CUDA 13 runtime, cuBLAS and cuDNN 9 for CUDA 13 from NVIDIA's
# apt repository for the node's distribution. The NVIDIA driver is the image's (slurm-gcp and
# ParallelCluster images ship one); when it is older than CUDA 13 needs (R580), NVIDIA's forward
# compatibility package cuda-compat-13-0 is installed and put first on the loader's path.
#
# Idempotent: packages already installed are skipped, so a second run installs nothing.
# Timed: each step's elapsed seconds and the total go to the journal/syslog (tag
# mpi_trainer-node-setup), to stderr and to /var/log/mpi_trainer-node-setup.log.
# Exit status 0 when the node is ready, non-zero with an "ERROR:" line naming the failed step.
#
# Run by: GCP blueprints (startup-script runner, cloud-hpc/gcp/*.yaml), AWS ParallelCluster
# (CustomActions OnNodeConfigured, cloud-hpc/aws/*.yaml). docs/cloud.md has the details.
set -Eeuo pipefail

readonly TAG=mpi_trainer-node-setup
readonly CUDA_PKG_VER=13-0          # CUDA 13.0 packages (cuda-cudart-13-0, libcublas-13-0, ...)
readonly CUDA_DIR=cuda-13.0         # where they install under /usr/local
readonly CUDNN_PKG=libcudnn9-cuda-13
readonly MIN_DRIVER_MAJOR=580       # CUDA 13.0 needs driver >= 580.65.06
readonly KEYRING_DEB=cuda-keyring_1.1-1_all.deb
readonly NVIDIA_REPO=https://developer.download.nvidia.com/compute/cuda/repos

usage() {
  cat <<'EOF'
Usage: node-setup.sh [--gpu] [--dry-run] [--root DIR] [--log FILE] [--os-release FILE]
                     [--driver-version VERSION] [--help]

Installs mpi_trainer's run-time libraries on a cloud Slurm compute node (Debian 12 or Ubuntu
22.04, x86_64), and with --gpu the CUDA 13 runtime, cuBLAS and cuDNN 9 for CUDA 13 from NVIDIA's
apt repository. Must run as root. Idempotent; logs each step's elapsed seconds and the total to
the journal (tag mpi_trainer-node-setup), stderr and the log file.

  --gpu                 also the CUDA 13 runtime libraries (GPU partitions/queues)
  --dry-run             print the commands (and the packages) instead of running them
  --root DIR            treat DIR as the node's root for the files this script reads and
                        writes (os-release, log file, ld.so.conf.d): for tests; commands still
                        run (or print, with --dry-run) on this machine
  --log FILE            log file (default ROOT/var/log/mpi_trainer-node-setup.log)
  --os-release FILE     read the distribution from FILE (default ROOT/etc/os-release)
  --driver-version V    NVIDIA driver version to assume instead of asking nvidia-smi
  --help                this text
EOF
}

GPU=0 DRY=0 ROOT="" LOG="" OS_RELEASE="" DRIVER=""
while (($#)); do
  case $1 in
    --gpu) GPU=1 ;;
    --dry-run) DRY=1 ;;
    --root) ROOT=${2:?--root needs a directory}; shift ;;
    --log) LOG=${2:?--log needs a file}; shift ;;
    --os-release) OS_RELEASE=${2:?--os-release needs a file}; shift ;;
    --driver-version) DRIVER=${2:?--driver-version needs a version}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$TAG: ERROR: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
ROOT=${ROOT%/}
LOG=${LOG:-$ROOT/var/log/$TAG.log}
OS_RELEASE=${OS_RELEASE:-$ROOT/etc/os-release}

# --- logging and timing ------------------------------------------------------------------------
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
T0=$(now)
STEP="start" STEP_T0=$T0

log() {
  local line="$*"
  echo "$TAG: $line" >&2
  if ((!DRY)); then
    mkdir -p "$(dirname "$LOG")" 2>/dev/null || true
    printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$line" >>"$LOG" 2>/dev/null || true
    if command -v logger >/dev/null; then logger -t "$TAG" -- "$line" 2>/dev/null || true; fi
  fi
}

# run CMD...: runs it, or prints it with --dry-run.
run() {
  if ((DRY)); then
    printf '+ %s\n' "$*"
  else
    "$@"
  fi
}

on_exit() {
  local rc=$?
  if ((rc != 0)); then
    log "ERROR: step '$STEP' failed (exit $rc) after $(elapsed "$STEP_T0" "$(now)") s; total $(elapsed "$T0" "$(now)") s. The node is NOT ready for mpi_trainer."
  fi
}
trap on_exit EXIT

# step NAME FUNCTION: runs FUNCTION as a timed step.
step() {
  STEP=$1 STEP_T0=$(now)
  "$2"
  log "step $1: done in $(elapsed "$STEP_T0" "$(now)") s"
}

die() { log "$*"; exit 1; }

# --- the packages ------------------------------------------------------------------------------
# Run-time libraries of the release build (ldd build/release/mpi_trainer): oneDNN 2 (which pulls
# the OpenCL loader it links), Open MPI 4.1 with its launcher, HDF5 1.10 (serial), OpenSSL 3's
# libcrypto, zlib, OpenMP; curl for cloud-hpc/preemption-watch.sh; python3, with which the job's
# restart loop reads the run's status file. The names are the same on Debian 12 and Ubuntu 22.04
# (the -dev packages the login/head node builds with depend on them).
runtime_packages() {
  echo curl ca-certificates libdnnl2 libopenmpi3 openmpi-bin libhdf5-103-1 libssl3 zlib1g libgomp1 python3
}
cuda_packages() {
  echo "cuda-cudart-$CUDA_PKG_VER libcublas-$CUDA_PKG_VER $CUDNN_PKG"
}

APT=(apt-get -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
APT_UPDATED=0

installed() {  # installed PKG: true when dpkg has it installed
  ((!DRY)) && dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

apt_install() {  # apt_install PKG...: installs those not installed yet
  local missing=() p
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  if ((${#missing[@]} == 0)); then
    log "already installed: $*"
    return 0
  fi
  log "installing: ${missing[*]}"
  if ((!APT_UPDATED)); then
    run env DEBIAN_FRONTEND=noninteractive "${APT[@]}" update
    APT_UPDATED=1
  fi
  run env DEBIAN_FRONTEND=noninteractive "${APT[@]}" install "${missing[@]}"
}

# --- the steps ---------------------------------------------------------------------------------
DISTRO="" DRIVER_MAJOR="" COMPAT=0

detect() {
  [[ -r $OS_RELEASE ]] || die "ERROR: cannot read $OS_RELEASE: unknown distribution"
  local id ver
  # shellcheck source=/dev/null
  id=$(. "$OS_RELEASE" && echo "${ID:-}")
  # shellcheck source=/dev/null
  ver=$(. "$OS_RELEASE" && echo "${VERSION_ID:-}")
  case "$id:$ver" in
    debian:12) DISTRO=debian12 ;;
    ubuntu:22.04) DISTRO=ubuntu2204 ;;
    *) die "ERROR: distribution '$id $ver' is not supported (Debian 12 or Ubuntu 22.04: the images of cloud-hpc/)" ;;
  esac
  local arch
  arch=$(uname -m)
  [[ $arch == x86_64 ]] || die "ERROR: architecture $arch is not supported (x86_64)"
  if ((DRY == 0)) && ((EUID != 0)) && [[ -z $ROOT ]]; then
    die "ERROR: must run as root (or with --dry-run)"
  fi
  log "node: $DISTRO $arch, gpu=$GPU, dry-run=$DRY"
  ((GPU)) || return 0
  if [[ -z $DRIVER ]] && command -v nvidia-smi >/dev/null; then
    DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)
  fi
  if [[ -z $DRIVER ]]; then
    if ((DRY)); then
      log "dry-run: no NVIDIA driver found here; on a node whose driver is older than R$MIN_DRIVER_MAJOR cuda-compat-$CUDA_PKG_VER is installed too"
      return 0
    fi
    die "ERROR: --gpu but no NVIDIA driver (nvidia-smi failed or is missing): use a GPU image with the driver (slurm-gcp and ParallelCluster images have it), and a GPU machine type"
  fi
  DRIVER_MAJOR=${DRIVER%%.*}
  [[ $DRIVER_MAJOR =~ ^[0-9]+$ ]] || die "ERROR: cannot parse the NVIDIA driver version '$DRIVER'"
  if ((DRIVER_MAJOR < MIN_DRIVER_MAJOR)); then
    COMPAT=1
    log "NVIDIA driver $DRIVER is older than CUDA 13 needs (R$MIN_DRIVER_MAJOR): installing the forward compatibility package cuda-compat-$CUDA_PKG_VER (data-center GPUs only)"
  else
    log "NVIDIA driver $DRIVER (CUDA 13 needs R$MIN_DRIVER_MAJOR or newer)"
  fi
}

runtime() {
  # shellcheck disable=SC2046  # word splitting of the package list is intended
  apt_install $(runtime_packages)
}

nvidia_repo() {
  if installed cuda-keyring; then
    log "NVIDIA repository already set up (cuda-keyring installed)"
    return 0
  fi
  local url=$NVIDIA_REPO/$DISTRO/x86_64/$KEYRING_DEB tmp=${TMPDIR:-/tmp}/$KEYRING_DEB
  log "NVIDIA repository: $NVIDIA_REPO/$DISTRO/x86_64/"
  run curl -fsSL --retry 3 --connect-timeout 20 -o "$tmp" "$url"
  run dpkg -i "$tmp"
  run rm -f "$tmp"
  APT_UPDATED=0   # the new repository's package lists
}

cuda() {
  local pkgs
  read -r -a pkgs <<<"$(cuda_packages)"
  ((COMPAT)) && pkgs+=("cuda-compat-$CUDA_PKG_VER")
  apt_install "${pkgs[@]}"
}

# The loader finds libcudart/libcublas 13 in /usr/local/cuda-13.0 (whatever /usr/local/cuda
# points to: the images' own CUDA 12 toolkit) and, with the compatibility package, its libcuda
# before the driver's. cuDNN's package installs into the system library directory.
ldpath() {
  local conf=$ROOT/etc/ld.so.conf.d/00-mpi_trainer-cuda.conf body=""
  ((COMPAT)) && body+="/usr/local/$CUDA_DIR/compat"$'\n'
  body+="/usr/local/$CUDA_DIR/targets/x86_64-linux/lib"$'\n'
  if ((DRY)); then
    printf '+ write %s:\n%s' "$conf" "$body"
  elif [[ ! -f $conf || $(cat "$conf")$'\n' != "$body" ]]; then
    mkdir -p "$(dirname "$conf")"
    printf '%s' "$body" >"$conf"
    log "wrote $conf"
  fi
  if [[ -n $ROOT ]]; then run ldconfig -r "$ROOT"; else run ldconfig; fi
}

verify() {
  local libs=(libdnnl.so.2 libmpi.so.40 libhdf5_serial.so.103 libcrypto.so.3)
  ((GPU)) && libs+=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9)
  if ((DRY)); then
    printf '+ check that the loader finds: %s\n' "${libs[*]}"
    return 0
  fi
  local cache missing=() l
  cache=$(if [[ -n $ROOT ]]; then ldconfig -r "$ROOT" -p; else ldconfig -p; fi)
  for l in "${libs[@]}"; do grep -q "^[[:space:]]*$l " <<<"$cache" || missing+=("$l"); done
  ((${#missing[@]} == 0)) || die "ERROR: the loader does not find ${missing[*]} after the installation"
  log "the loader finds ${libs[*]}"
}

# --- main --------------------------------------------------------------------------------------
log "start (total budget: the cloud's node-setup timeout, e.g. 900 s on the GCP blueprints)"
step detect detect
if ((DRY)); then
  echo "packages (run-time): $(runtime_packages)"
  if ((GPU)); then
    echo "packages (gpu, from $NVIDIA_REPO/$DISTRO/x86_64/): $(cuda_packages)$( ((COMPAT)) && echo " cuda-compat-$CUDA_PKG_VER")"
  fi
fi
step runtime runtime
if ((GPU)); then
  step nvidia-repo nvidia_repo
  step cuda cuda
  step ldpath ldpath
fi
step verify verify
STEP="done"
log "node ready: total $(elapsed "$T0" "$(now)") s"
