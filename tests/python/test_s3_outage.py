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

from helpers import expect_restores, s3_server, small_model, train_step

STEPS = 40
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "s3-server.sh")


def gateway(what):
    env = dict(os.environ, CEPH_S3_DIR=os.path.dirname(os.environ["CKPT_S3_ENV"]))
    subprocess.run([SCRIPT, what], env=env, check=True, capture_output=True, timeout=120)


def test_training_goes_on_while_the_gateway_is_down():
    endpoint = s3_server()
    root = f"s3://ckpt-test/outage-{uuid.uuid4().hex[:8]}?endpoint={endpoint}&deadline=2"
    reference, ref_opt = small_model()
    for step in range(1, STEPS + 1):
        train_step(reference, ref_opt, step)
    model, opt = small_model()
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
            train_step(model, opt, step)
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
    expect_restores(root, reference, STEPS)
