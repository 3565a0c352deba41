#!/usr/bin/env bash
# The S3 server of the test suite (ctest fixture "s3"): a one-node Ceph RADOS Gateway on free loopback
# ports (http, and https with a certificate from a throw-away CA), with a bucket "ckpt-test".
#   s3-test-server.sh start DIR   starts it; DIR/env exports AWS_* and S3_ENDPOINT for the tests
#   s3-test-server.sh stop DIR    stops it (by the PIDs it recorded) and removes DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: s3-test-server.sh start|stop DIR} dir=${2:?usage: s3-test-server.sh start|stop DIR}
export CEPH_S3_DIR=$dir
case "$cmd" in
  start)
    # Below the ephemeral range: the gateway is killed and started again on its port (kill-rgw/start-rgw).
    read -r rgw_port mon_port ssl_port <<<"$(python3 "$here/free-ports.py" 3 | tr '\n' ' ')"
    RGW_PORT=$rgw_port MON_PORT=$mon_port RGW_SSL_PORT=$ssl_port STORE=${STORE:-bluestore} STORE_BYTES=${STORE_BYTES:-21474836480} \
      "$here/s3-server.sh" start
    # shellcheck disable=SC1091
    . "$dir/env"
    /usr/bin/aws --endpoint-url "$S3_ENDPOINT" s3 mb s3://ckpt-test >/dev/null   # Debian's awscli
    echo "S3 server ready at $S3_ENDPOINT (bucket ckpt-test); env in $dir/env"
    ;;
  stop) "$here/s3-server.sh" stop ;;
  *) echo "usage: s3-test-server.sh start|stop DIR" >&2; exit 2 ;;
esac
