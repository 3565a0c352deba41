"""ckpt.torch on an s3:// root (the suite's RADOS Gateway, ctest fixture
"s3"): a CheckpointManager saves a model and its optimizer there, and a new
process-like start restores them bit-exactly from it.

    CKPT_S3_ENV=build/tests/s3-server/env /usr/bin/python3 -m pytest test_s3.py
"""
import os
import uuid

import torch


import ckpt
import ckpt.torch as ct

from helpers import s3_server


def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    return m, torch.optim.AdamW(m.parameters(), lr=1e-3)


def test_manager_saves_to_s3_and_restores_bit_exactly():
    endpoint = s3_server()
    root = f"s3://ckpt-test/py-{uuid.uuid4().hex[:8]}?endpoint={endpoint}&part_size=5M"
    m, opt = model()
    mgr = ct.CheckpointManager(root, m, opt, interval=2, keep_last=2, codec="zstd")
    x = torch.randn(32, 64)
    for step in range(1, 7):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        if step % 2 == 0:
            mgr.save(step)
    mgr.wait()
    assert mgr.checkpointer.latest_step() == 6
    m2, opt2 = model()
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(1.0)  # differs from what was saved
    mgr2 = ct.CheckpointManager(root, m2, opt2, interval=2)
    assert mgr2.load_latest() == 6
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    for k in s1:
        for name in ["exp_avg", "exp_avg_sq"]:
            assert torch.equal(s1[k][name], s2[k][name]), (k, name)
    # A missing bucket is a clear error, not a hang.
    try:
        ckpt.Checkpointer(f"s3://no-such-bucket-py/x?endpoint={endpoint}")
        raise AssertionError("opening a missing bucket succeeded")
    except ckpt.Error as e:
        assert "no-such-bucket-py" in str(e) and "does not exist" in str(e), str(e)


def test_a_delta_chain_on_s3_restores_every_step():
    """Delta saves on the gateway: each step's deltas are objects like any
    data file, its base kept by retention, and every step restores exactly."""
    import ckpt._ckpt as _ckpt

    endpoint = s3_server()
    root = f"s3://ckpt-test/py-delta-{uuid.uuid4().hex[:8]}?endpoint={endpoint}&part_size=5M"
    m, opt = model()
    for p in m[0].parameters():
        p.requires_grad_(False)  # most of the model frozen: deltas of it are nearly empty
    mgr = ct.CheckpointManager(root, m, opt, interval=1, keep_last=2, codec="auto", delta_chain=3)
    x = torch.randn(32, 64)
    saved = {}
    for step in range(1, 5):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        mgr.step(step)
        mgr.wait()
        saved[step] = {k: v.clone() for k, v in m.state_dict().items()}
    mgr.close()
    reader = _ckpt.Checkpointer(root)
    # keep_last=2 keeps 3 and 4, and their base, step 1.
    assert reader.committed_steps() == [1, 3, 4], reader.committed_steps()
    for step in (1, 3, 4):
        m2, opt2 = model()
        got, _ = ct.load(reader, m2, opt2, step=step)
        assert got == step
        for k, v in saved[step].items():
            assert torch.equal(m2.state_dict()[k], v), (step, k)
