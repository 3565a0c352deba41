"""benchmarks/restore_fanout on a small checkpoint: every figure the issue of
cooperative loads asks for is reported, the cooperative restore reads the
checkpoint from storage about once and every rank alone about 4 times, and
every rank restored bit-exact. With --cluster, across hosts that are network
namespaces, the checkpoint on an S3 gateway of its own host (needs root).

    python3 restore_fanout_smoke.py REPO BUILD [--cluster]
"""
import json
import os
import subprocess
import sys
import tempfile

repo, build = sys.argv[1], sys.argv[2]
cluster = sys.argv[3:] == ["--cluster"]
with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
    env = dict(os.environ, CKPT_BUILD=build)
    args = ["--cluster", "--size", "64M"] if cluster else ["--size", "24M", "--read-bandwidth", "96M"]
    out = subprocess.run([os.path.join(repo, "benchmarks", "restore_fanout"), *args, "--dir", scratch, "--json"],
                         check=True, capture_output=True, text=True, timeout=600, env=env).stdout
figures = json.loads(out)
for key in ("storage_bytes_ratio", "seconds", "single_replica_seconds", "iperf3_bytes_per_s", "every_rank_seconds",
            "every_rank_storage_bytes_ratio", "dp1_ratio", "hosts" if cluster else "stand_in"):
    assert key in figures, f"{key} missing from {out}"
assert figures["cooperative"] is True and figures["mismatches"] == 0, figures
assert figures["storage_bytes_ratio"] <= 1.05, figures
assert figures["every_rank_storage_bytes_ratio"] >= 3.9, figures
assert figures["seconds"] > 0 and figures["single_replica_seconds"] > 0, figures
if cluster:
    # The links were limited: the storage host's to 1 Gbit/s, the others' to 4.
    assert 0.7e8 < figures["iperf3_storage_bytes_per_s"] < 1.3e8, figures
    assert figures["iperf3_bytes_per_s"] > 2.5 * figures["iperf3_storage_bytes_per_s"], figures
print("restore_fanout: every figure reported")
