#!/usr/bin/env bash
# A cluster on one machine with real links (issue 60): every node a Linux network namespace with its
# own hostname, its own address and its own link to a switch, shaped both ways when asked; a login
# node that takes no ranks (mpirun runs there, as on a real cluster's head node); a launch agent that
# Open MPI's mpirun uses instead of ssh, so `mpirun --hostfile` starts its daemons on every node.
#
#   launch/netns-cluster/cluster.sh up [--nodes N] [--rate RATE] [--name NAME] [--subnet A.B.C]
#   launch/netns-cluster/cluster.sh down [--name NAME]
#   launch/netns-cluster/cluster.sh status [--name NAME]
#   launch/netns-cluster/cluster.sh exec NODE [--name NAME] -- COMMAND...   (NODE: login, n1, n2, ...)
#   launch/netns-cluster/cluster.sh link NODE down|up [--name NAME]         (the node's link cut / back)
#   launch/netns-cluster/cluster.sh cut A B [--oneway] [--name NAME]        (A's packets to B dropped,
#                                                                            and B's to A unless --oneway)
#   launch/netns-cluster/cluster.sh uncut A B [--name NAME]
#   launch/netns-cluster/cluster.sh throttle NODE RATE|off [--name NAME]    (both directions of its link)
#   launch/netns-cluster/cluster.sh crash NODE [--name NAME]                (SIGKILL to every process of
#                                                                            the node, its link down)
#   launch/netns-cluster/cluster.sh bytes NODE [--name NAME]                (bytes its link carried so far,
#                                                                            both ways, as the switch counts)
#
# up: N nodes n1..nN (default 4) and `login`, each the namespace NAME-<node> (NAME default mtc) with
# its loopback and one interface eth0, address A.B.C.(10+i) (login: A.B.C.2) on a /24 (--subnet,
# default 10.213.0; the addresses exist only inside these namespaces), its veth peer on a bridge in a
# namespace of its own (NAME-sw): the host's own network has no interface, route or address of the
# cluster, and no namespace of it has a route anywhere but the /24. --rate (e.g. 100mbit, 20mbit,
# 1gbit: tc's units) shapes every link both ways with a token bucket (tbf: the node's egress on
# eth0, its ingress on the switch's port); default unshaped. The bucket's queue holds
# MT_NETNS_TBF_LATENCY of the rate (tc's `latency`, default 50ms) before it drops. Each node's
# /etc/hosts (/etc/netns/NAME-<node>/hosts, which `ip netns exec` mounts) names every node.
# It writes /run/mt-netns/NAME/: `hostfile` (n1..nN, slots=1 each: one rank per node), `agent` (the
# launch agent: `agent HOST COMMAND...` runs COMMAND through `sh -c` in HOST's namespace with HOST as
# its hostname, as ssh would; Open MPI 4.1 takes it as `--mca plm_rsh_agent`, Open MPI 5's PRRTE as
# `--prtemca plm_ssh_agent`: launch/mpirun.sh --launch-agent does either), `nodes` (name address).
# exec runs a command in a node: its network namespace (nsenter --net), its hostname (unshare
# --uts) and its /etc/hosts (bound in a mount namespace of its own); the rest of the file system,
# /sys included, is the host's (`ip netns exec` remounts /sys, which hides /sys/fs/cgroup: slurmd
# cannot start there); its exit code is the command's. down removes exactly what up made: the
# namespaces (after SIGKILL to the processes still in them), /etc/netns/NAME-*, /run/mt-netns/NAME.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): without it, one line and exit 4 (tests skip on 4).
# Exit: 0 done, 2 usage, 3 no such cluster or node, 4 not permitted here (no root or no netns), 1 a
# command of ip or tc failed (its message above).
set -uo pipefail

name=mtc nodes=4 rate="" subnet=10.213.0 oneway=0
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "cluster.sh: $1" >&2; exit "${2:-2}"; }

(($#)) || { usage; exit 2; }
cmd=$1
shift
[[ $cmd == -h || $cmd == --help || $cmd == help ]] && { usage; exit 0; }
args=()
while (($#)); do
  case $1 in
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
    --oneway) oneway=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; args+=(--); args+=("$@"); break ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name: 1-8 lower-case letters or digits, starting with a letter (interface names are short)"
state=/run/mt-netns/$name

need_root() {
  [[ $(id -u) == 0 ]] || die "needs root (CAP_NET_ADMIN to make network namespaces); run it as root or with sudo" 4
  command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (Debian's iproute2)" 4
}
ns_of() {  # ns_of NODE: the namespace of node NODE of this cluster (3 when there is none)
  [[ -f $state/nodes ]] || die "no cluster '$name' (cluster.sh up --name $name)" 3
  awk -v n="$1" '$1 == n { found = 1 } END { exit !found }' "$state/nodes" || die "no node '$1' in cluster '$name' (nodes: $(awk '{print $1}' "$state/nodes" | tr '\n' ' '))" 3
  echo "$name-$1"
}
addr_of() { awk -v n="$1" '$1 == n { print $2 }' "$state/nodes"; }
run() { "$@" || { echo "cluster.sh: failed: $*" >&2; exit 1; }; }
# The token bucket of a link: RATE, a bucket of 1 ms at that rate (16 KB at least: a few full
# frames) and 50 ms of queue. The bucket stays small so that a message is paced at the rate from
# its first byte: a bucket of 256 KB, refilled while a worker computed, let most of a 300 KB push
# through at the veth's own speed (a lone worker at 25 Mbit/s stepped 2.1 times as fast as the
# rate allows); TCP still reaches 95% of the rate with 4 KB (bench/README.md, "plan against a
# real link").
shape() {  # shape NAMESPACE DEV RATE|off
  tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
  [[ $3 == off ]] && return 0
  local bps
  bps=$(rate_bits "$3") || die "a rate is a number and tc's unit (bit, kbit, mbit, gbit), e.g. 100mbit; not '$3'"
  run tc -n "$1" qdisc add dev "$2" root tbf rate "$3" burst $((bps / 8000 > 16384 ? bps / 8000 : 16384)) latency "${MT_NETNS_TBF_LATENCY:-50ms}"
}
rate_bits() {  # rate_bits RATE: tc's rate in bits per second (integers), or exit 1
  [[ $1 =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || return 1
  local n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;; esac
}

up() {
  need_root
  [[ $nodes =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 200)) || die "--nodes: 1 to 200"
  [[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--subnet: the first three numbers of a /24, e.g. 10.213.0"
  [[ -z $rate ]] || rate_bits "$rate" >/dev/null || die "--rate: a number and tc's unit (bit, kbit, mbit, gbit), e.g. 100mbit; not '$rate'"
  [[ -e $state ]] && die "cluster '$name' is up already ($state); cluster.sh down --name $name first"
  ip netns add "$name-probe" 2>/dev/null || die "cannot make a network namespace here (a container without CAP_SYS_ADMIN?)" 4
  ip netns del "$name-probe"
  mkdir -p "$state" /etc/netns
  local sw=$name-sw node i ns addr list=(login)
  for ((i = 1; i <= nodes; i++)); do list+=("n$i"); done
  : >"$state/nodes"
  for node in "${list[@]}"; do
    if [[ $node == login ]]; then addr=$subnet.2; else addr=$subnet.$((10 + ${node#n})); fi
    echo "$node $addr" >>"$state/nodes"
  done
  # Written before the links so that a failure half-way leaves what `down` removes.
  run ip netns add "$sw"
  run ip -n "$sw" link set lo up
  run ip -n "$sw" link add br0 type bridge
  run ip -n "$sw" link set br0 up
  while read -r node addr; do
    ns=$name-$node
    run ip netns add "$ns"
    mkdir -p "/etc/netns/$ns"
    run ip -n "$ns" link set lo up
    # The pair is made in the switch's namespace and one end moved: no interface of the cluster
    # ever exists in the host's namespace.
    run ip -n "$sw" link add "p-$node" type veth peer name eth0 netns "$ns"
    run ip -n "$sw" link set "p-$node" master br0
    run ip -n "$sw" link set "p-$node" up
    run ip -n "$ns" addr add "$addr/24" dev eth0
    run ip -n "$ns" link set eth0 up
    if [[ -n $rate ]]; then
      shape "$ns" eth0 "$rate"
      shape "$sw" "p-$node" "$rate"
    fi
  done <"$state/nodes"
  # /etc/hosts of every node: itself, localhost, every other node.
  local hosts
  hosts=$(printf '127.0.0.1 localhost\n'; awk '{ print $2, $1 }' "$state/nodes")
  while read -r node addr; do printf '%s\n' "$hosts" >"/etc/netns/$name-$node/hosts"; done <"$state/nodes"
  awk '$1 != "login" { print $1, "slots=1" }' "$state/nodes" >"$state/hostfile"
  write_agent
  echo "${rate:-unshaped}" >"$state/rate"
  echo "cluster '$name' up: login + $nodes node(s) on $subnet.0/24, links ${rate:-unshaped}"
  echo "  hostfile $state/hostfile, launch agent $state/agent"
  echo "  try: $0 exec login --name $name -- launch/mpirun.sh --hostfile $state/hostfile --launch-agent $state/agent --iface eth0 --allow-root -- --ckpt-dir /tmp/ck"
}

# The launch agent: what ssh would do, into a namespace. Open MPI calls it as `agent [ssh options]
# HOST COMMAND...` and the command is a shell line (as ssh passes it to the remote shell); a host
# this cluster does not have is an error, not a silent local run.
write_agent() {
  cat >"$state/agent" <<EOF
#!/usr/bin/env bash
# Launch agent of the namespace cluster '$name' (launch/netns-cluster/cluster.sh): ssh's place.
while [[ \${1:-} == -* ]]; do
  case \$1 in -x|-X|-T|-t|-q|-n) shift ;; -o|-p|-l|-i) shift 2 ;; *) shift ;; esac
done
host=\${1:?agent: no host}
shift
grep -q "^\$host " "$state/nodes" || { echo "agent: no node '\$host' in cluster '$name'" >&2; exit 255; }
ns=$name-\$host
exec nsenter --net="/run/netns/\$ns" unshare --mount --uts sh -c \
  'mount --bind "/etc/netns/\$1/hosts" /etc/hosts && hostname "\$0" && exec sh -c "\$2"' "\$host" "\$ns" "\$*"
EOF
  chmod 0755 "$state/agent"
}

down() {
  need_root
  local ns found=0
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-(sw|login|n[0-9]+|probe)\$"); do
    found=1
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" || echo "cluster.sh: could not remove the namespace $ns" >&2
    rm -rf "/etc/netns/$ns"
  done
  [[ -e $state ]] && found=1
  rm -rf "$state"
  rmdir /etc/netns /run/mt-netns 2>/dev/null  # when empty: up may have made them
  ((found)) && echo "cluster '$name' down" || echo "no cluster '$name' (nothing to remove)"
}

status() {
  [[ -f $state/nodes ]] || die "no cluster '$name'" 3
  echo "cluster '$name': links $(cat "$state/rate" 2>/dev/null)"
  local node addr ns link
  while read -r node addr; do
    ns=$name-$node
    link=$(ip -n "$ns" -br link show eth0 2>/dev/null | awk '{print $2}')
    printf '  %-6s %-15s link %-5s procs %s%s\n' "$node" "$addr" "${link:-?}" "$(ip netns pids "$ns" 2>/dev/null | wc -l)" \
      "$(ip -n "$ns" route show type blackhole 2>/dev/null | awk '{printf " cut:%s", $2}')"
  done <"$state/nodes"
}

node_exec() {
  local node=${args[0]:-} ns
  [[ -n $node ]] || die "exec NODE -- COMMAND..."
  ns=$(ns_of "$node") || exit $?
  local i=1
  [[ ${args[1]:-} == -- ]] && i=2
  ((${#args[@]} > i)) || die "exec $node: no command"
  exec nsenter --net="/run/netns/$ns" unshare --mount --uts sh -c \
    'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$0" && shift && exec "$@"' "$node" "$ns" "${args[@]:i}"
}

link() {
  need_root
  local node=${args[0]:-} how=${args[1]:-} ns
  [[ -n $node && ($how == down || $how == up) ]] || die "link NODE down|up"
  ns=$(ns_of "$node") || exit $?
  run ip -n "$ns" link set eth0 "$how"
  if [[ $how == up ]]; then  # the address's route went with the link; back with it
    # (not `ip | grep -q`: under pipefail grep's early exit fails ip with SIGPIPE, and the address,
    # still there, was added again: "Address already assigned")
    [[ $(ip -n "$ns" addr show dev eth0) == *"inet "* ]] || run ip -n "$ns" addr add "$(addr_of "$node")/24" dev eth0
  fi
  echo "$node: link $how"
}

cut_pair() {  # cut_pair add|del
  need_root
  local a=${args[0]:-} b=${args[1]:-} nsa nsb
  [[ -n $a && -n $b && $a != "$b" ]] || die "cut A B [--oneway] (two different nodes)"
  nsa=$(ns_of "$a") || exit $?
  nsb=$(ns_of "$b") || exit $?
  if [[ $1 == add ]]; then
    run ip -n "$nsa" route add blackhole "$(addr_of "$b")/32"
    ((oneway)) || run ip -n "$nsb" route add blackhole "$(addr_of "$a")/32"
    echo "cut: $a -> $b dropped$( ((oneway)) || echo ", $b -> $a dropped")"
  else
    ip -n "$nsa" route del blackhole "$(addr_of "$b")/32" 2>/dev/null
    ip -n "$nsb" route del blackhole "$(addr_of "$a")/32" 2>/dev/null
    echo "uncut: $a <-> $b"
  fi
}

throttle() {
  need_root
  local node=${args[0]:-} r=${args[1]:-} ns
  [[ -n $node && -n $r ]] || die "throttle NODE RATE|off"
  ns=$(ns_of "$node") || exit $?
  local base
  base=$(cat "$state/rate" 2>/dev/null)
  [[ $r == off && $base != unshaped ]] && r=$base  # back to the cluster's own rate
  shape "$ns" eth0 "$r"
  shape "$name-sw" "p-$node" "$r"
  echo "$node: link ${r}"
}

crash() {
  need_root
  local node=${args[0]:-} ns
  [[ -n $node ]] || die "crash NODE"
  ns=$(ns_of "$node") || exit $?
  run ip -n "$ns" link set eth0 down
  ip netns pids "$ns" | xargs -r kill -9 2>/dev/null
  echo "$node: crashed (every process killed, link down; 'link $node up' brings the link back)"
}

bytes() {
  need_root
  local node=${args[0]:-}
  [[ -n $node ]] || die "bytes NODE"
  ns_of "$node" >/dev/null || exit $?
  ip -n "$name-sw" -s -j link show "p-$node" |
    /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'
}

case $cmd in
  up) up ;;
  down) down ;;
  status) status ;;
  exec) node_exec ;;
  link) link ;;
  cut) cut_pair add ;;
  uncut) cut_pair del ;;
  throttle) throttle ;;
  crash) crash ;;
  bytes) bytes ;;
  *) die "unknown command '$cmd' (up, down, status, exec, link, cut, uncut, throttle, crash, bytes; --help)" ;;
esac
