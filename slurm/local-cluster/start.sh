#!/usr/bin/env bash
# Starts a real Slurm cluster on this one host, for tests and demos: munged, slurmctld and one
# slurmd per emulated node (Debian's slurm-wlm is built with multiple-slurmd support).
#
#   slurm/local-cluster/start.sh [--dir DIR] [--nodes N] [--port-base P] [--grace S] [--netns NAME]
#                                (--dir: default $MT_SLURM_STATE_DIR or /tmp/mt-slurm)
#   source DIR/env.sh        # SLURM_CONF for sbatch, squeue, scontrol, ...
#   slurm/local-cluster/stop.sh [--dir DIR]
#
# --netns NAME: on the nodes of the namespace cluster NAME (launch/netns-cluster/cluster.sh up
# --name NAME), one node each: slurmctld on its login node, each slurmd in its node's namespace
# with the node's own hostname and address (every daemon on the default ports of its own network),
# so jobs and their MPI ranks talk over the nodes' links. --nodes is the cluster's node count;
# run the Slurm commands on the login node: `cluster.sh exec login --name NAME -- sbatch ...`.
#
# Partitions (the layout the sbatch templates and the cloud configs use):
#   ondemand  n1          never preempted: the parameter server's node
#   spot      n2..nN      default; preemptible, PreemptMode=REQUEUE with GraceTime=S (default 20 s)
#   reclaim   n2..nN      hidden, higher PriorityTier: a job here takes spot nodes back the way a
#                         cloud provider revokes a spot VM (tests: sbatch -p reclaim -w n3 --exclusive)
# Every node declares 4 CPUs whatever the host has (SlurmdParameters=config_overrides).
# Needs root (slurmd runs jobs as their user) and the packages slurm-wlm and munge
# (launch/setup.sh installs them). Ports P..P+N are used on 127.0.0.1 only (with --netns: 6817
# and 6818 inside the cluster's namespaces).
set -euo pipefail

dir=${MT_SLURM_STATE_DIR:-/tmp/mt-slurm}
nodes=${MT_SLURM_NODES:-4}
port_base=${MT_SLURM_PORT_BASE:-16817}
grace=${MT_SLURM_GRACE:-20}
netns=""
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --port-base) port_base=$2; shift 2 ;;
    --grace) grace=$2; shift 2 ;;
    --netns) netns=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "start.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
netns_nodes=/run/mt-netns/$netns/nodes
if [[ -n $netns ]]; then
  [[ -f $netns_nodes ]] || { echo "start.sh: no namespace cluster '$netns' (launch/netns-cluster/cluster.sh up --name $netns)" >&2; exit 1; }
  nodes=$(grep -c '^n[0-9]' "$netns_nodes")
  port_base=6817  # each daemon in a network of its own
fi
# on NODE CMD...: CMD on the namespace cluster's NODE (login, n1, ...), else here.
on() {
  local node=$1
  shift
  if [[ -n $netns ]]; then "$here/../../launch/netns-cluster/cluster.sh" exec "$node" --name "$netns" -- "$@"; else "$@"; fi
}
addr_of() { awk -v n="$1" '$1 == n { print $2 }' "$netns_nodes"; }
[[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 2)) || { echo "start.sh: --nodes must be at least 2 (one ondemand, one spot)" >&2; exit 2; }
[[ $port_base =~ ^[0-9]+$ && $grace =~ ^[0-9]+$ ]] || { echo "start.sh: --port-base and --grace take integers" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "start.sh: needs root (slurmd starts jobs as their user)" >&2; exit 1; }
for b in munged slurmctld slurmd sbatch; do
  command -v "$b" >/dev/null || { echo "start.sh: $b not found: run launch/setup.sh" >&2; exit 1; }
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)  # slurmd and slurmctld want absolute paths
if [[ -f $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
  echo "start.sh: a cluster already runs in $dir (stop it with stop.sh --dir $dir)" >&2; exit 1
fi
rm -rf "$dir"/{state,spool,tmp,log,munge}
mkdir -p "$dir"/{state,spool,tmp,log,munge}
chmod 0700 "$dir/munge"

# munge: a key and a daemon of our own, so the host's munge (if any) is left alone.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

last=$nodes
spot="n[2-$last]"
((nodes == 2)) && spot=n2
# The task prolog gives every emulated node its own TMPDIR and shared-memory directory: Open MPI
# ranks on two "nodes" of one host would otherwise collide in /dev/shm (docs/architecture.md, "Measured facts the code relies on").
cat > "$dir/task_prolog.sh" <<PROLOG
#!/bin/sh
d=$dir/tmp/\$SLURMD_NODENAME
mkdir -p "\$d"
echo "export TMPDIR=\$d"
echo "export OMPI_MCA_btl_vader_backing_directory=\$d"
PROLOG
chmod +x "$dir/task_prolog.sh"

{
  cat <<CONF
# Written by slurm/local-cluster/start.sh: $nodes emulated nodes on one host${netns:+, on the namespace cluster $netns}.
ClusterName=mtlocal
SlurmctldHost=$([[ -n $netns ]] && echo "login($(addr_of login))" || echo "localhost(127.0.0.1)")
SlurmctldPort=$port_base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: the default 120 s delays a requeued job's restart by about 144 s.
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
TmpFS=$dir/tmp/%n
TaskProlog=$dir/task_prolog.sh
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Heterogeneous jobs are started by the backfill scheduler only: run it every second.
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
KillWait=10
InactiveLimit=0
SlurmdTimeout=30
# Spot semantics: a higher-tier partition preempts the spot partition's jobs, which get their
# --signal first (preempt_send_user_signal), GraceTime seconds to leave, then are requeued.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobRequeue=1
CONF
  for ((i = 1; i <= nodes; i++)); do
    if [[ -n $netns ]]; then
      echo "NodeName=n$i NodeHostname=n$i NodeAddr=$(addr_of "n$i") Port=6818 CPUs=4 RealMemory=4000 State=UNKNOWN"
    else
      echo "NodeName=n$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port_base + i)) CPUs=4 RealMemory=4000 State=UNKNOWN"
    fi
  done
  cat <<CONF
PartitionName=ondemand Nodes=n1 PriorityTier=1 PreemptMode=OFF MaxTime=INFINITE State=UP
PartitionName=spot Nodes=$spot Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=$grace MaxTime=INFINITE State=UP
PartitionName=reclaim Nodes=$spot Hidden=YES PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
CONF
} > "$dir/slurm.conf"
echo "$netns" > "$dir/netns"  # stop.sh cancels the jobs from the login node
cat > "$dir/env.sh" <<ENV
# source me: points the Slurm commands at the local cluster in $dir
export SLURM_CONF=$dir/slurm.conf
ENV
export SLURM_CONF=$dir/slurm.conf

on login slurmctld -f "$dir/slurm.conf" -i
for ((i = 1; i <= nodes; i++)); do
  mkdir -p "$dir/spool/n$i" "$dir/tmp/n$i"  # slurmd does not create them; the pmix plugin needs the spool
  on "n$i" slurmd -f "$dir/slurm.conf" -N "n$i"
done

# Up when every node is idle.
for ((t = 0; t < 300; t++)); do
  idle=$(on login sinfo -h -N -p ondemand,spot -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  ((idle == nodes)) && { echo "start.sh: $nodes nodes idle in $dir (source $dir/env.sh)"; exit 0; }
  sleep 0.1
done
echo "start.sh: nodes not idle after 30 s:" >&2
on login sinfo -N >&2 || true
tail -n 20 "$dir/log/slurmctld.log" >&2 || true
exit 1
