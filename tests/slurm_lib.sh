# Shared set-up of the Slurm tests (sourced): a real local Slurm cluster (slurm/local-cluster) in a
# temporary directory, generated data, and helpers to submit and watch jobs.
# Usage from a test: source slurm_lib.sh TRAINER [netns]
# With netns the cluster's nodes are those of a namespace cluster (launch/netns-cluster: a login
# node and n1..n4, each link 200 Mbit/s; exit 77 where namespaces cannot be made): slurmctld on the
# login node, a slurmd on each node, and sbatch, scontrol, sinfo, squeue and scancel run on the
# login node (shell functions of the same names), the only place that reaches slurmctld.
trainer=$1
slurm_netns=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
for b in slurmctld slurmd munged sbatch; do
  command -v "$b" >/dev/null || { echo "FAIL: $b not installed (launch/setup.sh installs Slurm)"; exit 1; }
done
dir=$(mktemp -d)
cluster="$dir/cluster"
netns_name=""
cleanup() {
  "$repo/slurm/local-cluster/stop.sh" --dir "$cluster" >/dev/null 2>&1
  [[ -n $netns_name ]] && "$repo/launch/netns-cluster/cluster.sh" down --name "$netns_name" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
if [[ -n $slurm_netns ]]; then
  netns_name=s$(($$ % 100000))
  out=$("$repo/launch/netns-cluster/cluster.sh" up --name "$netns_name" --nodes 4 --rate 200mbit 2>&1)
  case $? in
    0) ;;
    4) echo "SKIPPED: $out"; exit 77 ;;
    *) echo "FAIL: cluster.sh up: $out"; exit 1 ;;
  esac
  for c in sbatch scontrol sinfo squeue scancel; do
    eval "$c() { \"\$repo/launch/netns-cluster/cluster.sh\" exec login --name \"\$netns_name\" -- $c \"\$@\"; }"
  done
fi
# A port range of its own, so a cluster someone runs by hand on the default ports is left alone,
# and one that no other test's cluster listens on (CTest runs two Slurm tests side by side).
if [[ -z ${MT_SLURM_PORT_BASE:-} ]]; then
  for _ in 1 2 3 4 5 6 7 8; do
    MT_SLURM_PORT_BASE=$((20000 + RANDOM % 20000))
    [[ -z $(ss -Htan "sport >= :$MT_SLURM_PORT_BASE and sport <= :$((MT_SLURM_PORT_BASE + 8))" 2>/dev/null) ]] && break
  done
fi
MT_SLURM_PORT_BASE=$MT_SLURM_PORT_BASE \
  "$repo/slurm/local-cluster/start.sh" --dir "$cluster" --nodes 4 --grace 20 ${netns_name:+--netns "$netns_name"}
export SLURM_CONF="$cluster/slurm.conf"
# Jobs inherit this environment (sbatch --export=ALL): loopback only (the nodes' eth0 on a
# namespace cluster), root allowed for mpirun.
if [[ -n $netns_name ]]; then
  export OMPI_MCA_oob_tcp_if_include=eth0 OMPI_MCA_btl_tcp_if_include=eth0
else
  export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
fi
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
"$trainer" gen-data "$dir/data" --train 2048 --test 512 --seed 3 >/dev/null
# train.sbatch settings for a small, fast run on the generated data.
export MT_TRAINER="$trainer" MT_DATA="$dir/data" MT_MODEL=resnet8 MT_BATCH_SIZE=32 \
  MT_TRAIN_ARGS="--lr-schedule constant --lr 0.05 --augment off --threads 1 --log-every-steps 50"

fail() { echo "FAIL: $*"; for f in "$dir"/*.out; do [[ -f $f ]] && { echo "== $f"; cat "$f"; }; done; exit 1; }

# job_field JOB NAME: one field of `scontrol show job` (JobState, Restarts, NodeList, ExitCode...).
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# wait_job JOB STATE TIMEOUT: until the job is in STATE (COMPLETED, RUNNING, ...); fails on a
# final state that is not STATE.
wait_job() {
  local job=$1 want=$2 t=$3 i s
  for ((i = 0; i < t * 5; i++)); do
    s=$(job_field "$job" JobState)
    [[ $s == "$want" ]] && return 0
    case $s in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) fail "job $job is $s, expected $want" ;; esac
    sleep 0.2
  done
  # Why Slurm left it there, and each node's state (a requeued job pending for long: which node is
  # still allocated or completing).
  echo "== scontrol show job $job (every component)"; scontrol show job "$job" 2>&1
  echo "== slurmctld.log, the last lines"; tail -n 40 "$cluster/log/slurmctld.log" 2>/dev/null
  fail "job $job still ${s:-unknown} after $t s, expected $want (Reason=$(job_field "$job" Reason);" \
    "nodes: $(sinfo -N -h -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' '))"
}

# metrics_max_step FILE: the highest global step in the progress events so far (0 if none).
metrics_max_step() {
  awk -f "$(dirname "${BASH_SOURCE[0]}")/max_step.awk" "$1" 2>/dev/null || echo 0
}

# wait_step FILE N TIMEOUT: until the metrics in FILE show global step >= N.
wait_step() {
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    [[ -f $1 ]] && (($(metrics_max_step "$1") >= $2)) && return 0
    sleep 0.2
  done
  fail "no global step $2 in $1 after $3 s"
}
