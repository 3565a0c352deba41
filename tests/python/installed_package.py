"""Run from outside the source tree by an interpreter that `pip install`ed
ckpt: the package imports from PREFIX, its native library is the copy in
the package (not the build tree), and a save and load round-trip.

    python installed_package.py PREFIX
"""
import os
import sys
import tempfile

import numpy as np

import ckpt


def main():
    prefix = os.path.realpath(sys.argv[1])
    where = os.path.realpath(ckpt.__file__)
    assert where.startswith(prefix + os.sep), f"ckpt imported from {where}, not from {prefix}"
    package = os.path.dirname(where)
    with open("/proc/self/maps") as f:
        maps = [line.split()[-1] for line in f]
    for lib in ("libckpt.so", "libckpt_coordinator.so"):
        libs = {p for p in maps if lib in p}
        assert libs and all(os.path.dirname(os.path.realpath(p)) == package for p in libs), (lib, libs)
    for name in ("py.typed", "_ckpt.pyi", "errors.py", "torch.py"):
        assert os.path.exists(os.path.join(package, name)), name
    with tempfile.TemporaryDirectory() as d:
        cp = ckpt.Checkpointer(os.path.join(d, "root"), codec="zstd")
        a = np.arange(4096, dtype=np.float32).reshape(64, 64)
        s = ckpt.State()
        ckpt.add_array(s, "a", a)
        cp.save(1, s).wait()
        b = np.zeros_like(a)
        t = ckpt.State()
        ckpt.add_array(t, "a", b)
        assert cp.load(t) == 1 and np.array_equal(a, b)
        try:
            cp.load(t, 2)
            raise AssertionError("a missing step loaded")
        except ckpt.NotFoundError:
            pass
        # The memory level (libckpt_coordinator): a save into this process's
        # memory and a peer's in another failure domain, read back.
        own = ckpt.PeerMemory("installed-package-token-0123456789", domain="a")
        peer = ckpt.PeerMemory("installed-package-token-0123456789", domain="b")
        mem = ckpt.Checkpointer(os.path.join(d, "root2"), memory=own, memory_replicas=[peer.endpoint])
        mem.save(3, s, level="memory").wait()
        b[:] = 0
        st = mem.load(t, 3, level="memory", stats=True)
        assert st["level"] == "memory" and st["bytes_from_storage"] == 0 and np.array_equal(a, b), st
        assert st["manifest_bytes"] > 0, st  # one rank alone reads the whole manifest
        assert peer.stats()["bytes_received"] > 0
    print(f"installed package ok: {package}")


if __name__ == "__main__":
    main()
