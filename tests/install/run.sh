#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install
# against it with find_package(ckpt), and runs the result.
#   run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cmake -S "$src" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/consumer" > /dev/null
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$work/consumer/consumer" "$work/root"
test -x "$work/prefix/bin/ckpt"
"$work/prefix/bin/ckpt" verify "$work/root"
