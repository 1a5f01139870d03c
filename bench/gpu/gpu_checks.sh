#!/usr/bin/env bash
# The CUDA backend's checks and figures (issue 5), run ON the GPU machine from the repository
# root, with the bundle that bench/gpu/gpu_bundle.sh made here in .gpu/ (carried along):
#
#   bash bench/gpu/gpu_checks.sh tests variants speed ps4   # about 9 minutes on an H100
#   bash bench/gpu/gpu_checks.sh full                        # the paper's 64k-step single-GPU run
#   MT_CUDA_GRAPH=1 bash bench/gpu/gpu_checks.sh speed full  # the same with CUDA graphs, if variants says they pay
#   bash bench/gpu/gpu_checks.sh env tests:100 variants:90 full:240   # STAGE:SECONDS stops a stage at
#                                                        # that limit and goes on with the next
#
# Sizes (environment): MT_GPU_ROUNDS (variants, default 3), MT_GPU_SPEED_ROUNDS (speed, 6),
# MT_GPU_PS4_STEPS (2000), MT_GPU_FULL_STEPS (64000).
# Stages:
#   env    the GPU, the driver, and any library the programs cannot find
#   tests  the consistency table and whole-network checks (mt_cuda_tests), FP32 and TF32
#   variants  step_bench side by side: the next batch uploaded at its step's start, uploaded
#          while the previous step computes (the default), and that plus CUDA graphs
#          (MT_CUDA_GRAPH=1); alternating rounds, medians and ratios
#   speed  training images/s vs PyTorch eager, resnet32 and resnet32-t2t, batch 128, side by side
#          (bench/perf/speed_vs_pytorch.py --device cuda)
#   ps4    1 parameter server + 4 workers sharing the GPU (mpirun -np 5): images/s
#   full   64,000 steps of batch 128, resnet32, Fashion-MNIST: wall time and test accuracy
#   summary  the lines that carry the figures, from the logs of the stages above
# Logs go to gpu-results/, and all of them, packed, to $OUT/gpu-results.tgz after every stage
# (the device tool's output folder brings back only a few files).
set -uo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  echo "usage: bench/gpu/gpu_checks.sh [STAGE[:SECONDS]]...   (stages: env tests variants speed ps4 full summary)"
  sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
fi
cd "$(dirname "$0")/../.."
res=$PWD/gpu-results
mkdir -p "$res"
pack() { [[ -n ${OUT:-} ]] && tar -C "$res/.." -czf "$OUT/gpu-results.tgz" "$(basename "$res")"; return 0; }
# STAGE:SECONDS: run that stage alone under a time limit (its whole process group), then go on.
if [[ $* == *:* ]]; then
  for arg in "$@"; do
    if [[ $arg == *:* ]]; then
      timeout -k 10 "${arg#*:}" bash "$0" "${arg%%:*}"
      rc=$?
      ((rc == 124 || rc == 137)) && echo "gpu_checks: stage ${arg%%:*} stopped at its ${arg#*:} s limit" | tee -a "$res/limits.txt"
    else
      bash "$0" "$arg"
    fi
    pack
  done
  exit 0
fi
bundle=${MT_GPU_BUNDLE:-.gpu}
R=/tmp/mt-gpu/root
if [[ ! -x $R/bin/mpi_trainer ]]; then
  mkdir -p /tmp/mt-gpu && tar -C /tmp/mt-gpu -xJf "$bundle/mt-gpu.tar.xz" || { echo "gpu_checks: no bundle in $bundle (bench/gpu/gpu_bundle.sh)" >&2; exit 1; }
fi
# CUDA's libraries from the machine: the toolkit's folder, else PyTorch's wheels.
cudalibs=
for lib in libcudart.so.13 libcudnn.so.9 libcublas.so.13; do
  d=$( { ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu 2>/dev/null;
         python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null |
           while read -r sp; do ls -d "$sp"/nvidia/*/lib 2>/dev/null; done; } |
       while read -r cand; do [[ -e $cand/$lib ]] && { echo "$cand"; break; }; done)
  [[ -n $d ]] || { echo "gpu_checks: $lib not found on this machine" >&2; exit 1; }
  cudalibs=$cudalibs:$d
done
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu${cudalibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$R/usr PMIX_PREFIX=$R/usr/lib/x86_64-linux-gnu/pmix2 PATH=$R/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
trainer=$R/bin/mpi_trainer
data=$bundle/fashion-mnist
[[ -d $data ]] || { data=/tmp/mt-gpu/gen; [[ -d $data ]] || "$trainer" gen-data "$data" --train 50000 --test 10000 >/dev/null; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; echo "commit $(cat "$bundle/commit" 2>/dev/null)";
  echo "cuda libs:${cudalibs}"; } | tee "$res/machine.txt"

for stage in "$@"; do
  case $stage in
    env)
      for b in mpi_trainer mt_cuda_tests step_bench; do ldd "$R/bin/$b" | grep -i "not found" | sed "s/^/$b: /"; done
      nvidia-smi 2>&1 | head -20
      python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1
      nproc; grep -m1 "model name" /proc/cpuinfo
      ;;
    tests)
      "$R/bin/mt_cuda_tests" 2>&1 | tee "$res/cuda_tests_fp32.log"
      MT_CUDA_TF32=1 "$R/bin/mt_cuda_tests" 2>&1 | tee "$res/cuda_tests_tf32.log"
      ;;
    variants)
      for model in resnet32 resnet32-t2t; do
        for round in $(seq "${MT_GPU_ROUNDS:-3}"); do
          for variant in off:0 on:0 on:1; do
            MT_CUDA_GRAPH=${variant#*:} "$R/bin/step_bench" --device cuda --model "$model" --steps 60 --warmup 10 \
              --overlap "${variant%:*}" | tail -1 | sed "s/^{/{\"graphs\": ${variant#*:}, /"
          done
        done
      done | tee "$res/variants.jsonl"
      python3 - "$res/variants.jsonl" <<'PY' | tee "$res/variants.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for model in sorted({r["model"] for r in runs}):
    med = {}
    for key in [("off", 0), ("on", 0), ("on", 1)]:
        v = [r["median_images_per_second"] for r in runs
             if r["model"] == model and (r["overlap"], r["graphs"]) == key]
        med[key] = statistics.median(v) if v else float("nan")
    base = med[("off", 0)]
    print(f"{model}: uploads at step start {base:.0f} img/s; overlapped {med[('on', 0)]:.0f} "
          f"({med[('on', 0)] / base:.3f}x); overlapped + graphs {med[('on', 1)]:.0f} ({med[('on', 1)] / base:.3f}x)")
PY
      ;;
    speed)
      for model in resnet32 resnet32-t2t; do
        PYTHONUNBUFFERED=1 python3 bench/perf/speed_vs_pytorch.py --device cuda --model "$model" --rounds "${MT_GPU_SPEED_ROUNDS:-6}" --per-round 20 \
          --warmup 10 --step-bench "$R/bin/step_bench" --python "$(command -v python3)" 2>&1 | tee "$res/speed_$model.log"
      done
      ;;
    ps4)
      # 1 PS + 4 workers on one GPU; the PS applies updates on its CPU.
      mpirun -np 5 --oversubscribe --bind-to none "$trainer" train --device cuda --data "$data" --model resnet32 \
        --train-steps "${MT_GPU_PS4_STEPS:-2000}" --batch-size 128 --eval-every-steps 0 --metrics "$res/ps4.jsonl" 2>&1 | tee "$res/ps4.log"
      ;;
    full)
      start=$SECONDS
      "$trainer" train --device cuda --data "$data" --model resnet32 --train-steps "${MT_GPU_FULL_STEPS:-64000}" \
        --batch-size 128 --log-every-steps 1000 --metrics "$res/full.jsonl" 2>&1 | tee "$res/full.log"
      echo "wall seconds, start to exit: $((SECONDS - start))" | tee -a "$res/full.log"
      ;;
    summary)
      # The lines that carry the figures, from whatever the stages left.
      cat "$res/machine.txt" "$res/limits.txt" 2>/dev/null
      for f in "$res"/cuda_tests_*.log; do [[ -f $f ]] && echo "$(basename "$f"): $(grep -E "test cases|assertions|FAILED|Skipped" "$f" | tail -3 | tr '\n' ' ')"; done
      cat "$res/variants.txt" 2>/dev/null
      grep -h '"summary"' "$res"/speed_*.log 2>/dev/null
      for f in ps4 full; do [[ -f $res/$f.log ]] && { echo "== $f"; grep -vE '^\s*$' "$res/$f.log" | tail -25; }; done
      ;;
    *) echo "gpu_checks: unknown stage '$stage' (env, tests, variants, speed, ps4, full, summary)" >&2; exit 2 ;;
  esac
  pack
done
