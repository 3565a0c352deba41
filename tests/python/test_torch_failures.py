"""Failures of checkpointing never stop training: a real torch training loop
saves every 5 steps through a storage that goes down for a while (faulty://
with an outage file). The saves meanwhile fail and are reported (counted,
listed, logged at warning), a failed save is retried after its backoff, and
once the storage is back the saves commit again, a retry among them. The
trained model equals an uninterrupted run's, and the last step restores it
bit-exactly. With raise_on_save_error the failure is raised instead.

    /usr/bin/python3 -m pytest test_torch_failures.py      (PYTHONPATH holds ckpt)
"""
import logging
import os

import pytest
import torch

import ckpt
import ckpt.torch as ct

from helpers import expect_restores, small_model, train_step

STEPS = 60


def test_training_goes_on_through_a_storage_outage(tmp_path, caplog):
    reference, ref_opt = small_model()
    for step in range(1, STEPS + 1):
        train_step(reference, ref_opt, step)

    down = tmp_path / "storage-down"
    root = f"faulty://{tmp_path}/root?fault.outage_file={down}"
    model, opt = small_model()
    m = ct.CheckpointManager(root, model, opt, interval=5, keep_last=0, retry_backoff_steps=2, retry_attempts=3)
    assert m.load_latest() is None
    caplog.set_level(logging.INFO, logger="ckpt")
    for step in range(1, STEPS + 1):
        if step == 13:
            down.write_text("")  # the storage goes down
        if step == 27:
            down.unlink()  # and comes back
        train_step(model, opt, step)
        m.step(step)
    m.close()

    failed = sorted({e["step"] for e in m.save_errors})
    assert m.failed_saves == len(m.save_errors) >= 4, m.save_errors
    # Those due while it was down, and the one in flight when it went down.
    assert {15, 20, 25} <= set(failed) and all(10 <= s < 27 for s in failed), failed
    assert all(e["level"] == "durable" and "storage is down" in e["error"] for e in m.save_errors), m.save_errors
    ckpt._ckpt._flush_log()
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any(lv == logging.WARNING and "durable save of step 15 by rank 0 failed" in msg for lv, msg in said), said
    assert any(lv == logging.INFO and "save of step 15 failed; retrying at step " in msg for lv, msg in said), said
    counts = m.checkpointer.counts()
    assert counts["failed"] == m.failed_saves and counts["committed"] >= 7, counts
    assert "storage is down" in counts["last_error"], counts
    committed = m.checkpointer.committed_steps()
    assert committed[0] == 5 and all(s not in committed for s in failed), committed
    retried = [s for s in committed if s % 5 != 0]
    assert retried and 27 <= retried[0] < 30, committed  # a retry committed once the storage was back
    assert [s for s in committed if s >= 30] == list(range(30, STEPS + 1, 5)), committed

    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b), "saving through the outage changed the training"
    expect_restores(root, reference, STEPS)


def test_raise_on_save_error_raises_at_the_next_save(tmp_path):
    down = tmp_path / "down"
    model, opt = small_model()
    m = ct.CheckpointManager(f"faulty://{tmp_path}/root?fault.outage_file={down}", model, opt, interval=2,
                             raise_on_save_error=True)
    train_step(model, opt, 1)
    m.step(1)
    down.write_text("")
    train_step(model, opt, 2)
    with pytest.raises(ckpt.UnavailableError, match="storage is down"):
        m.step(2)
    os.unlink(down)
