#!/usr/bin/env bash
# The example trainer killed at step 130 (SIGKILL) resumes from step 120 and
# ends with parameters bit-identical to an uninterrupted run.
#   trainer_resume.sh MLP_TRAINER
set -euo pipefail
trainer=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$trainer" --root "$work/a" --ranks 4 --steps 200 --save-every 20 --out "$work/a.bin" > /dev/null
set +e
"$trainer" --root "$work/b" --ranks 4 --steps 200 --save-every 20 --kill-at 130 --out "$work/b.bin" > /dev/null 2>&1
rc=$?
set -e
test "$rc" -eq 137 || { echo "expected the trainer to die of SIGKILL, got $rc"; exit 1; }
test ! -e "$work/b.bin"
"$trainer" --root "$work/b" --ranks 4 --steps 200 --save-every 20 --out "$work/b.bin" | grep -q "resumed at step 120"
cmp "$work/a.bin" "$work/b.bin"
# Resumed on another number of ranks it still trains on (the state is
# replicated, so any world size can load it), though not bit-identically:
# the batch is split differently.
"$trainer" --root "$work/b" --ranks 2 --steps 220 --save-every 20 --out "$work/c.bin" | grep -q "resumed at step 200"
echo "example trainer: killed, resumed, bit-identical"
