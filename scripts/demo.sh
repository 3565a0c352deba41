#!/usr/bin/env bash
# Installs what is missing, builds, and runs `ckpt demo` (extra arguments are
# passed to it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
exec build/tools/ckpt demo "$@"
