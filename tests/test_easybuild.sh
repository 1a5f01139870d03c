#!/usr/bin/env bash
# Builds packaging/easybuild/mpi_trainer-<version>.eb (toolchain SYSTEM, Debian's packages as OS
# dependencies) with EasyBuild into a temporary prefix, from a `git archive` tarball of this
# checkout's HEAD (committed files only), then loads the module EasyBuild wrote with Lmod in a
# clean shell (env -i) and runs `mpi_trainer --version` from it. EasyBuild's own sanity check (in
# the easyconfig) already ran the installed binary: --version and 5 training steps.
#
# Exit 0: passed; 77: skipped (no Lmod; no EasyBuild and none could be installed); else failed.
#
# Environment:
#   MT_EB_VENV    a venv holding EasyBuild: used if it has bin/eb, else EasyBuild is installed
#                 there from PyPI (kept for the next run). Unset: `eb` on PATH, else a venv
#                 installed into the temporary directory (removed at the end).
#   MT_EB_PYTHON  the python3 that makes the venv (default: python3 on PATH, then /usr/bin/python3)
#   MT_EB_JOBS    build jobs (default: nproc)
#   MT_LMOD_INIT  Lmod's bash init (default: the first of /usr/share/lmod/lmod/init/bash, ...)
#   MT_EB_KEEP=1  keep the temporary directory (its path is printed)
# The build compiles through ccache when it is installed (the easyconfig's MT_CCACHE=AUTO; the
# cache is ccache's usual one, CCACHE_DIR to choose another): a second run compiles almost nothing.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
skip() { echo "SKIPPED: $*" >&2; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_start=$(now)

ec_dir=$src/packaging/easybuild
version=$(sed -n 's/^version = .\([^"'"'"']*\).$/\1/p' "$ec_dir/mpi_trainer-"*[0-9].eb | head -n 1)
[[ -n $version ]] || fail "no version in $ec_dir/mpi_trainer-<version>.eb"
ec=$ec_dir/mpi_trainer-$version.eb
[[ -f $ec ]] || fail "$ec not found"

# Lmod: EasyBuild drives it through $LMOD_CMD, which its init script sets.
lmod_init=${MT_LMOD_INIT:-}
if [[ -z $lmod_init ]]; then
  for f in /usr/share/lmod/lmod/init/bash /usr/share/lmod/*/init/bash /opt/apps/lmod/lmod/init/bash \
           /usr/local/lmod/lmod/init/bash; do
    [[ -f $f ]] && { lmod_init=$f; break; }
  done
fi
[[ -n $lmod_init && -f $lmod_init ]] || skip "Lmod not found (apt-get install lmod, or set MT_LMOD_INIT)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mt_easybuild.XXXXXX")
cleanup() {
  if [[ ${MT_EB_KEEP:-0} == 1 ]]; then
    echo "kept $tmp"
  else
    chmod -R u+w "$tmp" 2>/dev/null || true  # EasyBuild may leave read-only files
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

# EasyBuild
install_eb() {  # VENV: make it and install EasyBuild from PyPI; false when that cannot be done
  local py=${MT_EB_PYTHON:-} venv=$1
  if [[ -z $py ]]; then
    for p in python3 /usr/bin/python3; do
      command -v "$p" >/dev/null && "$p" -c 'import venv, ensurepip' 2>/dev/null && { py=$p; break; }
    done
  fi
  [[ -n $py ]] || return 1
  echo "installing EasyBuild from PyPI into $venv ($py)"
  if ! { "$py" -m venv "$venv" && "$venv/bin/pip" install --disable-pip-version-check -q easybuild; } \
       >"$tmp/pip.log" 2>&1; then
    tail -n 5 "$tmp/pip.log" >&2
    return 1
  fi
}
if [[ -n ${MT_EB_VENV:-} ]]; then
  if [[ ! -x $MT_EB_VENV/bin/eb ]]; then
    install_eb "$MT_EB_VENV" || skip "EasyBuild could not be installed into $MT_EB_VENV (offline?)"
  fi
  eb=$MT_EB_VENV/bin/eb
elif command -v eb >/dev/null; then
  eb=$(command -v eb)
else
  install_eb "$tmp/venv" || skip "no eb on PATH and EasyBuild could not be installed from PyPI (offline?)"
  eb=$tmp/venv/bin/eb
fi
# bin/eb is a shell script that picks a python: a venv's own, where eb is a venv's
eb_bin=$(dirname "$eb")
if [[ -x $eb_bin/python ]]; then export EB_PYTHON=$eb_bin/python; fi
t_eb_ready=$(now)

# The source tarball of HEAD, under the name the easyconfig asks for.
mkdir -p "$tmp/sources"
tarball=$tmp/sources/mpi_trainer-$version.tar.gz
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$src" archive --format=tar.gz --prefix="mpi_trainer-$version/" -o "$tarball" HEAD
  echo "source: $(git -C "$src" rev-parse --short HEAD) (HEAD; uncommitted changes are not in it)"
else
  tar -C "$src/.." --exclude="$(basename "$src")/build" --exclude=.git -czf "$tarball" \
      --transform="s,^$(basename "$src"),mpi_trainer-$version," "$(basename "$src")"
  echo "source: the tree at $src (not a git checkout)"
fi

# EasyBuild, configured by its command line alone: no configuration files, no EASYBUILD_* variables.
eb_args=(
  --prefix="$tmp/eb" --sourcepath="$tmp/sources" --installpath="$tmp/install"
  --buildpath="$tmp/build" --tmpdir="$tmp/tmp" --repositorypath="$tmp/eb/ebfiles_repo"
  --modules-tool=Lmod --module-syntax=Lua --robot-paths= --detect-loaded-modules=ignore
  --parallel="${MT_EB_JOBS:-$(nproc)}"
)
[[ $EUID == 0 ]] && eb_args+=(--allow-use-as-root-and-accept-consequences)
mkdir -p "$tmp/tmp" "$tmp/xdg"
echo "eb $($eb --version 2>/dev/null | sed -n 's/.*EasyBuild \([0-9.]*\).*/\1/p'): building $(basename "$ec")"
t_build=$(now)
if ! (
  for v in "${!EASYBUILD_@}"; do unset "$v"; done
  export XDG_CONFIG_HOME=$tmp/xdg XDG_CONFIG_DIRS=$tmp/xdg
  set +u  # Lmod's init reads unset variables
  # shellcheck disable=SC1090
  source "$lmod_init"
  set -u
  "$eb" "$ec" "${eb_args[@]}"
) >"$tmp/eb.out" 2>&1; then
  tail -n 40 "$tmp/eb.out" >&2
  log=$(sed -n 's/.*Results of the build can be found in the log file(s) \(.*\)$/\1/p' "$tmp/eb.out" | head -n 1)
  [[ -n $log && -f $log ]] && { echo "--- the log's end ($log):" >&2; tail -n 60 "$log" >&2; }
  fail "eb $(basename "$ec") failed"
fi
t_built=$(now)
modfile=$tmp/install/modules/all/mpi_trainer/$version.lua
[[ -f $modfile ]] || fail "no module file $modfile"

# The module in a clean shell: nothing but Lmod's init, the module and what it puts on PATH.
# shellcheck disable=SC2016  # expanded by the inner shell
out=$(env -i HOME="$tmp" PATH=/usr/bin:/bin TERM=dumb bash --noprofile --norc -c '
  source "$1"
  set -euo pipefail
  module use "$2/modules/all"
  module load "mpi_trainer/$3"
  exe=$(command -v mpi_trainer)
  [[ $exe == "$2/software/mpi_trainer/$3/bin/mpi_trainer" ]] || { echo "mpi_trainer is $exe" >&2; exit 1; }
  [[ $EBROOTMPI_TRAINER == "$2/software/mpi_trainer/$3" ]] || { echo "EBROOTMPI_TRAINER=$EBROOTMPI_TRAINER" >&2; exit 1; }
  mpi_trainer --version
' bash "$lmod_init" "$tmp/install" "$version" 2>&1) || fail "module load mpi_trainer/$version, mpi_trainer --version: $out"
echo "$out"
head -n 1 <<<"$out" | grep -qx "mpi_trainer $version" || fail "unexpected version line: $(head -n 1 <<<"$out")"
t_end=$(now)

echo "PASSED: mpi_trainer/$version built with EasyBuild, loaded with Lmod: eb ready $(secs "$t_start" "$t_eb_ready") s," \
     "eb build+install+sanity check $(secs "$t_build" "$t_built") s, module check $(secs "$t_built" "$t_end") s," \
     "total $(secs "$t_start" "$t_end") s"
