"""commit_bench on a small mesh: every figure the issue of scale asks for is
reported, the leader receives under 64 bytes per rank in a steady state,
and the restart plans through Load's code.

    python3 commit_bench_smoke.py BUILD/benchmarks/commit_bench
"""
import json
import subprocess
import sys

bench = sys.argv[1]
out = subprocess.run([bench, "--ranks-from", "dp=4,tp=2,pp=2", "--ranks-to", "dp=2,tp=4,pp=2", "--params", "20M",
                      "--layers", "4", "--optimizer", "adam", "--zero", "--json"],
                     check=True, capture_output=True, text=True, timeout=300).stdout
figures = json.loads(out)
for key in ("ranks", "leader_seconds", "leader_peak_bytes", "leader_bytes_received", "first_save_seconds",
            "rank_plan_seconds_max", "restart_plan_seconds"):
    assert key in figures, f"{key} missing from {out}"
assert figures["ranks"] == 16, figures
assert 0 < figures["leader_bytes_received"] <= 64 * 16, figures
assert figures["leader_seconds"] > 0 and figures["first_save_seconds"] > 0, figures
assert 0 < figures["rank_plan_seconds_max"] < 1, figures
assert figures["restart_plan_seconds"] > 0 and figures["restart_mesh"] == "dp=2,tp=4,pp=2", figures
assert figures["data_files"] == "skipped", figures
print("commit_bench: every figure reported")
