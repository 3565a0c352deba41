#!/bin/sh
# Every benchmark names itself in its usage line and in its errors, answers
# --help with exit 0 and a mistake with exit 2.
# usage: bench_usage.sh BENCHMARK_DIR
set -u
dir=$1
failed=0
check() {  # check NAME ARGS...: the program, then the words before the options
  bin=$1
  shift
  name=$bin
  [ $# -eq 0 ] || name="$bin $*"
  out=$("$dir/$bin" "$@" --help 2>&1)
  rc=$?
  case "$out" in
    "usage: $name "*) ;;
    *) echo "$name --help: the usage line does not begin 'usage: $name': $(echo "$out" | head -1)"; failed=1 ;;
  esac
  [ $rc -eq 0 ] || { echo "$name --help exited $rc"; failed=1; }
  err=$("$dir/$bin" "$@" --no-such-option 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 2 ] || { echo "$name --no-such-option exited $rc"; failed=1; }
  case "$err" in
    "$name: unknown option --no-such-option"*) ;;
    *) echo "$name --no-such-option: the error does not name $name: $(echo "$err" | head -1)"; failed=1 ;;
  esac
}
for b in save_load_bench reshard_bench backends_bench audit_bench manyrank_bench coordinator_bench peer_bench \
         restart_plan_bench commit_bench restore_fanout_bench; do
  check "$b"
done
for sub in memcpy save load; do check bench_probe "$sub"; done
# A value it does not know is a usage error too.
"$dir/bench_probe" save --root "${TMPDIR:-/tmp}/bench-usage-unused" --memcpy-into elsewhere > /dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "bench_probe save --memcpy-into elsewhere exited $rc"; failed=1; }
exit $failed
