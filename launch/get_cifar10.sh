#!/usr/bin/env bash
# Downloads the CIFAR-10 binary archive, verifies its md5 and unpacks it, for machines with
# internet access (the trainer itself never downloads). Without it the trainer falls back to
# Debian's dataset-fashion-mnist.
#
#   launch/get_cifar10.sh [--archive FILE] [--md5 HASH] [TARGET_DIR]
#
# TARGET_DIR defaults to ./data/cifar10; the batches land in TARGET_DIR/cifar-10-batches-bin.
set -euo pipefail

readonly URL="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
readonly ARCHIVE_NAME="cifar-10-binary.tar.gz"
readonly SUBDIR="cifar-10-batches-bin"
readonly FILES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin
                data_batch_5.bin test_batch.bin)
expected_md5="c32a1d4ab5d03f1284b67883e8d87530"
archive=""
target=""

usage() {
  cat <<EOF
usage: $(basename "$0") [--archive FILE] [--md5 HASH] [TARGET_DIR]

Downloads $URL,
verifies its md5, and unpacks it into TARGET_DIR (default ./data/cifar10).

  --archive FILE  use a local copy of the archive instead of downloading
  --md5 HASH      expected md5 of the archive (default $expected_md5)
  -h, --help      show this help
EOF
}

die() {
  echo "$(basename "$0"): error: $*" >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --archive)
      [[ $# -ge 2 ]] || die "--archive needs a file argument"
      archive="$2"
      shift 2
      ;;
    --md5)
      [[ $# -ge 2 ]] || die "--md5 needs a hash argument"
      expected_md5="$2"
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*)
      usage >&2
      die "unknown option $1"
      ;;
    *)
      [[ -z "$target" ]] || die "only one TARGET_DIR may be given (got '$target' and '$1')"
      target="$1"
      shift
      ;;
  esac
done
target="${target:-./data/cifar10}"
expected_md5="$(tr '[:upper:]' '[:lower:]' <<<"$expected_md5")"
[[ "$expected_md5" =~ ^[0-9a-f]{32}$ ]] || die "--md5 '$expected_md5' is not a 32-digit hex md5"

md5_of() {
  if command -v md5sum >/dev/null 2>&1; then
    md5sum "$1" | cut -d' ' -f1
  elif command -v md5 >/dev/null 2>&1; then
    md5 -q "$1"
  else
    die "neither md5sum nor md5 is installed; cannot verify the archive"
  fi
}

download() {
  local dest="$1" part="$1.part"
  echo "downloading $URL ..."
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$part" "$URL" || die "curl could not download $URL"
  elif command -v wget >/dev/null 2>&1; then
    wget -O "$part" "$URL" || die "wget could not download $URL"
  else
    die "neither curl nor wget is installed; download $URL by hand and pass --archive FILE"
  fi
  mv -f "$part" "$dest" || die "cannot move $part to $dest"
}

mkdir -p "$target" || die "cannot create target directory $target"

if [[ -n "$archive" ]]; then
  [[ -f "$archive" ]] || die "archive $archive does not exist"
else
  archive="$target/$ARCHIVE_NAME"
  # A complete earlier download is reused; a partial or damaged one is fetched again.
  if [[ -f "$archive" && "$(md5_of "$archive")" == "$expected_md5" ]]; then
    echo "reusing verified $archive"
  else
    download "$archive"
  fi
fi

actual_md5="$(md5_of "$archive")"
if [[ "$actual_md5" != "$expected_md5" ]]; then
  die "md5 mismatch for $archive: got $actual_md5, expected $expected_md5" \
      "(incomplete or corrupt download: delete it and retry)"
fi
echo "md5 ok: $actual_md5"

tar -xzf "$archive" -C "$target" || die "cannot unpack $archive into $target"

data_dir="$target/$SUBDIR"
for f in "${FILES[@]}"; do
  [[ -s "$data_dir/$f" ]] ||
    die "unpacked archive lacks $data_dir/$f (is it the CIFAR-10 binary version?)"
done
data_dir="$(cd "$data_dir" && pwd)"

cat <<EOF
CIFAR-10 is ready in $data_dir
Use it with:   mpi_trainer ... --data $data_dir
or set:        export MT_CIFAR10_DIR=$data_dir
EOF
