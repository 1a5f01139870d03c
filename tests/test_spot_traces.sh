#!/usr/bin/env bash
# bench/tables/spot_traces.py (issue 44) on a small repository made here in the layout of
# skypilot-org/spot-traces: the lifetimes it reads, its censoring and its Kaplan-Meier table
# against a hand calculation, and the commit the table names.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/t/preemption/1-node/aws-x"
# Ticks of 900 s (0.25 h). Zone a: up from tick 1 for 2 ticks (0.5 h, revoked), then from tick 4
# for 4 ticks (1 h, revoked). Zone b: up at the first tick (age unknown: left out), then from
# tick 3 for 2 ticks (0.5 h, revoked), then from tick 6 to the end (2 ticks: 0.5 h, censored).
echo '{"metadata": {"gap_seconds": 900}, "data": [0, 1, 1, 0, 1, 1, 1, 1, 0]}' > "$dir/t/preemption/1-node/aws-x/a_v100_1.json"
echo '{"metadata": {"gap_seconds": 900}, "data": [1, 0, 0, 1, 1, 0, 1, 1]}' > "$dir/t/preemption/1-node/aws-x/b_v100_1.json"
git -C "$dir/t" init -q
git -C "$dir/t" -c user.name=t -c user.email=t@t add -A
git -C "$dir/t" -c user.name=t -c user.email=t@t commit -qm traces
commit=$(git -C "$dir/t" rev-parse HEAD)
/usr/bin/python3 "$root/bench/tables/spot_traces.py" "$dir/t/.git" --files 'preemption/1-node/aws-x/*_v100_1.json' \
  --out "$dir/table.csv"
cat "$dir/table.csv"
grep -q "commit $commit" "$dir/table.csv"
grep -q "# 4 lifetimes, 3 ended by a revocation, 1 censored." "$dir/table.csv"
# Kaplan-Meier: at 0.5 h all 4 are at risk (the one censored at 0.5 h counts at its own age)
# and 2 are revoked: half; at 1 h 1 is at risk and revoked: all.
rows=$(grep -v '^#' "$dir/table.csv" | tr '\n' ' ')
[[ $rows == "0,0 0.5000,0.5000 1.0000,1.0000 " ]] || { echo "FAIL: rows '$rows'"; exit 1; }
# The table is a revocation model the trainer reads.
"$1" plan --workers 2 --worker-types v100 --steps 1000 --draws 5 --revocation-model "$dir/table.csv" > "$dir/plan.txt"
grep -q "revocations: $dir/table.csv" "$dir/plan.txt" || { cat "$dir/plan.txt"; exit 1; }
# A trace that is not single-node (counts above 1) is refused.
echo '{"metadata": {"gap_seconds": 900}, "data": [0, 2, 1]}' > "$dir/t/preemption/1-node/aws-x/c_v100_1.json"
git -C "$dir/t" -c user.name=t -c user.email=t@t add -A
git -C "$dir/t" -c user.name=t -c user.email=t@t commit -qm more
if /usr/bin/python3 "$root/bench/tables/spot_traces.py" "$dir/t/.git" --files 'preemption/1-node/aws-x/*.json' 2> "$dir/err"; then
  echo "FAIL: a count of 2 was taken"; exit 1
fi
grep -q "holds 0 or 1, found 2" "$dir/err"
echo "ok: spot_traces.py: 4 lifetimes, the Kaplan-Meier table by hand, read by plan"
