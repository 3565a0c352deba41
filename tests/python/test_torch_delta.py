"""Delta saves through ckpt.torch.CheckpointManager(delta_chain=K): with
most parameters frozen a delta step stores a small fraction of a whole one,
and every saved step, whole or delta, restores bit-exactly.

    /usr/bin/python3 -m pytest test_torch_delta.py        (PYTHONPATH holds ckpt)
"""
import copy
import os

import torch


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    for p in model[0].parameters():
        p.requires_grad_(False)  # the frozen backbone: 97% of the parameters
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, optimizer


def step_bytes(root, step):
    d = os.path.join(root, "step-%010d" % step)
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".ckd"))


def test_every_saved_step_restores_and_frozen_tensors_cost_little(tmp_path):
    import ckpt._ckpt as _ckpt
    import ckpt.torch as ct

    root = str(tmp_path / "root")
    model, optimizer = model_and_optimizer()
    manager = ct.CheckpointManager(root, model, optimizer, interval=5, keep_last=0, codec="auto", delta_chain=3)
    saved = {}
    for step in range(1, 31):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(16, 512, generator=g), torch.randn(16, 8, generator=g)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        manager.step(step)
        if step % 5 == 0:
            manager.wait()
            saved[step] = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
    manager.close()
    # Step 5 is whole; 10, 15 and 20 are deltas against it; 25 is whole again.
    whole, delta = step_bytes(root, 5), step_bytes(root, 10)
    assert delta < 0.15 * whole, (delta, whole)
    assert step_bytes(root, 25) > 0.5 * whole
    reader = _ckpt.Checkpointer(root)
    for step, (params, opt_state) in saved.items():
        model2, optimizer2 = model_and_optimizer()
        got, _ = ct.load(reader, model2, optimizer2, step=step)
        assert got == step
        for name, tensor in params.items():
            assert torch.equal(model2.state_dict()[name], tensor), (step, name)
        for k, v in opt_state["state"].items():
            for field in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(optimizer2.state_dict()["state"][k][field], v[field]), (step, k, field)
