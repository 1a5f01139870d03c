#!/usr/bin/env bash
# The container (issue 63): the image built from this checkout's files with Podman
# (packaging/container/build.sh: a Debian 12 base made here from Debian's packages, the
# Containerfile's stages), then, inside it: `mpi_trainer --version`; a 20-step run whose checkpoint
# the host's trainer verifies; the quickstart (1 PS + 3 workers, a revocation, the summary); and
# 1 PS + 2 workers started by the host's mpirun, each rank in its own container
# (packaging/container/podman-rank.sh, the hybrid model). Exit 77 (skipped) where Podman cannot
# run a container here, with the reason.
#   tests/test_container.sh MPIEXEC TRAINER
set -euo pipefail
mpiexec=$1 trainer=$2
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../packaging/container/podman_lib.sh
source "$repo/packaging/container/podman_lib.sh"
base=localhost/mpi_trainer-base:bookworm
image=localhost/mpi_trainer:ctest
command -v podman >/dev/null || { echo "skipped: podman is not installed (launch/setup.sh installs it)" >&2; exit 77; }
mt_podman_base "$base" || { echo "skipped: no Debian base image could be made" >&2; exit 77; }
mt_podman_check "$base" || { echo "skipped: $MT_PODMAN_WHY" >&2; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$repo/packaging/container/build.sh" --base "$base" --tag "$image" >"$dir/build.log" 2>&1 ||
  { tail -n 40 "$dir/build.log"; fail "the image did not build"; }
tail -n 1 "$dir/build.log"
run() { podman run --rm --network host -v "$dir:$dir" -w "$dir" "$image" "$@"; }

version=$(run mpi_trainer --version) || fail "mpi_trainer --version in the image"
echo "$version"
version_number=$(mt_project_version "$repo")
grep -q "^mpi_trainer $version_number$" <<<"$version" ||
  fail "the image's version is not the checkout's"
grep -q "^mpi: Open MPI v4.1" <<<"$version" || fail "the image's MPI: $version"

# The Apptainer definition, as far as this host can check it (no apptainer here): it bootstraps
# from the archive of this version's image, and spython (Apptainer's recipe converter) turns it,
# pointed at the image just built, into a Containerfile that builds, whose %test passes and whose
# %runscript runs the trainer.
def=$repo/packaging/container/mpi_trainer.def
grep -q "^From: mpi_trainer-$version_number.oci.tar$" "$def" || fail "mpi_trainer.def does not bootstrap from mpi_trainer-$version_number.oci.tar"
spython=$repo/.venv/bin/spython
[[ -x $spython ]] || fail "no $spython (launch/setup.sh installs spython into .venv)"
sed -e 's/^Bootstrap: oci-archive$/Bootstrap: docker/' -e "s|^From: .*|From: $image|" "$def" >"$dir/sif.def"
# (spython 0.3.14 writes %test as `HEALTHCHECK /bin/bash /tests.sh`, which lacks its CMD: dropped,
# the test below runs /tests.sh itself.)
"$spython" recipe --parser singularity "$dir/sif.def" 2>"$dir/spython.err" | grep -v '^HEALTHCHECK ' >"$dir/Containerfile.def" ||
  { cat "$dir/spython.err"; fail "spython cannot read mpi_trainer.def"; }
[[ -s $dir/spython.err ]] && { cat "$dir/spython.err"; fail "spython's complaints about mpi_trainer.def"; }
podman build --network host -q -t "$image-def" -f "$dir/Containerfile.def" "$dir" >/dev/null 2>"$dir/def.err" ||
  { cat "$dir/Containerfile.def" "$dir/def.err"; fail "mpi_trainer.def's conversion does not build"; }
out=$(podman run --rm "$image-def" bash /tests.sh) || fail "mpi_trainer.def's %test: $out"
grep -q "^mpi_trainer $version_number$" <<<"$out" || fail "mpi_trainer.def's %test: $out"
out=$(podman run --rm "$image-def" /bin/sh -c "$(sed -n 's/^CMD //p' "$dir/Containerfile.def")" sh --version) ||
  fail "mpi_trainer.def's %runscript: $out"
grep -q "^mpi_trainer $version_number$" <<<"$out" || fail "mpi_trainer.def's %runscript: $out"
podman rmi "$image-def" >/dev/null
echo "mpi_trainer.def: converted by spython, built, %test and %runscript ok"

# 20 steps on the image's default data (Debian's Fashion-MNIST), one process; the host's trainer
# reads the checkpoint it wrote.
run mpi_trainer train --model resnet8 --train-steps 20 --batch-size 32 --ckpt-dir "$dir/ck20" \
  --ckpt-every-steps 10 --metrics "$dir/m20.jsonl" >"$dir/run20.log" 2>&1 || { cat "$dir/run20.log"; fail "20-step run"; }
/usr/bin/python3 - "$dir/m20.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
assert s["event"] == "summary" and s["global_step"] == 20, s
print(f"20 steps in the image: {s['global_step']} steps, test accuracy {s['test_accuracy']:.3f}")
PY
"$trainer" ckpt verify "$dir/ck20" >/dev/null || fail "the host's trainer rejects the image's checkpoint"

# The quickstart inside one container (short: 60 steps, worker rank 3 revoked at step 30).
podman run --rm --network host -v "$dir:$dir" -w "$dir" -e MT_TRAIN_STEPS=60 \
  -e MT_QUICKSTART_REVOKE=rank=3@step=30 "$image" quickstart.sh --model resnet8 \
  >"$dir/quick.log" 2>&1 || { tail -n 40 "$dir/quick.log"; fail "the quickstart in the image"; }
grep -q "^done: .*, 1 revocation(s)$" "$dir/quick.log" || { cat "$dir/quick.log"; fail "no revocation in the quickstart's output"; }
/usr/bin/python3 - "$dir/runs/quickstart.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
s = ev[-1]
assert s["event"] == "summary" and s["global_step"] == 60, s
assert s["workers_start"] == 3 and s["workers_end"] == 2, s
print(f"quickstart in the image: {s['global_step']} steps, workers {s['workers_start']} -> {s['workers_end']}")
PY

# The hybrid model: the host's mpirun starts 3 ranks, each `podman run` of the image.
"$mpiexec" -np 3 --oversubscribe -x OMP_WAIT_POLICY=passive \
  "$repo/packaging/container/podman-rank.sh" "$image" mpi_trainer train --model resnet8 --batch-size 32 \
  --train-steps 30 --log-every-steps 10 --metrics "$dir/hybrid.jsonl" >"$dir/hybrid.log" 2>&1 ||
  { tail -n 40 "$dir/hybrid.log"; fail "1 PS + 2 workers from the host's mpirun into containers"; }
/usr/bin/python3 - "$dir/hybrid.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
assert s["event"] == "summary" and s["global_step"] == 30, s
assert s["workers_start"] == 2 == s["workers_end"], s
print(f"host mpirun -> 3 containers: {s['global_step']} steps, {s['workers_end']} workers")
PY
echo "container: ok"
