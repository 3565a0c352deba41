"""numpy arrays round-trip zero-copy (a load writes into the caller's
array), errors surface as Python exceptions with the reason, and a
CheckpointManager driven by an IntervalPolicy saves on its own and learns
the measured save costs.

    /usr/bin/python3 numpy_and_policy.py WORKDIR      (PYTHONPATH holds ckpt)
"""
import sys
import time

import numpy as np
import torch

import ckpt
import ckpt.torch as ct


def main():
    work = sys.argv[1]
    cp = ckpt.Checkpointer(f"{work}/np", codec="zstd")
    a = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    s = ckpt.State()
    ckpt.add_array(s, "a", a)
    s.add_blob("meta", b"\x00\x01binary", True)
    cp.save(3, s).wait()
    b = np.zeros_like(a)
    t = ckpt.State()
    ckpt.add_array(t, "a", b[:32], global_shape=a.shape, offsets=(0, 0))
    t.want_blob("meta", True)
    assert cp.load(t) == 3
    assert np.array_equal(b[:32], a[:32]) and not b[32:].any(), "the load did not write into the array"
    assert t.blob("meta") == b"\x00\x01binary"
    try:
        cp.load(t, 99)
        raise AssertionError("loading a missing step succeeded")
    except KeyError as e:
        assert "99" in str(e), e
    try:
        cp.save(3, s).wait()
        raise AssertionError("saving a committed step again succeeded")
    except (ValueError, RuntimeError) as e:
        assert "3" in str(e), e

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    policy = ckpt.IntervalPolicy(mtbf_s=3600, restart_s=1, stall_s=0.001, write_s=0.01,
                                 min_interval_s=0.05, max_interval_s=0.2)
    manager = ct.CheckpointManager(f"{work}/policy", model, policy=policy, keep_last=2)
    t0 = time.monotonic()
    step = 0
    while time.monotonic() - t0 < 1.5:
        step += 1
        time.sleep(0.01)
        manager.step(step)
    manager.close()
    assert 3 <= manager.saves <= 40, f"{manager.saves} saves in 1.5 s"
    assert 0.05 <= policy.interval_s <= 0.2, policy.interval_s
    assert policy.write_s > 0
    print(f"numpy round trip ok; policy-driven manager saved {manager.saves} times "
          f"(interval {policy.interval_s:.3f} s, measured write {policy.write_s:.4f} s)")


if __name__ == "__main__":
    main()
