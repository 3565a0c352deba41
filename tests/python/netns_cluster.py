"""Hosts as network namespaces for the Python tests: a face of
scripts/cluster.sh (the C++ tests use tests/support/netns_cluster.h). Each
host has its own network stack, address, hostname and local-disk directory
on a bridge of the cluster's own; links can be cut, cut one way, slowed and healed. The cluster
belongs to this process: leaving the `with` block removes it, and if the
process dies first, the next cluster made on the machine collects it.
Needs root.

    with NetnsCluster(3) as c:
        p = subprocess.Popen(c.on(1, [sys.executable, "rank.py"]), env=...)
        c.cut(1); c.heal(1)
"""
import os
import subprocess

CLUSTER_SH = os.environ.get(
    "CKPT_CLUSTER_SH", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "cluster.sh"))


def _run(*args):
    r = subprocess.run([CLUSTER_SH, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cluster.sh {' '.join(map(str, args))} failed ({r.returncode}): {r.stdout}")
    return r.stdout.strip()


class NetnsCluster:
    def __init__(self, hosts):
        self.hosts = hosts
        self.id = _run("up", hosts, "--owner", os.getpid())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.id:
            _run("down", self.id)
            self.id = None

    def addr(self, host):
        """The host's address."""
        return _run("addr", self.id, host)

    def disk(self, host):
        """The host's local-disk directory ($CKPT_HOST_DISK on the host)."""
        return _run("disk", self.id, host)

    def hostname(self, host):
        return f"ck-{self.id}-h{host}"

    def on(self, host, args, clock=None):
        """The command line that runs `args` on `host` (for subprocess);
        `clock`: an offset for faketime ("+120s")."""
        out = [CLUSTER_SH, "exec", self.id, str(host)]
        if clock:
            out += ["--clock", clock]
        return out + list(args)

    def cut(self, host):
        _run("cut", self.id, host)

    def cut_from(self, host, peer):
        """`host`'s packets to `peer` are dropped; the other way still works."""
        _run("cut-from", self.id, host, peer)

    def limit(self, host, rate):
        _run("limit", self.id, host, rate)

    def heal(self, host):
        _run("heal", self.id, host)
