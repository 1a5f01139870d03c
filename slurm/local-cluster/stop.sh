#!/usr/bin/env bash
# Stops the local cluster started by start.sh: its jobs, slurmd's, slurmctld and munged.
#   slurm/local-cluster/stop.sh [--dir DIR] [--purge]     (--purge also removes DIR)
set -uo pipefail
dir=${MT_SLURM_STATE_DIR:-/tmp/mt-slurm}
purge=0
while (($#)); do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    -h|--help) sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stop.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -d $dir ]] || { echo "stop.sh: no cluster in $dir"; exit 0; }
export SLURM_CONF=$dir/slurm.conf
netns=$(cat "$dir/netns" 2>/dev/null || true)
if [[ -f $SLURM_CONF && -n $netns ]]; then  # on a namespace cluster, only its login node reaches slurmctld
  "$(dirname "$0")/../../launch/netns-cluster/cluster.sh" exec login --name "$netns" -- \
    scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
elif [[ -f $SLURM_CONF ]]; then
  scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
fi
pids=()
for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
  [[ -f $f ]] && pids+=("$(cat "$f")")
done
((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
for ((t = 0; t < 100; t++)); do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  ((alive)) || break
  sleep 0.1
done
((alive)) && kill -9 "${pids[@]}" 2>/dev/null
rm -f "$dir"/slurmd-*.pid "$dir/slurmctld.pid"
((purge)) && rm -rf "$dir"
echo "stop.sh: stopped the cluster in $dir"
