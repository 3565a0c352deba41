#!/usr/bin/env bash
# Hostile-connection floods against the coordinator at a larger scale than
# CI runs them, on an existing build (scripts/test.sh builds one). Each
# flood runs against a real `ckpt coordinator` process on loopback while a
# real worker commits steps; the coordinator's peak RSS and CPU time are
# printed next to their bounds (docs/protocol.md, "Limits before and after
# the join").
#
#   scripts/coordinator-flood.sh [CONNECTIONS] [ROUNDS]
#   scripts/coordinator-flood.sh 5000 3
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-5000}
rounds=${2:-3}
build=${BUILD_DIR:-build}
# Each connection is a descriptor on this side too.
ulimit -n "$(ulimit -Hn)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((i = 1; i <= rounds; i++)); do
  echo "== round $i of $rounds: $connections connections"
  if ! CKPT_FLOOD_CONNECTIONS=$connections "$build"/tests/hostile_test --gtest_brief=1 > "$log" 2>&1; then
    cat "$log"
    exit 1
  fi
  grep -E '^(flood|descriptors):' "$log"
done
echo "== floods passed"
