#!/usr/bin/env bash
# The partition campaign: ROUNDS rounds (default 100) of a job on 4 hosts
# (network namespaces, scripts/cluster.sh) meeting a nemesis picked at
# random -- kill a host, isolate one, split the workers, cut one direction,
# slow a link, shift a clock, cut the coordinator leader's host from etcd
# (two replicas on a three-member etcd cluster, 6 hosts) -- that acts for
# 2 s (4 s for etcd) and heals. After every round: every committed step
# verifies, was decided by the coordinator that led and holds no file of
# another save; the final state is the uninterrupted run's; `ckpt
# coordinator history` finds no contradiction; and the job finished. Per
# nemesis it reports the time from the fault to its detection and to the
# next committed step, from the heal to a generation of all six workers,
# and from a returning host's join to its workers' first step, then:
#   ROUNDS rounds, LOST lost steps, CONTRA contradictions, UNFINISHED unfinished jobs
# and exits non-zero unless all three are 0. Needs root.
#
#   scripts/partition-campaign.sh [ROUNDS]        (CKPT_BUILD=DIR: the build, default build/;
#                                                  CKPT_PARTITION_SEED=N: repeat a run)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
rounds=${1:-100}
[[ "$rounds" =~ ^[0-9]+$ ]] || { echo "partition-campaign.sh: ROUNDS must be a number" >&2; exit 2; }
build=${CKPT_BUILD:-build}
test -x "$build/tests/cluster_test" || { echo "partition-campaign.sh: no $build/tests/cluster_test (build first)" >&2; exit 2; }
CKPT_PARTITION_ROUNDS=$rounds "$build/tests/cluster_test" --gtest_filter=Cluster.PartitionCampaign |
  grep -vE '^\[|^Running main|^Note: '
