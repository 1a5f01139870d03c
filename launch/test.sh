#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the whole test suite: the release
# build (CUDA compiled when nvcc is present; CUDA tests skip without a GPU), then the unit suite
# again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh
jobs=$(nproc)

echo "== release build and full suite"
launch/build.sh release
ctest --preset release -j "$jobs"

echo "== AddressSanitizer + UBSan build and unit suite"
launch/build.sh asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --preset asan -j "$jobs"
