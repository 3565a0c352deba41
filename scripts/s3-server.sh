#!/bin/bash
# s3-server.sh start|stop|kill-rgw|start-rgw : a throw-away one-node Ceph RADOS Gateway (a real S3
# server) on 127.0.0.1 (or BIND_ADDR), for the s3:// tests and benchmarks.
# All state under $CEPH_S3_DIR; after `start`, `. $CEPH_S3_DIR/env` gives AWS_* and S3_ENDPOINT.
# kill-rgw / start-rgw stop the gateway alone (SIGKILL) and start it again on the same port, for
# the tests of a server that dies mid-save.
# Env: CEPH_S3_DIR, MON_PORT, RGW_PORT, STORE (memstore|bluestore), STORE_BYTES, WITH_MGR (0|1),
# RGW_SSL_PORT (also serve https there, with a certificate for the address from a throw-away CA whose
# certificate is $CEPH_S3_DIR/ca.pem; the env file then adds S3_HTTPS_ENDPOINT and S3_CA_FILE),
# BIND_ADDR (the address every daemon listens on, default 127.0.0.1: e.g. a test host's own address
# when the script runs inside its network namespace).
set -euo pipefail
D=${CEPH_S3_DIR:-/tmp/ckpt-s3} MON_PORT=${MON_PORT:-40789} RGW_PORT=${RGW_PORT:-47480}
STORE=${STORE:-bluestore} STORE_BYTES=${STORE_BYTES:-10737418240} WITH_MGR=${WITH_MGR:-0}
RGW_SSL_PORT=${RGW_SSL_PORT:-} A=${BIND_ADDR:-127.0.0.1}
AK=${AWS_ACCESS_KEY_ID:-testkey} SK=${AWS_SECRET_ACCESS_KEY:-testsecret}
export CEPH_CONF=$D/ceph.conf
log() { echo "[$(date +%T.%N | cut -c1-12)] $*" >&2; }
ours() { local s; s=$(sed 's/.*) //; s/ .*//' /proc/"$1"/stat 2>/dev/null) || return 1
  [ "$s" != Z ] && grep -qE '^(ceph-|radosgw)' /proc/"$1"/comm; }   # alive, not a zombie, still ceph
stop() { local n p; for n in rgw osd mgr mon; do [ -f "$D/$n.pid" ] || continue; p=$(<"$D/$n.pid")
    if ours "$p"; then kill -9 "$p"; while ours "$p"; do sleep 0.05; done; fi; done; rm -rf "$D"; }
launch() { local n=$1; shift; "$@" </dev/null >"$D/log/$n.out" 2>&1 & echo $! >"$D/$n.pid"; disown; }
wait_for() { local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < end)) || { log "timeout: $*"; exit 1; }; sleep 0.2; done; }
start() {
  command -v radosgw >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install \
    -y -qq --no-install-recommends ceph-mon ceph-osd ceph-mgr radosgw ceph-common >/dev/null; }
  [ -e "$D" ] && stop
  trap 'log FAILED; tail -n 20 "$D"/log/*.log >&2; stop' EXIT
  mkdir -p "$D"/{mon.a,mgr.x,osd.0,log,run}
  local fsid uuid; fsid=$(</proc/sys/kernel/random/uuid) uuid=$(</proc/sys/kernel/random/uuid)
  local frontend="beast endpoint=$A:$RGW_PORT" https_env=""
  if [ -n "$RGW_SSL_PORT" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ckpt test CA" -keyout "$D/ca.key" \
      -out "$D/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$A" -keyout "$D/rgw.key" -out "$D/rgw.csr" 2>/dev/null
    printf 'subjectAltName=IP:%s,DNS:localhost\n' "$A" >"$D/rgw.ext"
    openssl x509 -req -in "$D/rgw.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -CAcreateserial -days 2 \
      -extfile "$D/rgw.ext" -out "$D/rgw.pem" 2>/dev/null
    frontend="$frontend ssl_endpoint=$A:$RGW_SSL_PORT ssl_certificate=$D/rgw.pem ssl_private_key=$D/rgw.key"
    https_env=" S3_HTTPS_ENDPOINT=https://$A:$RGW_SSL_PORT S3_CA_FILE=$D/ca.pem"
  fi
  cat >"$CEPH_CONF" <<CONF
[global]
fsid = $fsid
mon host = [v2:$A:$MON_PORT]
public addr = $A
cluster addr = $A
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
run dir = $D/run
log file = $D/log/\$name.log
mon data = $D/\$name
mgr data = $D/\$name
osd data = $D/\$name
osd objectstore = $STORE
memstore device bytes = $STORE_BYTES
bluestore block create = true
bluestore block size = $STORE_BYTES
osd memory target = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.1
rgw frontends = $frontend
CONF
  monmaptool --create --fsid "$fsid" --addv a "[v2:$A:$MON_PORT]" "$D/monmap" >/dev/null
  ceph-mon --mkfs -i a --monmap "$D/monmap"
  launch mon ceph-mon -f -i a
  wait_for 60 timeout 5 ceph -s; log "mon up"
  [ "$WITH_MGR" = 1 ] && launch mgr ceph-mgr -f -i x
  [ "$(ceph osd new "$uuid")" = 0 ]
  ceph-osd -i 0 --mkfs --osd-uuid "$uuid" 2>"$D/log/osd-mkfs.out"
  launch osd ceph-osd -f -i 0
  wait_for 60 sh -c 'ceph osd dump -f json | grep -q "\"up\":1"'; log "osd up"
  launch rgw radosgw -f -n client.rgw
  wait_for 60 python3 -c "import urllib.request as u; u.urlopen('http://$A:$RGW_PORT/', timeout=2)"
  radosgw-admin user create --uid=test --display-name=test --access-key="$AK" --secret="$SK" >/dev/null
  echo "export AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_DEFAULT_REGION=us-east-1" \
    "S3_ENDPOINT=http://$A:$RGW_PORT CEPH_CONF=$CEPH_CONF$https_env" >"$D/env"
  trap - EXIT; log "ready: . $D/env"
}
kill_rgw() { local p; [ -f "$D/rgw.pid" ] || return 0; p=$(<"$D/rgw.pid")
  if ours "$p"; then kill -9 "$p"; while ours "$p"; do sleep 0.05; done; fi; }
start_rgw() { local at; at=$(sed -n 's/.*beast endpoint=\([^ ]*\).*/\1/p' "$CEPH_CONF")
  launch rgw radosgw -f -n client.rgw
  wait_for 60 python3 -c "import urllib.request as u; u.urlopen('http://$at/', timeout=2)"; }
case "${1:-}" in
  start) "$0" start-once || { log "retrying once"; "$0" stop; "$0" start-once; } ;;   # a rare start hangs
  start-once) start ;;
  stop) stop ;;
  kill-rgw) kill_rgw ;;
  start-rgw) start_rgw ;;
  *) echo "usage: $0 start|stop|kill-rgw|start-rgw" >&2; exit 2 ;;
esac
