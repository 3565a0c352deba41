#!/bin/sh
# `pip install` of the source tree into a venv made from Debian's python3
# (with its system packages: numpy, torch) and into Debian's python3 itself
# (the user scheme, under a scratch PYTHONUSERBASE); each then imports ckpt
# from another directory.
#   pip_install.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CKPT_CMAKE_BUILD_DIR="$build"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-deps --no-index "$src"
cd "$work"
"$work/venv/bin/python" "$src/tests/python/installed_package.py" "$work/venv"
PYTHONUSERBASE="$work/user" /usr/bin/python3 -m pip install --quiet --user --break-system-packages \
  --no-build-isolation --no-deps --no-index "$src"
PYTHONUSERBASE="$work/user" /usr/bin/python3 "$src/tests/python/installed_package.py" "$work/user"
