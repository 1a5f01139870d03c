#!/usr/bin/env bash
# A replica still in the parameter server's kernel when its node is cut off (ULFM build). A send
# completes once the kernel holds its bytes, not once they crossed the link; a standby's replica
# that "has left" may still sit in the parameter server's socket buffer. The workers' push journals
# (ps/resilience/push_journal.hpp) must keep every push the standby's own replica does not hold:
# the replies tell them only the replica every standby said, in its pushes, that it holds whole.
# A cluster of network namespaces (launch/netns-cluster/cluster.sh: a login node and 4 nodes,
# links at 200 Mbit/s), 1 PS (n1) + 3 workers (rank 1 on n2, the standby; ranks 2, 3 on n3, n4),
# the parameter server's node with 4 MB socket send buffers from the start (net.ipv4.tcp_wmem, as
# sites tune it for fast links: the kernel takes whole replicas at once). Once the job has trained
# 60 steps, the parameter server's packets to the standby are dropped (one way: its pushes still
# arrive); 1.2 s later (more than a replica interval of updates) the parameter server's node loses
# its link, healed 6 s later. The survivors take it over from the standby's replica, older than
# what the parameter server had sent when it was cut off, and replay their journals. Checked: exit 0
# in one attempt, one takeover, from a replica no newer than the one-way cut, at least a replica
# interval of updates between the cut and the link's loss, 0 updates lost (the takeover's count)
# and the whole history checked (bench/faults/history_check.py: every acknowledged push in it
# once, no step of the replayed range empty).
# Before the replies waited for the standby's word, every run of this lost acknowledged pushes
# (3-4 counted by the takeover, up to 7 in the history). The default build has no takeover:
# skipped there.
# Exit 77 (skipped) where network namespaces cannot be made (not root, no CAP_NET_ADMIN).
# Usage: test_netns_replica_in_flight.sh MPIEXEC TRAINER
set -uo pipefail
trainer=$2
unset OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include  # every channel on the nodes' eth0
repo=$(cd "$(dirname "$0")/.." && pwd)
cluster=$repo/launch/netns-cluster/cluster.sh
grep -q '^failure detection: ULFM' <<<"$("$trainer" --version)" ||
  { echo "SKIPPED: a takeover inside the job (the push journal) needs the ULFM build"; exit 77; }
name=r$(($$ % 100000))
dir=$(mktemp -d)
trap '"$cluster" down --name "$name" >/dev/null 2>&1; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [[ -f $dir/out ]] && tail -40 "$dir/out"; exit 1; }

out=$("$cluster" up --name "$name" --nodes 4 --rate 200mbit 2>&1)
case $? in
  0) ;;
  4) echo "SKIPPED: $out"; exit 77 ;;
  *) fail "cluster.sh up: $out" ;;
esac
state=/run/mt-netns/$name
ip netns exec "$name-n1" sysctl -q -w net.ipv4.tcp_wmem="4096 4194304 4194304" || fail "sysctl tcp_wmem on n1"
"$trainer" gen-data "$dir/data" --train 2048 --test 256 --seed 3 >/dev/null || fail "gen-data"
steps=300
step_now() { grep -o '"global_step":[0-9]*' "$dir/m.jsonl" 2>/dev/null | tail -1 | cut -d: -f2; }

(  # the nemesis: n1 -> n2 dropped, then n1's link down; both healed 6 s later
  for ((i = 0; i < 3000; i++)); do
    grep -q '"global_step":[6-9][0-9]' "$dir/m.jsonl" 2>/dev/null && break
    sleep 0.02
  done
  "$cluster" cut n1 n2 --oneway --name "$name" >/dev/null && echo "$(step_now)" >"$dir/cut"
  sleep 1.2
  "$cluster" link n1 down --name "$name" >/dev/null && echo "$(step_now)" >"$dir/down"
  sleep 6
  "$cluster" link n1 up --name "$name" >/dev/null
  "$cluster" uncut n1 n2 --name "$name" >/dev/null
) &
nemesis=$!
rc=0
t0=$SECONDS
MT_MPI=ulfm timeout 300 "$cluster" exec login --name "$name" -- \
  "$repo/launch/mpirun.sh" --hostfile "$state/hostfile" --launch-agent "$state/agent" --iface eth0 --allow-root \
  --grace 3 --np 4 --trainer "$trainer" -- --data "$dir/data" --model resnet8 --batch-size 32 \
  --lr-schedule constant --lr 0.05 --augment off --train-steps $steps --ckpt-dir "$dir/ck" --ckpt-every-steps 50 \
  --log-every-steps 1 --failure-timeout 3 --emulate-device k80 --emulate-scale 0.5 --metrics "$dir/m.jsonl" \
  --push-log "$dir/push.csv" >"$dir/out" 2>&1 || rc=$?
wait $nemesis
echo "replica in flight: exit $rc in $((SECONDS - t0)) s"
[[ -f $dir/cut && -f $dir/down ]] || fail "the job ended before the cut"
((rc == 0)) || fail "exit $rc, expected 0"
/usr/bin/python3 - "$dir/m.jsonl" "$steps" "$(cat "$dir/cut")" "$(cat "$dir/down")" <<'PY' || fail "metrics"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
steps, cut, down = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = [e for e in ev if e["event"] == "summary"]
assert len(s) == 1 and s[0]["global_step"] == steps and s[0]["exit_code"] == 0 and s[0]["attempts"] == 1, s
t = [e for e in ev if e["event"] == "ps_takeover"]
assert len(t) == 1, f"{len(t)} takeovers"
t = t[0]
interval = 10  # --replica-interval's default
assert down - cut >= interval, f"only {down - cut} updates between the cut (step {cut}) and the link's loss ({down})"
assert t["replica_step"] <= cut, f"the standby's replica of step {t['replica_step']} is newer than the cut ({cut})"
assert t["lost_updates"] == 0, t
print(f"ok: cut at step {cut}, link lost at {down}; taken over from the replica of step {t['replica_step']}, "
      f"{t['replayed']} journaled pushes replayed, 0 lost")
PY
/usr/bin/python3 "$repo/bench/faults/history_check.py" "$dir/push.csv" --metrics "$dir/m.jsonl" \
  --json "$dir/history.json" >"$dir/history" 2>&1 || { cat "$dir/history"; fail "history check"; }
# A push the cut-off parameter server applied but whose reply never came (the standby's, after
# the one-way cut) is replayed at a step it can have made (replay_order): no step of the replayed
# range is empty either.
/usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["counts"]
assert c["acknowledged_lost"] == 0 and c["takeover_lost_updates"] == 0, c' "$dir/history.json" ||
  { cat "$dir/history"; fail "updates lost in the takeover"; }
echo "ok: $(head -1 "$dir/history")"
latest=$(cat "$dir/ck/LATEST" 2>/dev/null)
"$trainer" ckpt verify "$dir/ck/${latest:-none}" >/dev/null || fail "the final checkpoint ${latest:-(none)} does not verify"
echo "PASS: a replica still in the cut-off parameter server's kernel costs no acknowledged push"
