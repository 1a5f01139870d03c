#!/usr/bin/env bash
# The Spack recipe (packaging/spack): `spack audit packages mpi-trainer` and concretizations with
# Debian 12's packages as externals (packaging/spack/config/debian12/packages.yaml):
#   ~cuda        everything external but mpi-trainer itself and Spack's compiler-wrapper and
#                gcc-runtime (what `spack install mpi-trainer` then builds)
#   +cuda cuda_arch=90   the CUDA 13 and cuDNN 9 of /usr/local/cuda, cuda_arch 90
#   +cuda cuda_arch=70   refused (CudaPackage: Volta needs CUDA <= 12.9, the external is 13)
#   +ulfm        Open MPI 5 with its internal PMIx/PRRTE (Spack would build it)
# With MT_SPACK_INSTALL=1 it also builds this checkout with `spack develop` in a temporary Spack
# environment (several minutes at -j1) and runs the installed `mpi_trainer --version`.
#
# Needs a Spack >= 1.0 checkout (MT_SPACK_ROOT, else SPACK_ROOT, else `spack` on PATH) that can
# concretize offline: clingo importable by the Python Spack runs (SPACK_PYTHON; `pip install
# clingo`), and the builtin package repository on disk (MT_SPACK_PACKAGES: a spack-packages
# checkout, else the one Spack already has). Exits 77 (skipped) when either is missing.
# Usage: tests/test_spack.sh [SOURCE_DIR]
set -euo pipefail

src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
skip() { echo "test_spack: SKIP: $*" >&2; exit 77; }
fail() { echo "test_spack: FAIL: $*" >&2; exit 1; }

root=${MT_SPACK_ROOT:-${SPACK_ROOT:-}}
if [[ -z $root ]] && command -v spack >/dev/null; then
  root=$(cd "$(dirname "$(command -v spack)")/.." && pwd)
fi
[[ -n $root && -x $root/bin/spack ]] ||
  skip "no Spack checkout (set MT_SPACK_ROOT to a Spack >= 1.0 checkout; packaging/spack/README.md)"
spack_bin=$root/bin/spack

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The user's own configuration (~/.spack) stays out; Spack's site scope ($root/etc/spack) is read.
export SPACK_DISABLE_LOCAL_CONFIG=1
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in packaging/spack

major=$("$spack_bin" --version 2>/dev/null | sed -n 's/^\([0-9]*\)\..*/\1/p')
[[ -n $major && $major -ge 1 ]] ||
  skip "Spack at $root is $("$spack_bin" --version 2>&1 | head -1), not >= 1.0 (package API v2)"
"$spack_bin" python -c 'import clingo' 2>/dev/null ||
  skip "clingo is not importable by Spack's Python (pip install clingo into SPACK_PYTHON); bootstrapping it needs the network"

# A configuration scope of our own: this checkout's repository, the builtin one where given, and
# what the site scope might lack (no bootstrapping: offline).
cfg=$tmp/config
mkdir -p "$cfg"
{
  echo "repos:"
  echo "  mpi_trainer: $src/packaging/spack/spack_repo/mpi_trainer"
  if [[ -n ${MT_SPACK_PACKAGES:-} ]]; then
    echo "  builtin: $MT_SPACK_PACKAGES/repos/spack_repo/builtin"
  fi
} >"$cfg/repos.yaml"
printf 'bootstrap:\n  enable: false\n' >"$cfg/bootstrap.yaml"
# Installs (MT_SPACK_INSTALL=1) go into a store of our own, removed at the end.
printf 'config:\n  build_jobs: 1\n  install_tree:\n    root: %s\n' "$tmp/store" >"$cfg/config.yaml"
spack() { "$spack_bin" -C "$src/packaging/spack/config/debian12" -C "$cfg" "$@"; }

repos=$(spack repo list 2>&1) || fail "spack repo list: $repos"
grep -Eq '^\[\+\] +builtin ' <<<"$repos" ||
  skip "Spack's builtin package repository is not on disk (set MT_SPACK_PACKAGES to a spack-packages checkout): $repos"
grep -Eq '^\[\+\] +mpi_trainer ' <<<"$repos" || fail "the repository did not register: $repos"

t0=$SECONDS
step() { echo "test_spack: $* ($((SECONDS - t0)) s)"; }

out=$(spack audit packages mpi-trainer 2>&1) || fail "spack audit packages mpi-trainer:"$'\n'"$out"
step "audit packages: passed"

# Concretizes; prints the tree ("-I": [e] external, [+] installed, " - " to be built).
concretize() { spack spec -I -l "$@" 2>&1; }
built() { sed -n 's/^ - *[a-z0-9]\{7\} *\^\{0,1\}\([a-z0-9-]*\)@.*/\1/p' <<<"$1" | sort | tr '\n' ' '; }

tree=$(concretize mpi-trainer ~cuda) || fail "spec mpi-trainer ~cuda:"$'\n'"$tree"
for dep in cmake ninja openmpi hdf5 onednn zlib openssl cli11 nlohmann-json gcc; do
  grep -Eq "^\[e\] +[a-z0-9]{7} +\^$dep@" <<<"$tree" || fail "~cuda: $dep is not the external one:"$'\n'"$tree"
done
to_build=$(built "$tree")
for name in $to_build; do
  [[ $name == mpi-trainer || $name == compiler-wrapper || $name == gcc-runtime ]] ||
    fail "~cuda: would build $name besides mpi-trainer (builds: $to_build):"$'\n'"$tree"
done
grep -Eq 'mpi-trainer@0\.1\.0~cuda~ipo~ulfm .*generator=ninja' <<<"$tree" ||
  fail "~cuda: unexpected root:"$'\n'"$tree"
step "spec ~cuda: all dependencies external (to build: $to_build)"

tree=$(concretize mpi-trainer +cuda cuda_arch=90) || fail "spec mpi-trainer +cuda cuda_arch=90:"$'\n'"$tree"
grep -Eq 'mpi-trainer@0\.1\.0\+cuda.* cuda_arch:?=90 ' <<<"$tree" || fail "+cuda: cuda_arch is not 90:"$'\n'"$tree"
grep -Eq '^\[e\] +[a-z0-9]{7} +\^cuda@13' <<<"$tree" || fail "+cuda: not the external CUDA 13:"$'\n'"$tree"
grep -Eq '^\[e\] +[a-z0-9]{7} +\^cudnn@9' <<<"$tree" || fail "+cuda: not the external cuDNN 9:"$'\n'"$tree"
step "spec +cuda cuda_arch=90: external cuda@13, cudnn@9"

if tree=$(concretize mpi-trainer +cuda cuda_arch=70); then
  fail "+cuda cuda_arch=70 concretized against CUDA 13 (no Volta there):"$'\n'"$tree"
fi
grep -q 'cuda' <<<"$tree" || fail "+cuda cuda_arch=70 failed, but not on CUDA:"$'\n'"$tree"
step "spec +cuda cuda_arch=70: refused (Volta needs CUDA <= 12.9; the external is 13)"

tree=$(concretize mpi-trainer +ulfm) || fail "spec mpi-trainer +ulfm:"$'\n'"$tree"
grep -Eq '\^openmpi@5\.[^ ]*.*\+internal-pmix' <<<"$tree" ||
  fail "+ulfm: not Open MPI 5 with its internal PMIx:"$'\n'"$tree"
step "spec +ulfm: openmpi@5 +internal-pmix (Spack builds it: $(built "$tree" | wc -w) packages)"

if [[ ${MT_SPACK_INSTALL:-0} == 1 ]]; then
  # This checkout's files, as they are, through `spack develop` (no tarball, no checksum), from a
  # copy: a develop build puts its build directory into the source tree.
  copy=$tmp/src
  mkdir -p "$copy"
  tar -C "$src" --exclude=./build --exclude=./.git --exclude='./.venv*' --exclude=./runs -cf - . |
    tar -C "$copy" -xf -
  env_dir=$tmp/env
  mkdir -p "$env_dir"
  spack env create -d "$env_dir" >/dev/null
  spack -e "$env_dir" add mpi-trainer@0.1.0 ~cuda >/dev/null
  spack -e "$env_dir" develop --no-clone --path "$copy" mpi-trainer@0.1.0 >/dev/null
  log=$tmp/install.log
  spack -e "$env_dir" install -j1 >"$log" 2>&1 || { tail -50 "$log" >&2; fail "spack install (log above)"; }
  prefix=$(spack -e "$env_dir" location -i mpi-trainer)
  version=$("$prefix/bin/mpi_trainer" --version) || fail "$prefix/bin/mpi_trainer --version"
  grep -q '^mpi_trainer 0\.1\.0$' <<<"$version" || fail "mpi_trainer --version printed: $version"
  step "install (spack develop, -j1): $prefix/bin/mpi_trainer --version: $(head -1 <<<"$version")"
fi
echo "test_spack: passed ($((SECONDS - t0)) s)"
