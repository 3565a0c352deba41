#!/usr/bin/env bash
# Long reliability campaigns on an existing build (scripts/test.sh builds
# one): thousands of kills at exact storage operations (SIGKILL and power
# loss), thousands of bit flips, a damage campaign over a root of committed
# steps (flips, truncations and deletions of every file, each followed by
# verify, a save with retention, repair and verify), and longer fuzzing runs.
#
# and rounds of two `ckpt synth` jobs racing to save one step.
#
#   scripts/reliability-campaign.sh [KILLS] [FLIPS] [FUZZ_SECONDS] [DAMAGE_ROUNDS] [WRITER_ROUNDS]
#   scripts/reliability-campaign.sh 5000 5000 600 2000 200
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-2000}
flips=${2:-2000}
fuzz_seconds=${3:-300}
damage_rounds=${4:-1100}
writer_rounds=${5:-100}
build=${BUILD_DIR:-build}

echo "== crash campaign: $kills kills per mode"
CKPT_CRASH_ROUNDS=$kills "$build"/tests/commit_test --gtest_filter='Modes/CrashCampaign.*'
echo "== bit-flip campaign: $flips flips"
CKPT_FLIPS=$flips "$build"/tests/corruption_test --gtest_filter='*RandomBitFlips*'
echo "== damage campaign: $damage_rounds rounds per backend (file, hdf5, tiered)"
CKPT_INTEGRITY_ROUNDS=$damage_rounds "$build"/tests/integrity_test --gtest_filter='Backends/DamageCampaign.*' |
  grep -E 'campaign:|FAILED|Failure'
echo "== two writers of one step: $writer_rounds rounds (60M params, dp=2,tp=2)"
CKPT_WRITER_ROUNDS=$writer_rounds CKPT_WRITER_PARAMS=60M "$build"/tests/claim_test \
  --gtest_filter='Claims.TwoSynthProcessesOnOneStepNeverMix' | grep -E 'two writers:|FAILED|Failure'
echo "== fault matrix"
"$build"/tests/backends_test --gtest_filter='Faulty.*'
if [[ -d build-fuzz ]]; then
  for target in manifest data_file frame latest claim coordinator; do
    corpus=$(mktemp -d)
    cp tests/fuzz/corpus/"$target"/* "$corpus"/
    leaks=1
    [[ "$target" == coordinator ]] && leaks=0  # see scripts/test.sh
    ASAN_OPTIONS="detect_leaks=$leaks" build-fuzz/tests/fuzz/fuzz_"$target" -max_total_time="$fuzz_seconds" \
      -max_len=65536 -print_final_stats=1 -detect_leaks=$leaks "$corpus" 2>&1 |
      grep -E '^stat::number_of_executed_units|ERROR' | sed "s/^/fuzz_$target: /"
    rm -rf "$corpus"
  done
fi
echo "== campaign passed"
