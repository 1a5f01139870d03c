#!/usr/bin/env bash
# Builds the mpi_trainer image with Podman from this checkout and prints its size and build time.
#
#   packaging/container/build.sh [--tag T] [--base IMAGE] [--cuda] [--report] [--arch A]
#                                [--target STAGE] [--save FILE] [--sif FILE]
#
#   --tag T        the image's name [localhost/mpi_trainer:0.1.0, :0.1.0-cuda with --cuda]
#   --base IMAGE   the Debian 12 image the stages start from. Default: localhost/mpi_trainer-base:
#                  bookworm, made here from Debian's packages (mmdebstrap) when missing, for hosts
#                  that reach no image registry; e.g. docker.io/library/debian:bookworm-slim where
#                  one is reachable (MT_REBUILD_BASE=1 makes the local one again)
#   --cuda         the CUDA variant: CUDA 13, cuBLAS and cuDNN 9 from NVIDIA's repository for
#                  Debian 12 (needs that repository)
#   --report       add python3 and matplotlib for `mpi_trainer report` (about 140 MB)
#   --arch A       -march of the CPU kernels [x86-64-v3]
#   --target S     build up to stage S only (runtime-deps: the run-time libraries, no compile)
#   --save FILE    also write the image as an OCI archive (what `apptainer build x.sif
#                  oci-archive://FILE` takes on a site with Apptainer)
#   --sif FILE     also build an Apptainer image from it (needs apptainer on PATH)
# Prints "image: T size <MB> build <s>" last. Runs as root or rootless, wherever Podman runs;
# on hosts that refuse Podman's default limits it writes a containers.conf (podman_lib.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=podman_lib.sh
source "$here/podman_lib.sh"
tag="" base="" cuda=no report=no arch=x86-64-v3 target="" save="" sif=""
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
need() { [[ $# -ge 2 && -n $2 ]] || { echo "build.sh: $1 needs a value (see --help)" >&2; exit 2; }; }
while (($#)); do
  case $1 in
    --tag) need "$@"; tag=$2; shift 2 ;;
    --base) need "$@"; base=$2; shift 2 ;;
    --cuda) cuda=yes; shift ;;
    --report) report=yes; shift ;;
    --arch) need "$@"; arch=$2; shift 2 ;;
    --target) need "$@"; target=$2; shift 2 ;;
    --save) need "$@"; save=$2; shift 2 ;;
    --sif) need "$@"; sif=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
version=$(mt_project_version "$repo")
[[ $cuda == yes ]] && tag=${tag:-localhost/mpi_trainer:$version-cuda}
tag=${tag:-localhost/mpi_trainer:$version}
args=(--network host -f "$here/Containerfile" -t "$tag" --build-arg "MT_CPU_ARCH=$arch"
      --build-arg "REPORT=$report" --build-arg "CUDA=$cuda")
[[ -n $target ]] && args+=(--target "$target")
if [[ -z $base ]]; then
  base=localhost/mpi_trainer-base:bookworm
  mt_podman_base "$base" || exit 1
fi
args+=(--build-arg "BASE=$base")
mt_podman_check "$base" || { echo "build.sh: $MT_PODMAN_WHY" >&2; exit 1; }
start=$(date +%s.%N)
podman build "${args[@]}" "$repo"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
bytes=$(podman image inspect --format '{{.Size}}' "$tag")
if [[ -n $save ]]; then
  rm -f "$save"
  podman save --format oci-archive -o "$save" "$tag"
  echo "saved: $save ($(du -m "$save" | cut -f1) MB)"
fi
if [[ -n $sif ]]; then
  command -v apptainer >/dev/null || { echo "build.sh: --sif needs apptainer on PATH" >&2; exit 1; }
  oci=${save:-$(mktemp /tmp/mt-oci.XXXXXX.tar)}
  [[ -n $save ]] || { rm -f "$oci"; podman save --format oci-archive -o "$oci" "$tag"; }
  apptainer build --force "$sif" "oci-archive://$oci"
  [[ -n $save ]] || rm -f "$oci"
fi
awk -v t="$tag" -v b="$bytes" -v s="$secs" 'BEGIN { printf "image: %s size %.0f MB build %d s\n", t, b / 1e6, s }'
