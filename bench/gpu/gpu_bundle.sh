#!/usr/bin/env bash
# Packs what the GPU checks (bench/gpu/gpu_checks.sh) need onto a machine that has CUDA, cuDNN,
# cuBLAS and PyTorch but none of our Debian packages (the `device` tool's H100/H200 image):
# the built programs, every shared library they and Open MPI's mpirun and plugins load that such
# a machine lacks (the C library, libstdc++ and CUDA's own libraries are left to it), Open MPI's
# help files, and Fashion-MNIST. Paths are kept (usr/lib/..., usr/bin/...) under one root, so
# mpirun relocates with OPAL_PREFIX.
#
#   bench/gpu/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/release, .gpu)
#
# Then carry OUT_DIR to the GPU machine and run `bash bench/gpu/gpu_checks.sh ...` there.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_arg build build/release
bench_arg out .gpu
bench_parse "[BUILD_DIR] [OUT_DIR]" "$@"
for f in mpi_trainer tests/mt_cuda_tests bench/step_bench; do
  [[ -x $build/$f ]] || { echo "gpu_bundle: $build/$f missing: build with the CUDA backend first (launch/build.sh release)" >&2; exit 1; }
done
ldd "$build/mpi_trainer" | grep -q libcudnn ||
  { echo "gpu_bundle: $build/mpi_trainer was built without the CUDA backend (no nvcc/cuDNN at configure time?)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/bin"
cp "$build/mpi_trainer" "$build/tests/mt_cuda_tests" "$build/bench/step_bench" "$root/bin/"

# Open MPI: mpirun (orterun), orted, the plugins and the help files, at their Debian paths.
ompi_files=$(dpkg -L openmpi-bin libopenmpi3 openmpi-common libpmix2 2>/dev/null |
  grep -E '^/usr/(bin/(orterun|orted|mpirun)|lib/x86_64-linux-gnu/(openmpi|pmix2|libmpi|libopen-|libompitrace|libmca_common)|share/openmpi)' || true)
[[ -n $ompi_files ]] || { echo "gpu_bundle: Open MPI's Debian packages are not installed (launch/setup.sh)" >&2; exit 1; }
while read -r f; do
  [[ -f $f || -L $f ]] || continue
  mkdir -p "$root$(dirname "$f")"
  cp -a "$f" "$root$f"
done <<<"$ompi_files"

ln -sf orterun "$root/usr/bin/mpirun"

# Libraries: the closure of everything above, less what the GPU machine brings itself.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcudnn|libcublas|libnvidia)'
objs=$(find "$root" -type f \( -name '*.so*' -o -perm -u+x \))
libs=$(for o in $objs; do ldd "$o" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'; done | sort -u)
n=0
while read -r name path; do
  [[ -n $name ]] || continue
  [[ $name =~ $skip ]] && continue
  real=$(readlink -f "$path")
  dest=$root/usr/lib/x86_64-linux-gnu/$name
  [[ -e $dest ]] && continue
  mkdir -p "$(dirname "$dest")"
  cp "$real" "$dest"
  n=$((n + 1))
done <<<"$libs"

mkdir -p "$out"
tar -C "$stage" -cJf "$out/mt-gpu.tar.xz" root
rm -rf "$out/fashion-mnist"
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  cp -r /usr/share/datasets/fashion-mnist "$out/fashion-mnist"
fi
git rev-parse HEAD > "$out/commit" 2>/dev/null || true
echo "gpu_bundle: $out/mt-gpu.tar.xz ($(du -h "$out/mt-gpu.tar.xz" | cut -f1), $n libraries), fashion-mnist: $(du -sh "$out/fashion-mnist" 2>/dev/null | cut -f1 || echo none)"
echo "carry '$out' and run on the GPU machine: bash bench/gpu/gpu_checks.sh tests variants speed ps4   (then: full)"
