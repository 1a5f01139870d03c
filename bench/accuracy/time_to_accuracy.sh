#!/usr/bin/env bash
# Do N workers reach the target accuracy sooner than one? (issue 19). Virtual-clock runs
# (--virtual-workers: real gradients on real data, every worker an emulated K80 on a virtual
# clock; evidence E) of 1, 2, 4 and 8 workers, each with the naive asynchronous policy (the rate
# and momentum of one worker, TensorFlow's behaviour in the paper) and with the default one; 4
# workers with one revoked (SIGKILL) at 25% of the run; and the paper's Fig. 5 schedule (start
# with one worker, one more every quarter of the run). Every configuration over --seeds seeds.
#
#   bench/accuracy/time_to_accuracy.sh [--seeds 3] [--epochs 20] [--workers "1 2 4 8"] [--jobs 2]
#                             [--model resnet8] [--batch-size 128] [--data DIR] [--out DIR]
#                             [--policy "FLAGS"] [--steps N] [--trainer PATH]
#
# Prints, per configuration: final test accuracy (mean of the seeds) and its difference to one
# worker at the same global steps; virtual time until the test accuracy first reaches one
# worker's final accuracy minus 1 point, and the speed-up over one worker; the cluster's cost.
# Writes table.md, results.json and accuracy_vs_time.{png,svg} to --out (default
# bench/results/time_to_accuracy) and checks the goals (4 workers at most 1.0 point lower and at
# least 3.5x sooner, 8 workers 2.0 points and 6.5x; default policy). Exit 1 when one is missed.
# The learning-rate schedule is the paper's shape: x0.1 at 50% and 75% of the steps (its 32K/48K
# of 64K). --policy: the flags of the "default" column (default: none, i.e. the trainer's own
# defaults). --jobs runs that many trainers at once, one thread each. --steps: that many global
# steps instead of --epochs (a smoke test).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
bench_opt --seeds seeds 3
bench_opt --epochs epochs 20
bench_opt --workers workers "1 2 4 8"
bench_opt --jobs jobs 2
bench_opt --model model resnet8
bench_opt --batch-size batch 128
bench_opt --data data /usr/share/datasets/fashion-mnist
bench_opt --out out bench/results/time_to_accuracy
bench_opt --policy policy ""
bench_opt --steps steps ""
bench_opt --trainer trainer_arg ""
bench_parse "[--seeds N] [--epochs N] [--workers LIST] [--jobs N] [--model M] [--batch-size B] [--data DIR] \
[--out DIR] [--policy FLAGS] [--steps N] [--trainer PATH]" "$@"
bench_env
[[ -n $trainer_arg ]] && trainer=$trainer_arg
mkdir -p "$out"
# Training images: Fashion-MNIST 60000, CIFAR-10 50000.
train_images=60000
compgen -G "$data/data_batch_*.bin" >/dev/null && train_images=50000
[[ -n $steps ]] || steps=$(((epochs * train_images + batch - 1) / batch))
q=$((steps / 4))
eval_every=$((steps / 20 > 0 ? steps / 20 : 1))
common=(--data "$data" --model "$model" --batch-size "$batch" --train-steps "$steps" --threads 1 --lr 0.1
        --lr-schedule "step:$((steps / 2)),$((steps * 3 / 4))" --eval-every-steps "$eval_every"
        --log-every-steps "$eval_every" --quiet --worker-types k80 --emulate-device k80)
naive=(--lr-scaling none --momentum-correction none)
read -r -a default <<<"$policy"
# One line per run: NAME ARGS... (the policy's flags spelled out)
runs=$dir/runs.txt
for ((s = 1; s <= seeds; s++)); do
  for n in $workers; do
    if ((n == 1)); then
      # one worker: the single-process trainer's update (heavy-ball momentum, bit-identical)
      echo "w1 s$s --virtual-workers 1 --seed $s --momentum-correction none"
    else
      echo "w$n-naive s$s --virtual-workers $n --seed $s ${naive[*]}"
      echo "w$n-default s$s --virtual-workers $n --seed $s ${default[*]}"
    fi
  done
  for p in naive default; do
    flags=("${naive[@]}")
    [[ $p == default ]] && flags=("${default[@]}")
    echo "w4-revoked-$p s$s --virtual-workers 4 --seed $s --revoke rank=4@step=$q ${flags[*]}"
    echo "fig5-$p s$s --virtual-workers 1 --seed $s --virtual-joins k80@step=$q,k80@step=$((2 * q)),k80@step=$((3 * q)) ${flags[*]}"
  done
done | sed 's/ *$//' >"$runs"  # xargs -L joins a line ending in a blank to the next
echo "time_to_accuracy: $(wc -l <"$runs") virtual runs of $steps steps ($epochs epochs, $model, batch $batch), $jobs at a time; results in $out"
t0=$SECONDS
bench_trainer_runs "$runs" "$jobs" time_to_accuracy "${common[@]}"
echo "time_to_accuracy: runs took $((SECONDS - t0)) s"
/usr/bin/python3 bench/accuracy/time_to_accuracy.py "$out" "$seeds" "$workers" "$steps" "$model" "$epochs" "$policy"
