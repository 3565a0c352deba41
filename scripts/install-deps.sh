#!/usr/bin/env bash
# Installs the Debian 12 packages ckpt needs that are not installed yet.
#   scripts/install-deps.sh          build and run
#   scripts/install-deps.sh --test   also what the test suite and fuzzers use
#   scripts/install-deps.sh --bench  also what benchmarks/run compares with
set -euo pipefail

packages=(g++ cmake ninja-build pkg-config liburing-dev libzstd-dev libxxhash-dev libisal-dev
          libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin
          libhdf5-dev libboost-dev libssl-dev libcurl4-openssl-dev python3-dev python3-pybind11 pybind11-dev)
# The S3 server of the s3:// tests and benchmarks (Ceph's RADOS Gateway, scripts/s3-server.sh) and
# the S3 clients they compare with and check against (faketime: a clock off the server's; openssl:
# the certificate of its https endpoint).
s3=(ceph-mon ceph-osd ceph-mgr radosgw ceph-common awscli s3cmd faketime openssl)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(clang libclang-rt-14-dev lld fio python3 python3-h5py python3-numpy hdf5-tools python3-torch
            python3-pip python3-venv python3-setuptools python3-pytest clang-format-14 etcd-server etcd-client
            iproute2 iperf3 faketime util-linux "${s3[@]}")
elif [[ "${1:-}" == "--bench" ]]; then
  packages+=(fio iperf3 python3 python3-h5py python3-numpy python3-torch "${s3[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo)
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
