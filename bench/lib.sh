# Sourced by the bench/*.sh scripts: the built trainer, Open MPI on loopback (root allowed when
# run as root, as in CI containers), and a scratch directory removed on exit ($dir).
trainer=build/release/mpi_trainer
[[ -x $trainer ]] || { echo "build first: launch/build.sh release" >&2; exit 1; }
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
[[ $(id -u) -ne 0 ]] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
