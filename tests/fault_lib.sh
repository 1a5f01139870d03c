# Shared set-up of the fault tests (sourced): generated data, one training command, and checks of
# the metrics file with /usr/bin/python3. Usage from a test: source fault_lib.sh MPIEXEC TRAINER
mpiexec=$1 trainer=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
restart_loop="$here/../launch/restart_loop.sh"
dir=$(mktemp -d)
export MT_RESTART_ATTEMPT=${MT_RESTART_ATTEMPT-}  # passed with mpirun -x (Open MPI 5 warns when unset)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 2048 --test 512 --seed 3 >/dev/null

# train NP [extra train flags...]: one mpirun job that survives rank deaths, on $dir/data, with
# checkpoints in $dir/ck; output in $dir/out.txt, metrics in $dir/m.jsonl.
train_cmd() {
  local np=$1; shift
  echo "$mpiexec" --enable-recovery -np "$np" --oversubscribe -x OMP_WAIT_POLICY=passive -x MT_RESTART_ATTEMPT \
    "$trainer" train --model resnet8 --batch-size 32 --lr-schedule constant --lr 0.05 --augment off \
    --log-every-steps 40 --data "$dir/data" --metrics "$dir/m.jsonl" --ckpt-dir "$dir/ck" "$@"
}
train() {
  local np=$1; shift
  $(train_cmd "$np" "$@") > "$dir/out.txt" 2>&1
}

source "$(dirname "${BASH_SOURCE[0]}")/rank_pid.sh"

# wait_for_step N [TIMEOUT]: until the metrics show progress at global step >= N.
wait_for_step() {
  local n=$1 t=${2:-120} i
  for ((i = 0; i < t * 10; i++)); do
    [[ -f "$dir/m.jsonl" ]] && (($(awk -f "$here/max_step.awk" "$dir/m.jsonl") >= n)) && return 0
    sleep 0.1
  done
  echo "timed out waiting for global step $n"; return 1
}
