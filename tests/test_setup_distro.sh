#!/usr/bin/env bash
# launch/setup.sh on a distribution it does not support (issue 63), read from a made-up
# os-release (MT_OS_RELEASE): Rocky Linux installs nothing, exits 1 and names what to install and
# where else to turn; Debian 12 (this machine, every package present after setup) exits 0.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
printf 'ID=rocky\nVERSION_ID="9.4"\n' >"$dir/rocky"
out=$(MT_OS_RELEASE=$dir/rocky "$repo/launch/setup.sh" 2>&1); rc=$?
((rc == 1)) || fail "on rocky:9.4 setup.sh exited $rc, not 1: $out"
for want in "this is rocky:9.4" "installs Debian 12's packages only" "CMake >= 3.22" "hdf5-devel" \
            "openmpi-devel" "packaging/container" "packaging/spack" "packaging/easybuild"; do
  grep -qF "$want" <<<"$out" || fail "no '$want' in: $out"
done
printf 'ID=debian\nVERSION_ID="12"\n' >"$dir/debian"
out=$(MT_OS_RELEASE=$dir/debian "$repo/launch/setup.sh" 2>&1) || fail "on debian:12: $out"
grep -q "packages present" <<<"$out" || fail "on debian:12 (after setup): $out"
echo "setup_distro: ok"
