#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#   1. release build: every test (unit, end to end, crash, install);
#      each later stage's tree builds in the background meanwhile (below)
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build: every test
#   3. ThreadSanitizer build (clang): the tests of the concurrent parts
#   4. libFuzzer build (clang): each fuzzer for a bounded time on its corpus
# FUZZ_SECONDS (default 20) bounds each fuzzer.
#
#   scripts/test.sh            everything above (CI runs this)
#   scripts/test.sh --quick    the release build and its unit tier only (tests/tiers.txt):
#                              what to run before a commit, about a minute once built
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
scripts/install-deps.sh --test
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-20}
# Line tables only (-g1): backtraces and sanitizer reports keep file:line,
# and the optimised builds compile a quarter faster than with full -g.
opt_flags=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
stage_start=$SECONDS
# A fresh build tree has no record of how long each test takes, and ctest
# then starts them in the order they are defined: the longest ones (a
# minute and more) ran last and the stage waited for them alone. This seeds
# the record with the longest tests (seconds in a release build) so they
# start first; ctest replaces it with what it measures.
seed_test_costs() {
  local dir=$1/Testing/Temporary
  mkdir -p "$dir"
  [[ -f "$dir/CTestCostData.txt" ]] || cp tests/ctest-costs.txt "$dir/CTestCostData.txt"
}
stage() {
  if [[ -n "${stage_name:-}" ]]; then
    echo "== ${stage_name}: took $((SECONDS - stage_start)) s"
  fi
  stage_name=$1
  stage_start=$SECONDS
  echo "== $1"
}

# Each sanitizer and fuzz tree builds in the background while the stage
# before it runs its tests, at the idle scheduling class (CPU and disk), so
# it gets the CPU only when no test wants it (the release ctest run leaves a
# quarter of two cores idle); it still shares memory bandwidth, caches and
# the disk with them. The stage that needs the tree waits for the rest of
# its build. Measured on 2 cores: the release stage's tests took ~130 s
# longer and each later stage 50-90 s less, about even in all.
bg_pid="" bg_log="" bg_name="" s3dir=""
# On any exit: the background build (its own process group) and the S3
# server of the ThreadSanitizer stage go too.
cleanup() {
  if [[ -n "$bg_pid" ]]; then kill -- -"$bg_pid" 2> /dev/null || true; fi
  if [[ -n "$s3dir" ]]; then scripts/s3-test-server.sh stop "$s3dir" || true; fi
}
trap cleanup EXIT
start_background_build() {
  bg_name=$1
  shift
  bg_log=$(mktemp)
  set -m  # a process group of its own, which cleanup can end whole
  (
    chrt --idle --pid 0 "$BASHPID" > /dev/null
    ionice -c 3 -p "$BASHPID"
    "$@"
  ) > "$bg_log" 2>&1 &
  bg_pid=$!
  set +m
}
wait_background_build() {
  local started=$SECONDS
  if ! wait "$bg_pid"; then
    cat "$bg_log"
    echo "the ${bg_name} build failed"
    exit 1
  fi
  rm -f "$bg_log"
  bg_pid=""
  echo "(${bg_name} build: waited $((SECONDS - started)) s for the rest of it)"
}

# Debug keeps the assertions; -O1 (as AddressSanitizer's documentation
# advises) runs the suite about twice as fast as -O0 and still reports
# file:line from the line tables. Built with clang: the release stage
# builds with gcc, so both compilers see every line, and clang compiles
# this instrumented tree in about half gcc's time. The Python tests load
# the module into /usr/bin/python3, which does not start with the sanitizer
# runtimes: they run in the release stage, and the module is not built here.
build_asan() {
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCKPT_SANITIZE=address,undefined \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCKPT_BUILD_BENCHMARKS=OFF -DCKPT_BUILD_PYTHON=OFF
  cmake --build build-asan
}

# The save pipeline, commit protocol, backends, audits and the coordinator
# are where threads meet; the pure-logic tests add nothing under TSan.
# Built with clang, which compiles it in three quarters of gcc's time.
tsan_tests=(commit_test roundtrip_test backends_test audit_test claim_test staging_arena_test coordinator_test etcd_test hostile_test
  safetensors_cli_test peer_test coop_load_test storage_test layout_save_test util_test log_sink_test delta_test)
build_tsan() {
  CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_SANITIZE=thread "${opt_flags[@]}" \
    -DCKPT_BUILD_BENCHMARKS=OFF -DCKPT_BUILD_PYTHON=OFF
  cmake --build build-tsan --target "${tsan_tests[@]}" s3_test ckpt_cli crash_saver
}

build_fuzz() {
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${opt_flags[@]}" \
    -DCKPT_FUZZ=ON -DCKPT_SANITIZE=address,undefined -DCKPT_BUILD_TESTS=OFF \
    -DCKPT_BUILD_BENCHMARKS=OFF -DCKPT_BUILD_TOOLS=OFF -DCKPT_BUILD_PYTHON=OFF
  cmake --build build-fuzz
}

stage "release build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${opt_flags[@]}"
cmake --build build
seed_test_costs build
if ((quick)); then
  ctest --test-dir build --output-on-failure -j "$jobs" --timeout 120 -L '^unit$'
  python3 scripts/tiers.py build
  stage "the unit tier passed"
  exit 0
fi
start_background_build "AddressSanitizer" build_asan
# --timeout: a test that sets no TIMEOUT of its own fails after 15 minutes
# instead of holding the stage (the longest take under two).
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
# Every test labelled unit stayed under its limit (tests/tiers.txt), with
# room for this stage's load.
python3 scripts/tiers.py build --limit 5

stage "pip install . from scratch into a venv made from Debian's python3"
venv=$(mktemp -d)
/usr/bin/python3 -m venv --system-site-packages "$venv/venv"
env -u CKPT_CMAKE_BUILD_DIR CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
  "$venv/venv/bin/pip" install --quiet --no-build-isolation --no-deps --no-index .
src=$PWD
(cd "$venv" && "$venv/venv/bin/python" "$src/tests/python/installed_package.py" "$venv/venv")
rm -rf "$venv"

stage "address + undefined-behaviour sanitizers"
wait_background_build
seed_test_costs build-asan
start_background_build "ThreadSanitizer" build_tsan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900 -LE "install|mpi|python|campaign"

stage "ThreadSanitizer: the tests of the concurrent parts"
wait_background_build
start_background_build "fuzz" build_fuzz
# The s3:// backend's part uploads and parallel reads run against the S3
# server started for this stage (ctest starts its own in the stages above).
s3dir=build-tsan/tests/s3-server
scripts/s3-test-server.sh start "$s3dir"
# One test program per core at a time: much of their time is spent waiting
# on heartbeats, timeouts and child processes. tests/tsan.supp names what an
# uninstrumented library (abseil) hides from the sanitizer. A failing program's output is
# printed whole.
run_tsan() {
  local log
  log=$(mktemp)
  local filter=()
  [[ "$1" == s3_test ]] && filter=(--gtest_filter='-S3Restart.*:S3Crash.*')
  if TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" timeout 1200 build-tsan/tests/"$1" --gtest_brief=1 "${filter[@]}" \
      > "$log" 2>&1; then
    echo "$1: passed"
    rm -f "$log"
  else
    cat "$log"
    echo "$1: FAILED under ThreadSanitizer"
    rm -f "$log"
    return 1
  fi
}
export -f run_tsan
printf '%s\n' s3_test coordinator_test "${tsan_tests[@]}" | awk '!seen[$0]++' | xargs -P "$jobs" -I{} bash -c 'run_tsan {}'
scripts/s3-test-server.sh stop "$s3dir"
s3dir=""

stage "fuzzing (${fuzz_seconds}s per target)"
wait_background_build
# One fuzzer per core at a time; each writes a reproducer (crash-*) into
# the working directory when it finds one.
run_fuzzer() {
  local target=$1 corpus log leaks=1
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  log=$(mktemp)
  if [[ "$target" == coordinator || "$target" == peer ]]; then
    # OpenSSL 3 keeps per-thread state (904 bytes in each thread that ran an
    # HMAC) until the thread exits, and the coordinator's thread outlives
    # LeakSanitizer's exit check. The coordinator's own leaks are checked by
    # coordinator_test under ASan above.
    leaks=0
  fi
  if ! ASAN_OPTIONS="detect_leaks=$leaks" build-fuzz/tests/fuzz/fuzz_"$target" -max_total_time="$FUZZ_SECONDS_EACH" \
      -max_len=65536 -print_final_stats=1 -detect_leaks=$leaks "$corpus" > "$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz_$target found a crash; the reproducer is in the working directory (crash-*)"
    rm -rf "$corpus" "$log"
    return 1
  fi
  echo "fuzz_$target: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs, clean"
  rm -rf "$corpus" "$log"
}
export -f run_fuzzer
export FUZZ_SECONDS_EACH=$fuzz_seconds
printf '%s\n' manifest data_file frame latest claim safetensors s3_parse rank_summary data_position coordinator records peer \
  erasure |
  xargs -P "$jobs" -I{} bash -c 'run_fuzzer {}'
stage "all tests passed"
echo "== total: ${SECONDS} s"
