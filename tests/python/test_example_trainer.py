"""The example torch trainer (integrations/examples/torch_trainer.py) does
what it says: SIGTERM mid-run saves the step and exits 143, and the next
start resumes from that step, with its data position, to the end.

    /usr/bin/python3 -m pytest test_example_trainer.py     (PYTHONPATH holds ckpt)
"""
import os
import signal
import subprocess
import sys
import time

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "integrations", "examples",
                       "torch_trainer.py")


def test_the_example_trainer_is_preempted_and_resumes(tmp_path):
    root = str(tmp_path / "root")
    args = [sys.executable, EXAMPLE, "--root", root, "--epochs", "2", "--samples", "20000", "--batch", "8",
            "--save-every", "1000", "--preempt-deadline", "5"]
    log = tmp_path / "first.log"
    with open(log, "w") as f:
        p = subprocess.Popen(args, stderr=f, stdout=f)
        t0 = time.monotonic()
        while "step 300 " not in log.read_text():
            assert p.poll() is None and time.monotonic() - t0 < 120, log.read_text()
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 143, log.read_text()
    text = log.read_text()
    assert "ckpt WARNING preempted: step " in text and "committed (durable)" in text, text
    step = int(text.split("preempted: step ")[1].split()[0])
    second = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"starts at step {step} (epoch 0, {step * 8} samples in)" in second.stderr, second.stderr
    assert "done at step 5000; 0 failed saves" in second.stderr, second.stderr
