#!/usr/bin/env bash
# Fuzzes the parsers of files and messages a user or a peer hands the trainer (issue 45) with
# clang's libFuzzer under AddressSanitizer + UBSan: each target in tests/fuzz/ is compiled here
# from its sources (clang instruments them; the project's own build stays GCC), seeded with its
# corpus (tests/fuzz/corpus/TARGET: the shipped tables, real Fashion-MNIST headers, a CIFAR-10
# layout, protocol headers, a small checkpoint) and run for the time given. Prints a table of
# executions, new inputs and crashes per target; a crash's input is kept in bench/fuzz-findings/TARGET/ (add it to the
# corpus once fixed: CI replays every corpus, tests/CMakeLists.txt). Installs clang when missing.
# --keep-going fuzzes past findings (libFuzzer's -fork=1 -ignore_crashes=1 -ignore_timeouts=1): the
# checkpoint target's first libhdf5 hang otherwise ends its run within seconds.
#   bench/fuzz.sh [--seconds 60] [--targets "tables dataset header checkpoint"] [--keep-going]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_opt --seconds seconds 60
bench_opt --targets targets "tables dataset header checkpoint"
keep_going=()
args=()
for a in "$@"; do
  if [[ $a == --keep-going ]]; then keep_going=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1); else args+=("$a"); fi
done
bench_parse "[--seconds S] [--targets LIST] [--keep-going]" ${args[@]+"${args[@]}"}
bench_env
if ! command -v clang++ >/dev/null; then
  sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
generated=build/release/src/generated  # plan/revocation_gce.hpp, written by the release build
[[ -f $generated/plan/revocation_gce.hpp ]] || { echo "build first: launch/build.sh release" >&2; exit 1; }
s=mpi_trainer
declare -A sources=(
  [tables]="$s/app/emulation.cpp $s/plan/cost.cpp $s/plan/table_file.cpp $s/plan/revocation_model.cpp $s/plan/revocation_bands.cpp $s/ps/inject/fault_injection.cpp $s/ps/resilience/notices.cpp $s/core/error.cpp"
  [dataset]="$s/data/dataset.cpp $s/core/error.cpp -lz"
  [header]=""
  [checkpoint]="ckpt/checkpoint.cpp ckpt/contained.cpp ckpt/hdf5_util.cpp ckpt/image.cpp ckpt/publish.cpp ckpt/state.cpp $s/core/error.cpp $s/core/atomic_file.cpp $s/core/tensor.cpp $(pkg-config --cflags --libs hdf5) -lz"
)
common=(-std=c++20 -O1 -g -fno-sanitize-recover=undefined "-ffile-prefix-map=$PWD/=")
cc=(clang++)
command -v ccache >/dev/null && cc=(env CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true ccache clang++)
printf '%-8s %12s %10s %8s %9s  %s\n' target executions exec/s "new" crashes "seconds"
for t in $targets; do
  [[ -v "sources[$t]" ]] || bench_usage_error "unknown target '$t' (tables, dataset, header, checkpoint)"
  # Each source compiled on its own (through ccache when installed, as the project's builds: a
  # second run, in any clone, compiles nothing), then linked with libFuzzer's main.
  objs=() cflags=() ldflags=()
  # shellcheck disable=SC2086  # the source list splits on purpose
  for x in ${sources[$t]}; do
    case $x in *.cpp) ;; -I* | -D*) cflags+=("$x") ;; *) ldflags+=("$x") ;; esac
  done
  mkdir -p "$dir/obj_$t"
  # shellcheck disable=SC2086
  for src in "tests/fuzz/fuzz_$t.cpp" $(printf '%s\n' ${sources[$t]} | grep '\.cpp$'); do
    obj=$dir/obj_$t/$(tr / _ <<<"$src").o
    "${cc[@]}" "${common[@]}" -fsanitize=fuzzer-no-link,address,undefined -I. -I$s -I$generated \
      ${cflags[@]+"${cflags[@]}"} -c "$src" -o "$obj"
    objs+=("$obj")
  done
  clang++ "${common[@]}" -fsanitize=fuzzer,address,undefined "${objs[@]}" ${ldflags[@]+"${ldflags[@]}"} -o "$dir/fuzz_$t"
  mkdir -p "$dir/corpus_$t" "$dir/crashes_$t"
  cp tests/fuzz/corpus/"$t"/* "$dir/corpus_$t/"
  rc=0
  leaks=1; [[ $t == checkpoint ]] && leaks=0  # libhdf5 keeps global allocations for the process's life
  (cd "$dir/crashes_$t" && "$dir/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -detect_leaks=$leaks -rss_limit_mb=4096 ${keep_going[@]+"${keep_going[@]}"} "$dir/corpus_$t" >"$dir/log_$t" 2>&1) || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log_$t")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log_$t")
  added=$(sed -n 's/^stat::new_units_added: *//p' "$dir/log_$t")
  if [[ -z $runs ]]; then  # fork mode prints no final stats: its last "#N ... exec/s: R" line
    last=$(grep -E '^#[0-9]+:? ' "$dir/log_$t" | tail -1)
    runs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
    rate=$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$last")
    added=$(find "$dir/corpus_$t" -type f | wc -l)
  fi
  crashes=$(find "$dir/crashes_$t" -type f | wc -l)
  if ((crashes > 0 || rc != 0)); then
    mkdir -p "bench/fuzz-findings/$t"
    cp "$dir/crashes_$t"/* "bench/fuzz-findings/$t/" 2>/dev/null || true
    grep -m3 -E "ERROR|runtime error|deadly" "$dir/log_$t" >&2 || tail -5 "$dir/log_$t" >&2
  fi
  printf '%-8s %12s %10s %8s %9s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "${added:-?}" "$crashes" "$seconds"
done
