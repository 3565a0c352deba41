#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install
# against it with find_package(ckpt), and runs the result. Then builds a
# storage plugin out of tree against the installed plugin header and runs a
# save, a resharded restore and a verify through it.
#   run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cmake -S "$src" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > /dev/null
cmake --build "$work/consumer" > /dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$work/consumer/consumer" "$work/root"
ckpt="$work/prefix/bin/ckpt"
test -x "$ckpt"
"$ckpt" verify "$work/root"

# The installed tree carries the plugin header and the localfs plugin.
test -f "$work/prefix/include/ckpt/plugin_abi.h"
find "$work/prefix" -path '*/ckpt/plugins/libckpt-localfs.so' | grep -q .

cmake -S "$src/plugin" -B "$work/plugin" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DPLUGIN_SOURCE="$src/../../plugins/localfs/localfs_plugin.c" > /dev/null
cmake --build "$work/plugin" > /dev/null
export CKPT_PLUGIN_PATH="$work/plugin"
"$ckpt" plugins --json | grep -q '"scheme":"extfs"'
# The installed tool runs the conformance suite against the out-of-tree
# plugin; the conformance header is installed for backends' own tests.
"$ckpt" plugins check "$(find "$work/plugin" -name '*.so' | head -1)" | grep -q "8 of 8 cases passed"
test -f "$work/prefix/include/ckpt/conformance.h"
"$ckpt" synth --out "extfs://$work/ext" --params 1M --mesh tp=2 --step 3 > /dev/null
"$ckpt" restore-check "extfs://$work/ext" --mesh tp=3 | grep -q "all elements match"
"$ckpt" verify "extfs://$work/ext"
test -f "$work/ext/step-0000000003/MANIFEST"
# A plain C program against the installed C API: with find_package (the
# consumer project builds capi_consumer) and with gcc and pkg-config.
"$work/consumer/capi_consumer" "$work/capi-cmake"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
gcc -std=c11 -Wall -Werror -o "$work/capi_pc" "$src/../capi/capi_roundtrip.c" $(pkg-config --cflags --libs ckpt-c)
"$work/capi_pc" "$work/capi-pkgconfig"
echo "install, find_package, the C API and an out-of-tree plugin: ok"
