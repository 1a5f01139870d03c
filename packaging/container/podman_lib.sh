# shellcheck shell=bash
# Sourced by packaging/container/build.sh and tests/test_container.sh: Podman on this host.
#
# mt_podman_base IMAGE: makes IMAGE (a Debian 12 base) from Debian's packages when it is missing,
#   for hosts that reach Debian's archive but no image registry: mmdebstrap --variant=minbase into
#   a tarball, `podman import`. MT_REBUILD_BASE=1 makes it again.
# mt_podman_check IMAGE: runs `true` in IMAGE. Podman's defaults ask for more than some hosts
#   allow: open files and processes limits above the host's hard limits (a VM whose root lacks
#   CAP_SYS_RESOURCE) and cgroups that crun refuses on a v1/v2 hybrid. Where the default fails,
#   it writes a containers.conf with runc and the host's own limits, exports CONTAINERS_CONF and
#   tries again. Returns 1 with the reason in MT_PODMAN_WHY when no container runs here.
# mt_project_version REPO: the version in REPO's CMakeLists.txt (the image's tag, its --version).

mt_podman_base() {
  local image=$1 tar
  if [[ ${MT_REBUILD_BASE:-0} != 1 ]] && podman image exists "$image"; then return 0; fi
  command -v mmdebstrap >/dev/null || { echo "no $image and no mmdebstrap to make it (apt-get install mmdebstrap)" >&2; return 1; }
  tar=$(mktemp /tmp/mt-base.XXXXXX.tar)
  # The host's own Debian 12 sources (its mirror, updates and security suites) where it has them,
  # else mmdebstrap's default mirror. apt's lists are left out: each stage updates them itself.
  local sources=/etc/apt/sources.list.d/debian.sources mirror=() input=/dev/null
  if [[ -r $sources ]] && grep -q '^Suites:.*bookworm' "$sources"; then mirror=(-); input=$sources; fi
  if ! mmdebstrap --quiet --variant=minbase --dpkgopt='path-exclude=/usr/share/doc/*' \
         --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
         --dpkgopt='path-include=/usr/share/locale/locale.alias' --customize-hook='rm -rf "$1"/var/lib/apt/lists/*' \
         bookworm "$tar" "${mirror[@]}" <"$input"; then
    rm -f "$tar"; echo "mmdebstrap could not make a Debian 12 base" >&2; return 1
  fi
  podman import --quiet --change 'CMD ["/bin/bash"]' "$tar" "$image" >/dev/null || { rm -f "$tar"; return 1; }
  rm -f "$tar"
}

mt_podman_check() {
  local image=$1 err conf nproc
  MT_PODMAN_WHY=""
  command -v podman >/dev/null || { MT_PODMAN_WHY="podman is not installed (apt-get install podman)"; return 1; }
  err=$(podman run --rm --network host "$image" true 2>&1) && return 0
  if [[ $err == *setrlimit* || $err == *rlimit* || $err == *"hybrid mode"* ]] && command -v runc >/dev/null; then
    # Processes: Podman's conmon could not be given more than 32768 here (a Firecracker VM).
    nproc=$(ulimit -Hu); [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    conf=${TMPDIR:-/tmp}/mt-containers-$(id -u).conf
    cat >"$conf" <<EOC
# Written by packaging/container/podman_lib.sh: this host refused Podman's defaults ($(echo "$err" | head -n 1 | tr -d '"'))
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
EOC
    export CONTAINERS_CONF=$conf
    err=$(podman run --rm --network host "$image" true 2>&1) && return 0
  fi
  MT_PODMAN_WHY="podman cannot run a container here: $(echo "$err" | tail -n 1)"
  return 1
}

mt_project_version() {
  sed -n 's/^project(mpi_trainer VERSION \([0-9.]*\).*/\1/p' "$1/CMakeLists.txt"
}
