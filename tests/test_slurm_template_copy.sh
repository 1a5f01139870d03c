#!/usr/bin/env bash
# A copied sbatch template runs (issue 63): mpi_trainer installed into a prefix (cmake --install),
# slurm/train.sbatch copied into a new folder outside the checkout and edited there (its job name),
# submitted with only the prefix's bin/ on PATH (no MT_TRAINER, no MT_SLURM_DIR): the copy finds
# job.sh in <prefix>/share/mpi_trainer/slurm through that mpi_trainer, trains to the end and writes
# its summary. Then a copy with nothing to find it by (no mpi_trainer on PATH) fails at once with
# the message that says how to point it at job.sh.
# Usage: test_slurm_template_copy.sh TRAINER BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/slurm_lib.sh" "$1"
build=$2
prefix=$dir/prefix
cmake --install "$build" --prefix "$prefix" >"$dir/install.log" 2>&1 || { cat "$dir/install.log"; fail "cmake --install"; }
[[ -x $prefix/share/mpi_trainer/slurm/job.sh && -x $prefix/share/mpi_trainer/launch/restart_loop.sh ]] ||
  fail "the install has no share/mpi_trainer/slurm/job.sh or launch/restart_loop.sh"
mkdir -p "$dir/my jobs"
sed 's/^#SBATCH --job-name=mpi_trainer$/#SBATCH --job-name=my-copy/' "$repo/slurm/train.sbatch" >"$dir/my jobs/train.sbatch"
grep -q '^#SBATCH --job-name=my-copy$' "$dir/my jobs/train.sbatch" || fail "the copy was not edited"
unset MT_TRAINER MT_SLURM_DIR
job=$(PATH=$prefix/bin:$PATH MT_TRAIN_STEPS=60 MT_CKPT_EVERY_STEPS=50 MT_CKPT_DIR="$dir/ck" \
      sbatch --parsable --chdir "$dir" --output "$dir/job.out" "$dir/my jobs/train.sbatch") || fail "sbatch"
[[ $(job_field "$job" JobName) == my-copy ]] || fail "job $job is not the edited copy ($(job_field "$job" JobName))"
wait_job "$job" COMPLETED 120
/usr/bin/python3 - "$dir/ck/metrics.jsonl" <<'PY' || fail "the copy's run"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
assert s["event"] == "summary" and s["global_step"] == 60, s
print(f"copied template: {s['global_step']} steps, {s['workers_end']} workers, exit {s['exit_code']}")
PY
# Nothing to find job.sh by: a clear refusal, no training started.
job2=$(PATH=/usr/bin:/bin sbatch --parsable --chdir "$dir" --output "$dir/lost.out" "$dir/my jobs/train.sbatch") || fail "sbatch (2)"
for ((i = 0; i < 150; i++)); do
  s=$(job_field "$job2" JobState)
  [[ $s == FAILED || $s == COMPLETED ]] && break
  sleep 0.2
done
[[ $s == FAILED ]] || fail "a copy that cannot find job.sh ended $s, not FAILED"
grep -q "train.sbatch: no job.sh in .*set MT_SLURM_DIR" "$dir/lost.out" || { cat "$dir/lost.out"; fail "no message saying how to find job.sh"; }
echo "a copy without mpi_trainer on PATH: $(head -n 1 "$dir/lost.out")"
echo "slurm_template_copy: ok"
