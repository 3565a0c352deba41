#!/usr/bin/env bash
# Hosts as network namespaces on one bridge, for tests of what crosses a
# network: each host has its own network stack, address, hostname and
# local-disk directory; links can be cut (both ways or one), slowed, and
# healed. Needs root and iproute2.
#
#   scripts/cluster.sh up HOSTS [--owner PID]   makes a cluster, prints its id
#   scripts/cluster.sh down ID                  removes it
#   scripts/cluster.sh addr ID HOST             the address of host HOST (0-based)
#   scripts/cluster.sh gateway ID               the bridge's address (this machine's side)
#   scripts/cluster.sh disk ID HOST             the host's local-disk directory (also
#                                               $CKPT_HOST_DISK in what exec runs)
#   scripts/cluster.sh exec ID HOST [--clock OFFSET] CMD...
#                                               runs CMD on the host (its namespace and
#                                               hostname, its clock shifted by OFFSET,
#                                               e.g. +120s, through faketime)
#   scripts/cluster.sh cut ID HOST              the host's link down (both directions)
#   scripts/cluster.sh cut-from ID HOST PEER    HOST's packets to PEER are dropped
#   scripts/cluster.sh limit ID HOST RATE       the host's link limited to RATE (tc tbf,
#                                               both directions), e.g. 10mbit or 4gbit
#   scripts/cluster.sh heal ID HOST             link up, one-way cuts and limits removed
#   scripts/cluster.sh collect                  removes the clusters of owners that are gone
#   scripts/cluster.sh list                     the clusters that exist, with their owners
#
# Names and subnets are unique per cluster (a random id; a 10.2xx.y.0/24 no
# route of this machine uses), so clusters of tests running in parallel do
# not meet. A cluster belongs to its owner process (--owner, default the
# caller): `collect`, which `up` runs first, removes clusters whose owner is
# gone. Traffic stays on the bridge: the hosts have no route elsewhere.
set -euo pipefail

state_root=${CKPT_CLUSTER_STATE:-/run/ckpt-cluster}
# The hosts' local disks: a directory each, on disk rather than in /run's RAM.
disk_root=${CKPT_CLUSTER_DISKS:-/var/tmp/ckpt-cluster}

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

usage() {
  sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
  command -v ip > /dev/null || die "needs iproute2 (ip)"
}

# The cluster's recorded facts.
load() {
  id=$1
  [[ "$id" =~ ^[a-z0-9]{6}$ ]] || die "no such cluster '$id'"
  dir="$state_root/$id"
  [[ -d "$dir" ]] || die "no such cluster '$id'"
  hosts=$(cat "$dir/hosts")
  subnet=$(cat "$dir/subnet")
}

ns_of() { echo "ck-$1-h$2"; }
bridge_of() { echo "ckb$1"; }
veth_of() { echo "ckv$1-$2"; }

# tbf's bucket for RATE ("200mbit", "4gbit", "500kbit"): what the rate
# carries in 10 ms, in bytes (the kernel refills it once a tick; a smaller
# bucket caps a fast link well below its rate), at least 4000 (32 kbit).
burst_for() {
  local rate=$1 bits
  [[ "$rate" =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "rate '$rate': a number and bit, kbit, mbit or gbit"
  case "${BASH_REMATCH[2]}" in
    bit) bits=${BASH_REMATCH[1]} ;;
    kbit) bits=$((BASH_REMATCH[1] * 1000)) ;;
    mbit) bits=$((BASH_REMATCH[1] * 1000000)) ;;
    gbit) bits=$((BASH_REMATCH[1] * 1000000000)) ;;
  esac
  local bytes=$((bits / 800))  # 10 ms of it, in bytes
  ((bytes < 4000)) && bytes=4000
  echo "$bytes"
}

host_index() {
  local h=$1
  [[ "$h" =~ ^[0-9]+$ ]] && ((h < hosts)) || die "no host '$h' in cluster $id ($hosts hosts)"
}

# A /24 in 10.200-249.x.0 that no route or address of this machine meets.
pick_subnet() {
  local taken a b
  taken=$(ip -4 route show table all 2> /dev/null; ip -4 -o addr show 2> /dev/null)
  for _ in $(seq 1 200); do
    a=$((200 + RANDOM % 50))
    b=$((RANDOM % 256))
    if ! grep -q "10\.$a\.$b\." <<< "$taken" && ! grep -q "10\.$a\.$b\.0/24" "$state_root"/*/subnet 2> /dev/null; then
      echo "10.$a.$b"
      return
    fi
  done
  die "no free subnet in 10.200.0.0/13"
}

owner_alive() {
  local dir=$1 pid start now
  pid=$(cut -d' ' -f1 "$dir/owner" 2> /dev/null) || return 1
  start=$(cut -d' ' -f2 "$dir/owner" 2> /dev/null) || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2> /dev/null || return 1
  now=$(awk '{print $22}' "/proc/$pid/stat" 2> /dev/null) || return 1
  [[ "$now" == "$start" ]]
}

teardown() {
  local id=$1 dir="$state_root/$1" n h ns pids
  n=$(cat "$dir/hosts" 2> /dev/null || echo 64)
  for ((h = 0; h < n; ++h)); do
    ns=$(ns_of "$id" "$h")
    if ip netns list | grep -qw "$ns"; then
      # Every process still in the namespace goes with it.
      pids=$(ip netns pids "$ns" 2> /dev/null || true)
      [[ -z "$pids" ]] || kill -9 $pids 2> /dev/null || true
      ip netns delete "$ns" 2> /dev/null || true
    fi
    ip link delete "$(veth_of "$id" "$h")" 2> /dev/null || true
  done
  ip link delete "$(bridge_of "$id")" 2> /dev/null || true
  # Only the directory this script made for the cluster, and only by its id.
  [[ "$id" =~ ^[0-9a-f]{6}$ ]] && rm -rf "${disk_root:?}/$id"
  rm -rf "$dir"
}

cmd_collect() {
  local d
  [[ -d "$state_root" ]] || return 0
  for d in "$state_root"/*/; do
    [[ -d "$d" ]] || continue
    d=${d%/}
    owner_alive "$d" || teardown "$(basename "$d")"
  done
}

cmd_up() {
  local n=${1:-}
  shift || true
  local owner=$PPID
  while [[ $# -gt 0 ]]; do
    case $1 in
      --owner) owner=$2; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 64)) || die "up: HOSTS must be 1..64"
  kill -0 "$owner" 2> /dev/null || die "up: owner $owner is not running"
  mkdir -p "$state_root"
  cmd_collect
  # One `up` at a time chooses its subnet, and a cluster's directory appears
  # whole (a rename): a `collect` running beside it never sees one without
  # its owner.
  exec 9> "$state_root/.lock"
  flock 9
  id=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 6)
  dir="$state_root/$id"
  subnet=$(pick_subnet)
  mkdir "$state_root/.new-$id"
  echo "$owner $(awk '{print $22}' "/proc/$owner/stat")" > "$state_root/.new-$id/owner"
  echo "$n" > "$state_root/.new-$id/hosts"
  echo "$subnet" > "$state_root/.new-$id/subnet"
  mv "$state_root/.new-$id" "$dir"
  flock -u 9
  exec 9>&-
  hosts=$n
  trap 'teardown "$id"' ERR
  local br h ns v
  br=$(bridge_of "$id")
  ip link add "$br" type bridge
  ip addr add "$subnet.254/24" dev "$br"
  ip link set "$br" up
  for ((h = 0; h < n; ++h)); do
    ns=$(ns_of "$id" "$h")
    v=$(veth_of "$id" "$h")
    ip netns add "$ns"
    ip link add "$v" type veth peer name "ckp$id-$h"
    ip link set "ckp$id-$h" netns "$ns"
    ip -n "$ns" link set "ckp$id-$h" name eth0
    ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$v" master "$br"
    ip link set "$v" up
    mkdir -p "$disk_root/$id/h$h"
  done
  trap - ERR
  echo "$id"
}

cmd_exec() {
  load "$1"
  host_index "$2"
  local h=$2 clock=""
  shift 2
  if [[ "${1:-}" == --clock ]]; then
    clock=$2
    shift 2
  fi
  [[ $# -gt 0 ]] || die "exec: no command"
  local prefix=()
  if [[ -n "$clock" ]]; then
    command -v faketime > /dev/null || die "exec --clock needs faketime"
    prefix=(faketime -f "$clock")
  fi
  # Its own hostname too (a UTS namespace of its own).
  exec env CKPT_HOST_DISK="$disk_root/$id/h$h" ip netns exec "$(ns_of "$id" "$h")" unshare --uts \
    sh -c 'hostname "$0" && exec "$@"' "ck-$id-h$h" "${prefix[@]}" "$@"
}

cmd_heal() {
  load "$1"
  host_index "$2"
  local ns v
  ns=$(ns_of "$id" "$2")
  v=$(veth_of "$id" "$2")
  ip link set "$v" up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route flush type blackhole 2> /dev/null || true
  tc qdisc del dev "$v" root 2> /dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2> /dev/null || true
}

main() {
  local cmd=${1:-}
  shift || true
  case "$cmd" in
    -h | --help | help) usage ;;
    up) need_root; cmd_up "$@" ;;
    down) need_root; [[ $# -eq 1 ]] || die "down ID"; load "$1"; teardown "$1" ;;
    addr) [[ $# -eq 2 ]] || die "addr ID HOST"; load "$1"; host_index "$2"; echo "$subnet.$(($2 + 1))" ;;
    gateway) [[ $# -eq 1 ]] || die "gateway ID"; load "$1"; echo "$subnet.254" ;;
    disk) [[ $# -eq 2 ]] || die "disk ID HOST"; load "$1"; host_index "$2"; echo "$disk_root/$1/h$2" ;;
    exec) need_root; [[ $# -ge 3 ]] || die "exec ID HOST CMD..."; cmd_exec "$@" ;;
    cut)
      need_root; [[ $# -eq 2 ]] || die "cut ID HOST"; load "$1"; host_index "$2"
      ip link set "$(veth_of "$id" "$2")" down
      ;;
    cut-from)
      need_root; [[ $# -eq 3 ]] || die "cut-from ID HOST PEER"; load "$1"; host_index "$2"; host_index "$3"
      ip -n "$(ns_of "$id" "$2")" route replace blackhole "$subnet.$(($3 + 1))/32"
      ;;
    limit)
      need_root; [[ $# -eq 3 ]] || die "limit ID HOST RATE"; load "$1"; host_index "$2"
      burst=$(burst_for "$3")
      tc qdisc replace dev "$(veth_of "$id" "$2")" root tbf rate "$3" burst "$burst" latency 400ms
      ip netns exec "$(ns_of "$id" "$2")" tc qdisc replace dev eth0 root tbf rate "$3" burst "$burst" latency 400ms
      ;;
    heal) need_root; [[ $# -eq 2 ]] || die "heal ID HOST"; cmd_heal "$@" ;;
    collect) need_root; cmd_collect ;;
    list)
      [[ -d "$state_root" ]] || exit 0
      for d in "$state_root"/*/; do
        [[ -d "$d" ]] || continue
        d=${d%/}
        echo "$(basename "$d") hosts=$(cat "$d/hosts") subnet=$(cat "$d/subnet").0/24 owner=$(cut -d' ' -f1 "$d/owner")$(owner_alive "$d" || echo ' (gone)')"
      done
      ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
