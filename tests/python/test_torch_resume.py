"""A Transformer encoder trained with Adam, dropout and a step LR schedule:
a run SIGKILLed part-way and resumed from its last checkpoint ends with
parameters, optimizer state, scheduler and RNG bit-identical to a run that
was never interrupted.

    /usr/bin/python3 -m pytest test_torch_resume.py        (PYTHONPATH holds ckpt)
"""
import os
import signal
import subprocess
import sys

import torch

STEPS, INTERVAL, KILL_AT = 30, 5, 17


def train(root, out, kill_at):
    import ckpt.torch as ct

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.5)
    manager = ct.CheckpointManager(root, model, optimizer, scheduler, interval=INTERVAL, keep_last=2)
    start = manager.load_latest() or 0
    if start:
        print(f"resumed at step {start}", flush=True)
    for step in range(start + 1, STEPS + 1):
        x = torch.randn(8, 10, 32)  # the data stream is the RNG: restored with it
        loss = (model(x).squeeze(-1) - x.mean(-1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        manager.step(step, extra={"loss": loss.item()})
        if step == kill_at:
            manager.wait()  # the last save is committed; then the node dies
            os.kill(os.getpid(), signal.SIGKILL)
    manager.close()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state()}, out)


def equal(a, b, path="state"):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys differ"
        for k in a:
            equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a} != {b}"


def test_killed_run_resumes_bit_exactly(tmp_path):
    work = str(tmp_path)
    me = [sys.executable, __file__, "--train"]
    subprocess.run(me + [f"{work}/a", f"{work}/a.pt", "-1"], check=True)
    killed = subprocess.run(me + [f"{work}/b", f"{work}/b.pt", str(KILL_AT)])
    assert killed.returncode == -signal.SIGKILL, f"expected SIGKILL, got {killed.returncode}"
    assert not os.path.exists(f"{work}/b.pt")
    resumed = subprocess.run(me + [f"{work}/b", f"{work}/b.pt", "-1"], check=True, capture_output=True, text=True)
    assert "resumed at step 15" in resumed.stdout, resumed.stdout
    a, b = torch.load(f"{work}/a.pt"), torch.load(f"{work}/b.pt")
    equal(a, b)
    assert len(a["optimizer"]["state"]) > 0 and "exp_avg" in a["optimizer"]["state"][0]
    print("torch: killed at step 17, resumed from 15, bit-identical to the uninterrupted run")


if __name__ == "__main__":
    # A training run of its own (the test starts three).
    train(sys.argv[2], sys.argv[3], int(sys.argv[4]))
