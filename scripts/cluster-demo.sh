#!/usr/bin/env bash
# An elastic job across three hosts (network namespaces, scripts/cluster.sh)
# that loses a host and grows back: the coordinator on host 0, two workers on
# each of hosts 1 and 2 saving every 5 steps to a root and every 2 into
# peers' memory. Once step 20 is committed host 2's link is cut for 3 s; the
# job goes on with host 1's workers, and when the link is healed host 2's
# workers join again at the next committed step. Prints the coordinator's
# account and the times. Needs root; uses the build in build/ (or CKPT_BUILD).
#
#   scripts/cluster-demo.sh [--steps 300] [--cut-for 3]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=300
cut_for=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --cut-for) cut_for=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster-demo.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
ckpt=$(realpath "${CKPT_BUILD:-build}/tools/ckpt")
test -x "$ckpt" || { echo "cluster-demo.sh: no $ckpt (build first)" >&2; exit 2; }
work=$(mktemp -d)
id=$(scripts/cluster.sh up 3 --owner $$)
trap 'scripts/cluster.sh down "$id" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
chmod 600 "$work/token"
a0=$(scripts/cluster.sh addr "$id" 0)
echo "cluster $id: coordinator on $a0, workers on $(scripts/cluster.sh addr "$id" 1) and $(scripts/cluster.sh addr "$id" 2)"
scripts/cluster.sh exec "$id" 0 "$ckpt" coordinator --listen "$a0:0" --port-file "$work/port" \
  --state-dir "$work/state" --token-file "$work/token" --min-nodes 2 --max-nodes 4 --heartbeat 200ms \
  --dead-after 3 --join-timeout 500ms --root "$work/root" --grow-spacing 1s > "$work/coordinator.log" 2>&1 &
coordinator=$!
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.05; done
port=$(cat "$work/port")
pids=()
for i in 0 1 2 3; do
  host=$((1 + i / 2))
  scripts/cluster.sh exec "$id" "$host" "$ckpt" worker --connect "$a0:$port" --token-file "$work/token" \
    --root "$work/root" --steps "$steps" --save-every 5 --memory-every 2 --step-ms 20 \
    --log "$work/worker$i.log" > "$work/worker$i.out" 2>&1 &
  pids+=($!)
done
latest() { sed -n 's/^step \([0-9]*\)$/\1/p' "$work/root/LATEST" 2> /dev/null || true; }
until [[ "$(latest)" =~ ^[0-9]+$ ]] && (($(latest) >= 20)); do sleep 0.05; done
echo "step $(latest) committed by 4 workers; cutting host 2's link for ${cut_for} s"
scripts/cluster.sh cut "$id" 2
sleep "$cut_for"
scripts/cluster.sh heal "$id" 2
t1=$(date +%s.%N)
echo "healed at step $(latest)"
# Back at full size: a generation of 4 formed after growing back.
for _ in $(seq 600); do
  if sed -n '/growing back/,$p' "$work/coordinator.log" | grep -q "formed: 4 member(s)"; then
    echo "back at 4 workers $(awk -v now="$(date +%s.%N)" -v t="$t1" 'BEGIN { printf "%.2f", now - t }') s after the heal"
    break
  fi
  sleep 0.05
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
kill -TERM "$coordinator" 2> /dev/null || true
wait "$coordinator" 2> /dev/null || true
echo
echo "the coordinator's account:"
grep -E "generation [0-9]+ (formed|ended)" "$work/coordinator.log" | sed 's/^/  /'
echo
"$ckpt" verify "$work/root" --all > /dev/null && echo "every committed step verifies" || status=1
echo "last committed step $(latest) of $steps"
[[ "$(latest)" == "$steps" ]] || status=1
exit $status
