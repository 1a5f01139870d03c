#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs a short asynchronous
# parameter-server training on this machine: 1 PS + 3 workers (mpirun on loopback) training
# ResNet-32 on the default data (CIFAR-10 if $MT_CIFAR10_DIR is set, else Debian's
# Fashion-MNIST), checkpointing every 100 global steps into runs/quickstart-ck (started afresh
# each time), billing the workers as transient K80s. Worker rank 3 is revoked at global step 120
# (it SIGKILLs itself, as a preempted server dies): the parameter server notices within
# --failure-timeout, drops it (its momentum stays with its data slot) and finishes with the two others; the
# summary counts the revocation; `mpi_trainer report` then draws the run into
# runs/quickstart-report/index.html (curves, the revocation on the timeline, cost) and prints its
# path. The learning rate follows a cosine over the run's own length (base 0.1; 74% measured; the
# default step schedule, scaled to the run, decays at steps 100 and 150). The job runs through launch/mpirun.sh (the ad-hoc cluster
# launcher: mpirun --enable-recovery under launch/restart_loop.sh), as production jobs do, so a
# lost parameter server would be restarted from the newest checkpoint.
# Extra arguments go to `mpi_trainer train`; MT_TRAIN_STEPS and MT_QUICKSTART_NP resize it,
# MT_QUICKSTART_REVOKE replaces the revocation (empty: none); --lr-schedule / --lr (or MT_LR_SCHEDULE
# / MT_LR) replace the cosine. MT_MPI=ulfm runs it all with the ULFM MPI (Open MPI 5 from the
# Python package index, launch/setup.sh --mpi ulfm, preset `ulfm`): the revoked worker is then
# reported by MPI within milliseconds instead of after --failure-timeout, and the parameter
# server is revoked too, at global step 160: its standby (worker rank 1) takes it over inside the
# job from its replica, a few updates lost, no restart (docs/fault-model.md, "Takeover under ULFM").
# An installed trainer (MT_TRAINER, or this script installed without setup.sh beside it: the
# container's /opt/mpi_trainer, a module) runs as it is, nothing installed or built, with runs/ in
# the current directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
preset=release
case ${MT_MPI:-debian} in
  debian) ;;
  ulfm) preset=ulfm ;;
  *) echo "quickstart: MT_MPI must be 'debian' or 'ulfm', not '$MT_MPI'" >&2; exit 2 ;;
esac
if [[ -n ${MT_TRAINER:-} || ! -x $here/setup.sh ]]; then
  trainer=$(command -v "${MT_TRAINER:-mpi_trainer}") || { echo "quickstart: no ${MT_TRAINER:-mpi_trainer} to run: set MT_TRAINER" >&2; exit 2; }
else
  cd "$here/.."
  launch/setup.sh --mpi "${MT_MPI:-debian}"
  launch/build.sh "$preset"
  trainer=build/$preset/mpi_trainer
fi
mkdir -p runs
rm -rf runs/quickstart-ck runs/quickstart.jsonl runs/quickstart-report
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-root)
np=${MT_QUICKSTART_NP:-4}
default_revoke=rank=$((np - 1))@step=120
[[ $preset == ulfm && $np -ge 4 ]] && default_revoke+=,rank=0@step=160  # the takeover (2 workers left)
revoke=${MT_QUICKSTART_REVOKE-$default_revoke}
steps=${MT_TRAIN_STEPS:-200}
schedule=(--lr-schedule "cosine:$steps" --lr 0.1)
for a in "$@"; do
  case $a in --lr | --lr=* | --lr-schedule | --lr-schedule=*) schedule=() ;; esac
done
[[ -n ${MT_LR_SCHEDULE-}${MT_LR-} ]] && schedule=()
"$here/mpirun.sh" --trainer "$trainer" --np "$np" --loopback --oversubscribe "${root[@]}" -- \
  --train-steps "$steps" --log-every-steps 25 "${schedule[@]}" \
  --ckpt-dir runs/quickstart-ck --ckpt-every-steps 100 --instance-type k80 --pricing transient \
  --metrics runs/quickstart.jsonl ${revoke:+--revoke "$revoke"} "$@"
echo "checkpoints:"
"$trainer" ckpt verify runs/quickstart-ck
# The run's story in one page: curves, the revocation on the timeline, cost against the prediction.
if "${MT_PYTHON:-/usr/bin/python3}" -c 'import matplotlib' 2>/dev/null; then
  "$trainer" report runs/quickstart.jsonl -o runs/quickstart-report
else
  echo "report: skipped (no Python 3 with matplotlib here; the container's REPORT=yes adds it): $PWD/runs/quickstart.jsonl has the run"
fi
