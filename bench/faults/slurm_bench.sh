#!/usr/bin/env bash
# Preemption on the local Slurm cluster (slurm/local-cluster), repeated: each round is one run of
# the slurm tests' scenarios, on a fresh cluster:
#   reclaim  slurm/train.sbatch, a spot node reclaimed by the hidden partition: SIGUSR1,
#            checkpoint, exit 75, requeue, resume (figure: preemption signal -> training again)
#   down     slurm/hetjob.sbatch, a spot node set DOWN with no notice: the heterogeneous job is
#            ended and requeued, resumes (figure: node DOWN -> training again)
#   kill-ps  slurm/train.sbatch, the parameter server SIGKILLed: restarted inside the allocation
#            from the newest periodic checkpoint (figure: PS killed -> training again, steps lost)
# and prints each round's figures, then the medians and the worst steps lost.
#   bench/faults/slurm_bench.sh [ROUNDS (default 3)]          (needs root and Slurm: launch/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_arg rounds 3
bench_parse "[ROUNDS]" "$@"
bench_env
for ((r = 1; r <= rounds; r++)); do
  for how in reclaim down kill-ps; do
    template=train.sbatch; [[ $how == down ]] && template=hetjob.sbatch
    bash tests/test_slurm_preempt.sh "$PWD/$trainer" "$template" "$how" > "$dir/$how-$r.txt" 2>&1 ||
      { cat "$dir/$how-$r.txt"; echo "round $r ($how) failed" >&2; exit 1; }
    grep '^figure:' "$dir/$how-$r.txt" | sed "s/^/round $r $how: /"
  done
done
/usr/bin/python3 - "$dir" <<'PY'
import glob, re, statistics, sys
for how, what in (("reclaim", "preemption signal"), ("down", "node DOWN"), ("kill-ps", "PS SIGKILLed")):
    t, lost = [], []
    for f in sorted(glob.glob(f"{sys.argv[1]}/{how}-*.txt")):
        m = re.search(r"training again ([0-9.]+) s.*steps lost (\d+)", open(f).read())
        t.append(float(m.group(1))); lost.append(int(m.group(2)))
    print(f"{how}: {what} -> training again: median {statistics.median(t):.1f} s "
          f"(min {min(t):.1f}, max {max(t):.1f}, {len(t)} runs); steps lost: max {max(lost)} "
          f"(checkpoint interval 100)")
PY
