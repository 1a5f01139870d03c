#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs the whole test suite: the release
# build (CUDA compiled when nvcc is present; CUDA tests skip without a GPU), then the unit suite
# again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh
jobs=$(nproc)
# Each leg's build and test seconds, and every test's time (CTest's JUnit files), are printed at
# the end: tests/README.md keeps the budget they are checked against.
times=()
leg() {  # leg NAME SECONDS_BUILD SECONDS_TESTS
  times+=("$(printf '%-9s build %4d s, tests %4d s' "$1" "$2" "$3")")
}

echo "== release build and full suite"
t=$SECONDS
launch/build.sh release
b=$((SECONDS - t)); t=$SECONDS
ctest --preset release -j "$jobs" --output-junit "$PWD/build/release/junit.xml"
leg release $b $((SECONDS - t))

echo "== tools: every bench script's --help, the fuzz targets built and fuzzed, the A/B tools on a tiny run"
# A tool the docs name must not break unseen (bench/check_tools.sh): it needs the release build.
t=$SECONDS
bench/check_tools.sh --fuzz-seconds 3
leg tools 0 $((SECONDS - t))

echo "== AddressSanitizer + UBSan build, and the ULFM build (Open MPI 5 with --with-ft ulfm, launch/setup.sh --mpi ulfm)"
# Sanitizer: only what its tests run (the unit suite and the trainer; no benchmarks): CI's time limit.
t=$SECONDS
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs" --target mt_unit_tests mpi_trainer
leg asan $((SECONDS - t)) 0
# ULFM: the same test scripts and assertions as the release leg's fault, chaos and launcher suites,
# against the MPI that reports failed processes (tests/CMakeLists.txt starts them with --with-ft
# ulfm; the launcher's test too), with the checks only ULFM can meet where a test sees a ULFM build
# (detection far below --failure-timeout), and slurm_ulfm: train.sbatch starting this build with
# mpirun inside a Slurm allocation. CUDA is left out of this build: these suites run on the CPU.
# restart_loop_start_timeout is left to the release leg: it runs the restart loop on stand-in
# commands (no MPI, no trainer build), so here it would repeat the same run (24 s).
t=$SECONDS
launch/setup.sh --mpi ulfm
cmake --preset ulfm -DMT_WITH_CUDA=OFF >/dev/null
cmake --build --preset ulfm -j "$jobs" --target mpi_trainer mt_fsync_fault mt_witness_ulfm
leg ulfm $((SECONDS - t)) 0

echo "== the sanitizer's unit suite (one core) beside the ULFM fault, chaos and launcher suites"
# Side by side as in the release leg: each ULFM test takes both cores' share and leaves a light
# test room beside it (tests/README.md, "What runs beside what"); the unit cases are all light. The
# ULFM tests labelled `alone` run after, by themselves.
t=$SECONDS
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --preset asan -j 1 --output-junit "$PWD/build/asan/junit.xml" >build/asan/ctest.log 2>&1 &
asan_pid=$!
ulfm_tests=(-L 'fault|chaos|launcher' -E '^restart_loop_start_timeout$')
ulfm_rc=0 asan_rc=0
ctest --preset ulfm "${ulfm_tests[@]}" -LE '^alone$' -j "$jobs" --output-junit "$PWD/build/ulfm/junit.xml" || ulfm_rc=$?
wait "$asan_pid" || asan_rc=$?
echo "-- the sanitizer's unit suite (build/asan/ctest.log):"
cat build/asan/ctest.log
((asan_rc == 0)) || { echo "the sanitizer's unit suite failed (rc $asan_rc)"; exit 1; }
((ulfm_rc == 0)) || { echo "the ULFM suites failed (rc $ulfm_rc)"; exit 1; }
leg "asan+ulfm" 0 $((SECONDS - t))
t=$SECONDS
ctest --preset ulfm "${ulfm_tests[@]}" -L '^alone$' -j "$jobs" --output-junit "$PWD/build/ulfm/junit-alone.xml"
leg "ulfm" 0 $((SECONDS - t))

echo "== times (the budget: tests/README.md)"
printf "%s\n" "${times[@]}" "total     $SECONDS s"
/usr/bin/python3 tests/ctest_times.py build/release build/asan build/ulfm
