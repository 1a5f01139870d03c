#!/usr/bin/env bash
# mpirun -np 1 mpi_trainer train: the single-server baseline under MPI finishes with a summary.
# Usage: test_mpirun_np1.sh MPIEXEC MPI_TRAINER
set -euo pipefail
mpiexec=$1 trainer=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$trainer" gen-data "$dir/data" --train 256 --test 64 >/dev/null
"$mpiexec" -np 1 "$trainer" train --model resnet8 --batch-size 32 --train-steps 4 --threads 1 \
  --data "$dir/data" --metrics "$dir/m.jsonl" > "$dir/out.txt" 2>&1 || { cat "$dir/out.txt"; exit 1; }
grep -q '^summary: {' "$dir/out.txt" || { echo "no summary line"; cat "$dir/out.txt"; exit 1; }
tail -n 1 "$dir/m.jsonl" | grep -q '"event":"summary"' || { echo "metrics do not end with the summary"; exit 1; }
# --num-ps must leave at least one worker: a usage error (exit 2) on every rank.
set +e
"$mpiexec" -np 2 --oversubscribe "$trainer" train --train-steps 1 --num-ps 2 --data "$dir/data" > "$dir/out2.txt" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] && grep -q "leaves no worker" "$dir/out2.txt" || { echo "--num-ps 2 of 2 not refused (rc $rc)"; cat "$dir/out2.txt"; exit 1; }
echo "mpirun -np 1: ok"
