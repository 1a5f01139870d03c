#!/usr/bin/env bash
# One MPI rank inside the image, started by the host's mpirun (the hybrid model Apptainer sites
# use, with Podman): the host's launcher (mpirun, or srun --mpi=pmix) starts this script once per
# rank; it runs the command in the image with the host's network, hostname, process and IPC
# namespaces and the launcher's environment, so the rank inside joins the job as any other.
#
#   mpirun -np 3 packaging/container/podman-rank.sh IMAGE mpi_trainer train --train-steps 20 ...
#
# The image's Open MPI must speak to the host's: the same release (Debian 12's 4.1.4 in both
# here). Mounted: /tmp (Open MPI's session directory and PMIx's sockets), /dev/shm (shared-memory
# transport) and the current directory, where the command runs (checkpoints, metrics, data).
# MT_PODMAN_ARGS adds podman flags (e.g. "--device nvidia.com/gpu=all" for the CUDA image, -v DIR).
set -euo pipefail
(($# >= 2)) || { echo "usage: podman-rank.sh IMAGE COMMAND [ARGS...]" >&2; exit 2; }
image=$1; shift
# shellcheck disable=SC2206  # MT_PODMAN_ARGS is a list of flags
extra=(${MT_PODMAN_ARGS:-})
exec podman run --rm --network host --uts host --pid host --ipc host --security-opt label=disable \
  -v /tmp:/tmp -v /dev/shm:/dev/shm -v "$PWD:$PWD" -w "$PWD" \
  --env 'OMPI_*' --env 'PMIX_*' --env 'OPAL_*' --env 'PRTE_*' --env 'MT_*' --env 'SLURM_*' \
  "${extra[@]}" "$image" "$@"
