#!/usr/bin/env bash
# Every tool the docs name still runs (CI's "tools" leg, launch/test.sh): a bench script nothing
# runs rots unseen (bench/fuzz.sh stopped linking once and no test noticed). Two parts:
#  1. every script of bench/ and its folders with a command line: executable (with a #! line),
#     --help exits 0 and prints its usage on stdout (bench/lib.sh, sourced, and bench/accuracy/run_metrics.py, imported, have
#     none);
#  2. the cheapest real invocation of each tool that no CTest test runs (the others are listed in
#     bench/README.md, "Which test runs which tool"): bench/fuzz.sh builds every fuzz target with
#     clang and fuzzes each for --fuzz-seconds; bench/perf/ab_trajectory.sh and bench/perf/ps_ab.sh
#     compare the build with itself on a tiny run (both must say identical / print their table);
#     bench/perf/link_plan.sh (and link_plan_median.py over its output, eager_ab.sh's two runs of it)
#     and bench/faults/cross_node.sh on a namespace cluster, at their smallest (skipped where
#     namespaces cannot be made: their exit 4).
# Needs the release build (launch/build.sh release). Prints one line per tool and "tools: N
# passed, M failed"; exit 1 when one failed.
#   bench/check_tools.sh [--fuzz-seconds 3] [--build build/release] [--help-only]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_opt --fuzz-seconds fuzz_seconds 3
bench_opt --build build build/release
help_only=0
args=()
for a in "$@"; do
  if [[ $a == --help-only ]]; then help_only=1; else args+=("$a"); fi
done
bench_parse "[--fuzz-seconds S] [--build DIR] [--help-only]" ${args[@]+"${args[@]}"}
passed=0 failed=0
log=$(mktemp -d /tmp/check_tools.XXXXXX)
result() {  # result NAME RC WHAT
  if (($2 == 0)); then
    passed=$((passed + 1)); printf 'ok    %-34s %s\n' "$1" "$3"
  else
    failed=$((failed + 1)); printf 'FAIL  %-34s %s (rc %d; log %s)\n' "$1" "$3" "$2" "$log/$(basename "$1").log"
  fi
}

for f in bench/*.sh bench/*/*.sh bench/*/*.py; do
  case $f in bench/lib.sh | bench/accuracy/run_metrics.py) continue ;; esac
  run=(bash "$f"); [[ $f == *.py ]] && run=(/usr/bin/python3 "$f")
  [[ $f == bench/report_screenshot.sh ]] && run=(sh "$f")
  out=$log/$(basename "$f").log
  rc=0
  timeout 60 "${run[@]}" --help >"$out" 2>&1 </dev/null || rc=$?
  ((rc != 0)) || grep -qi '^usage' "$out" || rc=99  # no usage line: the help says nothing
  # The docs run them as commands (bench/faults/goodput.sh ...): a script with a #! line and
  # without its mode bit fails there. (Python modules without one run as /usr/bin/python3 FILE.)
  if [[ ! -x $f ]] && [[ $(head -c 2 "$f") == '#!' ]]; then
    echo "$f: not executable (git update-index --chmod=+x)" >>"$out"; rc=98
  fi
  result "$f" "$rc" "--help"
done

if ((!help_only)); then
  bin=$build/mpi_trainer ps_bench=$build/bench/ps_bench
  [[ -x $bin && -x $ps_bench ]] || bench_usage_error "no release build in $build (launch/build.sh release)"
  rc=0
  bench/fuzz.sh --seconds "$fuzz_seconds" >"$log/fuzz.sh.log" 2>&1 || rc=$?
  result bench/fuzz.sh "$rc" "every target built and fuzzed ${fuzz_seconds} s"
  rc=0
  "$bin" gen-data "$log/data" --train 256 --test 256 --seed 3 >/dev/null
  bench/perf/ab_trajectory.sh "$bin" "$bin" --steps 4 --model resnet8 --data "$log/data" >"$log/ab_trajectory.sh.log" 2>&1 || rc=$?
  ((rc != 0)) || grep -q '^all identical$' "$log/ab_trajectory.sh.log" || rc=99
  result bench/perf/ab_trajectory.sh "$rc" "the build against itself, resnet8, 4 steps"
  rc=0
  bench/perf/ps_ab.sh "$ps_bench" "$ps_bench" --rounds 1 --steps 200 --model resnet8 --configs "2/1/shm" \
    >"$log/ps_ab.sh.log" 2>&1 || rc=$?
  ((rc != 0)) || grep -q 'new/old' "$log/ps_ab.sh.log" || rc=99
  result bench/perf/ps_ab.sh "$rc" "ps_bench against itself, 2 workers, 200 steps"
  rc=0
  bench/perf/link_plan.sh --rates 50 --shards 1 --workers 1 --precisions fp32 --seconds 2 \
    --out "$log/link_plan.json" >"$log/link_plan.sh.log" 2>&1 || rc=$?
  ((rc != 0)) || grep -q '^worst error' "$log/link_plan.sh.log" || rc=99
  if ((rc == 4)); then echo "skip  bench/perf/link_plan.sh             no network namespaces here"; else
    result bench/perf/link_plan.sh "$rc" "50 Mbit/s, 1 shard, 1 worker"
    # Its medians over runs, here over the same run twice.
    rc=0
    /usr/bin/python3 bench/perf/link_plan_median.py "$log/link_plan.json" "$log/link_plan.json" \
      >"$log/link_plan_median.py.log" 2>&1 || rc=$?
    ((rc != 0)) || grep -q '^2 run(s); within 15%: [01] of 1 points' "$log/link_plan_median.py.log" || rc=99
    result bench/perf/link_plan_median.py "$rc" "the medians of link_plan.sh's run"
    rc=0
    bench/perf/eager_ab.sh --rates 50 --shards 1 --precisions fp32 --workers 1 --runs 1 --seconds 2 \
      >"$log/eager_ab.sh.log" 2>&1 || rc=$?
    ((rc != 0)) || grep -q '^1 run(s) each, alternated; steps/s eager over rendezvous' "$log/eager_ab.sh.log" || rc=99
    result bench/perf/eager_ab.sh "$rc" "50 Mbit/s, 1 worker, eager and rendezvous"; fi
  rc=0
  bench/faults/cross_node.sh --builds default --kills 0 --runs 0 >"$log/cross_node.sh.log" 2>&1 || rc=$?
  ((rc != 0)) || grep -q 'default: exit 0, 200 steps' "$log/cross_node.sh.log" || rc=99
  if ((rc == 4)); then echo "skip  bench/faults/cross_node.sh          no network namespaces here"; else
    result bench/faults/cross_node.sh "$rc" "the default build: the quickstart's fault across 4 nodes"; fi
fi
echo "tools: $passed passed, $failed failed"
((failed == 0))
