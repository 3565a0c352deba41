"""What several Python tests share: a free loopback port for a process
group, the S3 fixture's environment, and the small model and training step
of the storage-outage tests."""
import importlib.util
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """A loopback port below the ephemeral range (scripts/free-ports.py)."""
    spec = importlib.util.spec_from_file_location("free_ports", os.path.join(HERE, "..", "..", "scripts",
                                                                             "free-ports.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.free_ports(1)[0]


def s3_server():
    """AWS_* and S3_ENDPOINT from the S3 fixture's env file ($CKPT_S3_ENV),
    set for this process; returns the endpoint."""
    with open(os.environ["CKPT_S3_ENV"]) as f:
        for word in f.read().split():
            if "=" in word:
                k, v = word.split("=", 1)
                os.environ[k] = v
    return os.environ["S3_ENDPOINT"]


def small_model():
    """A small MLP and its AdamW, the same at every call."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def expect_restores(root, reference, step):
    """A new CheckpointManager on `root` restores `step` into a fresh
    small_model() whose parameters then equal `reference`'s bit for bit."""
    import ckpt.torch as ct

    restored, restored_opt = small_model()
    m = ct.CheckpointManager(root, restored, restored_opt, interval=5)
    assert m.load_latest() == step
    for a, b in zip(restored.parameters(), reference.parameters()):
        assert torch.equal(a, b), "the restored model differs"
    m.close()


def train_step(model, optimizer, step):
    """One step on a batch drawn from the step number."""
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
