#!/usr/bin/python3
"""A torch trainer that never notices checkpointing: a template to copy.

Run it as one process, or as the ranks of a gloo/NCCL job (RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT in the environment, as any launcher sets them):

    integrations/examples/torch_trainer.py --root /nvme/run7 --epochs 3

- ckpt's messages go to this program's own logger (`logging`, logger "ckpt");
- saves persist in the background at a lower priority, within a CPU budget;
- a save that fails (the storage is down) is logged and retried, and training
  goes on;
- SIGTERM or SIGUSR1 (a scheduler's notice) saves the step within the
  deadline and exits 143; the next start resumes from it;
- the data position is saved with each step and restored at any number of
  ranks: each epoch covers every sample exactly once.
"""
import argparse
import logging
import os
import signal

import torch

from ckpt.torch import CheckpointManager, DataPosition


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="checkpoint root: a path or a storage URI")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--preempt-deadline", type=float, default=30, help="seconds between SIGTERM and the kill")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log = logging.getLogger("trainer")

    group = None
    rank, world = 0, 1
    if "WORLD_SIZE" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://")
        group, rank, world = dist.group.WORLD, dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    xs = torch.randn(a.samples, 16, generator=torch.Generator().manual_seed(1))
    ys = xs @ torch.randn(16, 4, generator=torch.Generator().manual_seed(2))
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = DataPosition(a.samples, batch_size=a.batch, seed=0)
    manager = CheckpointManager(a.root, model, opt, interval=a.save_every, keep_last=3, group=group, data=data,
                                codec="zstd", background="batch", cpu_budget=1.0,
                                preempt_signals=(signal.SIGTERM, signal.SIGUSR1),
                                preempt_deadline=a.preempt_deadline)
    step = manager.load_latest() or 0
    log.info("rank %d of %d starts at step %d (epoch %d, %d samples in)", rank, world, step, data.epoch,
             data.consumed)
    while data.epoch < a.epochs:
        for indices in data.batches(rank, world):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xs[indices]), ys[indices])
            loss.backward()
            if group is not None:
                for p in model.parameters():
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= world
            opt.step()
            step += 1
            manager.step(step)  # saves, retries, or saves and exits on a preemption signal
            if step % 100 == 0:
                log.info("step %d epoch %d loss %.4f", step, data.epoch, loss.item())
    manager.close()
    log.info("done at step %d; %d failed saves", step, manager.failed_saves)


if __name__ == "__main__":
    main()
