"""Training goes on while the S3 gateway is down: a torch loop saves every 5
steps through a CheckpointManager to the suite's RADOS Gateway (ctest
fixture "s3"); the gateway process is killed at step 13 and started again
at step 27. The saves due meanwhile fail within their deadline and are
reported, training never stops, the saves after the restart commit, and
the model restored from the last one equals an uninterrupted run's.
RUN_SERIAL: it stops the gateway the other S3 tests share.

    CKPT_S3_ENV=build/tests/s3-server/env /usr/bin/python3 -m pytest test_s3_outage.py
"""
import os
import subprocess
import uuid

import torch

import ckpt.torch as ct

STEPS = 40
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "s3-server.sh")


def server():
    """AWS_* and S3_ENDPOINT from the fixture's env file, set for this process."""
    path = os.environ["CKPT_S3_ENV"]
    with open(path) as f:
        for word in f.read().split():
            if "=" in word:
                k, v = word.split("=", 1)
                os.environ[k] = v
    return os.environ["S3_ENDPOINT"]


def gateway(what):
    env = dict(os.environ, CEPH_S3_DIR=os.path.dirname(os.environ["CKPT_S3_ENV"]))
    subprocess.run([SCRIPT, what], env=env, check=True, capture_output=True, timeout=120)


def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return m, torch.optim.AdamW(m.parameters(), lr=1e-2)


def train(model, opt, step):
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def test_training_goes_on_while_the_gateway_is_down():
    endpoint = server()
    root = f"s3://ckpt-test/outage-{uuid.uuid4().hex[:8]}?endpoint={endpoint}&deadline=2"
    reference, ref_opt = make()
    for step in range(1, STEPS + 1):
        train(reference, ref_opt, step)
    model, opt = make()
    m = ct.CheckpointManager(root, model, opt, interval=5, keep_last=0, retry_backoff_steps=2)
    down = False
    try:
        for step in range(1, STEPS + 1):
            if step == 13:
                m.wait()
                gateway("kill-rgw")
                down = True
            if step == 27:
                gateway("start-rgw")
                down = False
            train(model, opt, step)
            m.step(step)
        m.close()
    finally:
        if down:
            gateway("start-rgw")  # whatever happened, the other tests get their gateway back
    failed = {e["step"] for e in m.save_errors}
    assert {15, 20, 25} <= failed and all(13 <= s < 27 for s in failed), m.save_errors
    committed = m.checkpointer.committed_steps()
    assert committed[:2] == [5, 10] and committed[-1] == STEPS, committed
    assert all(s in committed for s in range(30, STEPS + 1, 5)), committed
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    restored, restored_opt = make()
    r = ct.CheckpointManager(root, restored, restored_opt, interval=5)
    assert r.load_latest() == STEPS
    for a, b in zip(restored.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    r.close()
