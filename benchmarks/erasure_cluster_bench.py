"""The memory level's restore from erasure-coded pieces against a restore
from a whole replica, across hosts that are separate network stacks: seven
hosts (network namespaces on a bridge, tests/python/netns_cluster.py), every
host's link limited to --rate both ways with tc tbf.

Host 0 saves a state at the memory level twice: as a whole copy placed in
host 1's memory (one replica), and erasure coded RS(4+2), piece j in host
j's memory. Host 6, a replacement that holds nothing, then restores each in
turn, --runs times: the replica from host 1 (host 0 is taken as lost), the
coded state with hosts 0 and 1 taken as lost, so that two data pieces of
every file are rebuilt from parity. iperf3 from host 6 to host 1 measures
the link in the same run. Every restore is compared with the saved bytes.

    /usr/bin/python3 benchmarks/erasure_cluster_bench.py [--size 256M] [--rate 1gbit] [--runs 3] [--json]

Needs root (namespaces), iperf3, and PYTHONPATH holding the ckpt module.
"""
import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text):
    if text and text[-1].upper() in SIZE_UNITS:
        return int(float(text[:-1]) * SIZE_UNITS[text[-1].upper()])
    return int(text)


def wait_for(path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.02)
    with open(path) as f:
        return f.read().strip()


def write_whole(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def arrays(size):
    """The state: four f32 tensors of size/4 bytes each, the same on every
    host (seeded)."""
    import numpy as np

    rng = np.random.default_rng(7)
    n = size // 16
    return {f"layer{i}.weight": rng.standard_normal(n, dtype=np.float32) for i in range(4)}


def state_of(tensors):
    import ckpt

    st = ckpt.State()
    for name, a in tensors.items():
        ckpt.add_array(st, name, a)
    return st


def memories(a):
    """Two peer memories of this host: one for the replicated state (A), one
    for the coded state (B), so that neither's commit drops the other's
    step."""
    import ckpt

    out = {}
    for kind in "AB":
        out[kind] = ckpt.PeerMemory(a.token, domain=f"host-{a.host}", budget_bytes=4 << 30, listen=f"{a.addr}:0")
        write_whole(os.path.join(a.dir, f"endpoint{kind}{a.host}"), out[kind].endpoint)
    return out


def role_holder(a):
    """A process's peer memories on its host, serving until told to stop."""
    m = memories(a)
    wait_for(os.path.join(a.dir, "stop"), timeout_s=3600)
    del m


def role_saver(a):
    """Host 0: saves the replica (step 2, its copy in host 1's memory) and
    the coded state (step 4, piece 0 here and piece j in host j's memory)."""
    import ckpt

    m = memories(a)
    eps = {kind: [m[kind].endpoint] + [wait_for(os.path.join(a.dir, f"endpoint{kind}{h}")) for h in range(1, 6)]
           for kind in "AB"}
    tensors = arrays(a.size)
    st = state_of(tensors)
    replica = ckpt.Checkpointer(os.path.join(a.disk, "replica"), memory=m["A"], memory_replicas=[eps["A"][1]],
                                memory_holders=[eps["A"][:2]], memory_peers=[eps["A"][0]],
                                staging_bytes=a.size + (64 << 20))
    t0 = time.monotonic()
    replica.save(2, st, level="memory").wait()
    replica_s = time.monotonic() - t0
    coded = ckpt.Checkpointer(os.path.join(a.disk, "coded"), memory=m["B"], memory_replicas=eps["B"][1:],
                              memory_holders=[eps["B"]], memory_peers=[eps["B"][0]], memory_erasure="4+2",
                              staging_bytes=a.size + (64 << 20))
    t0 = time.monotonic()
    coded.save(4, st, level="memory").wait()
    coded_s = time.monotonic() - t0
    write_whole(os.path.join(a.dir, "saved"), json.dumps({"replica_save_s": replica_s, "coded_save_s": coded_s,
                                                          "endpoints": eps}))
    wait_for(os.path.join(a.dir, "stop"), timeout_s=3600)


def role_reader(a):
    """Host 6: restores each state in turn, from the holders left."""
    import ckpt

    saved = json.loads(wait_for(os.path.join(a.dir, "saved"), timeout_s=600))
    eps = saved["endpoints"]
    m = ckpt.PeerMemory(a.token, domain="host-6", budget_bytes=4 << 30, listen=f"{a.addr}:0")
    want = arrays(a.size)
    replica = ckpt.Checkpointer(os.path.join(a.disk, "replica"), memory=m, memory_holders=[[eps["A"][1]]])
    coded = ckpt.Checkpointer(os.path.join(a.disk, "coded"), memory=m, memory_holders=[eps["B"][2:]])
    out = {"replica": [], "coded": [], "coded_stats": None}
    import numpy as np

    for _ in range(a.runs):
        for name, cp, step in (("replica", replica, 2), ("coded", coded, 4)):
            got = {k: np.zeros_like(v) for k, v in want.items()}
            st = state_of(got)
            t0 = time.monotonic()
            stats = cp.load(st, step, level="memory", stats=True)
            out[name].append(time.monotonic() - t0)
            if any(not np.array_equal(got[k], want[k]) for k in want):
                raise RuntimeError(f"the {name} restore returned other bytes")
            if stats["bytes_from_storage"] != 0:
                raise RuntimeError(f"the {name} restore read storage: {stats}")
            if name == "coded":
                out["coded_stats"] = {k: stats[k] for k in ("bytes_from_peers", "bytes_rebuilt_from_parity",
                                                             "memory_pieces_lost")}
    write_whole(os.path.join(a.dir, "restored"), json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="256M", help="state size (default 256M)")
    ap.add_argument("--rate", default="1gbit", help="every host's link, both ways (tc tbf; default 1gbit)")
    ap.add_argument("--runs", type=int, default=3, help="restores of each kind, taken in turn (default 3)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--host", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--addr", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--disk", help=argparse.SUPPRESS)
    ap.add_argument("--token", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.size = parse_size(a.size)
    if a.role:
        {"holder": role_holder, "saver": role_saver, "reader": role_reader}[a.role](a)
        return 0
    if os.geteuid() != 0:
        print("erasure_cluster_bench: network namespaces need root", file=sys.stderr)
        return 2
    from netns_cluster import NetnsCluster

    token = secrets.token_hex(16)
    work = tempfile.mkdtemp(prefix="ckpt-ec-bench-")
    procs = []
    with NetnsCluster(7) as c:
        try:
            for h in range(7):
                c.limit(h, a.rate)
            iperf = subprocess.Popen(c.on(1, ["iperf3", "-s", "-1", "-p", "5201"]), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            r = subprocess.run(c.on(6, ["iperf3", "-c", c.addr(1), "-p", "5201", "-t", "3", "-J"]),
                               stdout=subprocess.PIPE, text=True)
            iperf.wait(timeout=10)
            link = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8 if r.returncode == 0 else -1
            me = [sys.executable, os.path.abspath(__file__), "--size", str(a.size), "--runs", str(a.runs),
                  "--dir", work, "--token", token]
            env = dict(os.environ)
            for h, role in [(h, "holder") for h in range(1, 6)] + [(0, "saver"), (6, "reader")]:
                procs.append(subprocess.Popen(c.on(h, me + ["--role", role, "--host", str(h), "--addr", c.addr(h),
                                                            "--disk", c.disk(h)]), env=env))
            restored = json.loads(wait_for(os.path.join(work, "restored"), timeout_s=1800))
            saved = json.loads(wait_for(os.path.join(work, "saved")))
        finally:
            write_whole(os.path.join(work, "stop"), "")
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
    rep, cod = statistics.median(restored["replica"]), statistics.median(restored["coded"])
    out = {"bytes": a.size, "rate": a.rate, "runs": a.runs, "iperf3_bytes_per_s": link,
           "restore_replica_s": rep, "restore_coded_2_lost_s": cod, "coded_vs_replica_x": cod / rep,
           "replica_vs_iperf3": a.size / rep / link if link > 0 else -1,
           "save_replica_s": saved["replica_save_s"], "save_coded_s": saved["coded_save_s"],
           "replica_restores_s": restored["replica"], "coded_restores_s": restored["coded"],
           "coded_stats": restored["coded_stats"]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"state {a.size / 2**20:.0f} MiB, every link {a.rate} (iperf3 host 6 <- host 1: "
              f"{link / 1e6:.1f} MB/s); medians of {a.runs}:")
        print(f"  restore from a replica on host 1                 {rep:.3f} s ({a.size / rep / 1e6:.1f} MB/s, "
              f"{out['replica_vs_iperf3']:.2f}x iperf3)")
        print(f"  restore from RS(4+2) pieces, hosts 0 and 1 lost   {cod:.3f} s = {cod / rep:.2f}x the replica "
              f"restore ({restored['coded_stats']['bytes_rebuilt_from_parity'] / 2**20:.1f} MiB rebuilt)")
        print(f"  save (memory level, until committed): replica {saved['replica_save_s']:.3f} s, "
              f"RS(4+2) {saved['coded_save_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
