"""A data position that reshards: gloo ranks train 3 epochs over 10,000
samples with a DataPosition saved by their CheckpointManager; the job is
SIGKILLed and resumed twice, on 4, then 3, then 2 ranks. The ledger of the
samples each rank trained on, cut at the step each restart restored, holds
every index exactly once per epoch. At the same size (2 ranks, killed once)
the order and the final model equal an uninterrupted run's bit for bit.

    /usr/bin/python3 -m pytest test_torch_data_position.py     (PYTHONPATH holds ckpt)
Ranks are launched as processes with env:// (torchrun is not used).
"""
import os
import signal
import subprocess
import sys

import torch

from helpers import free_port


SIZE, BATCH, EPOCHS, SEED = 10_000, 25, 3, 7


def rank_main(root, out, phase, kill_at):
    import torch.distributed as dist

    from ckpt.torch import CheckpointManager, DataPosition

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(SIZE, 8, generator=g), torch.randn(SIZE, 4, generator=g)
    pos = DataPosition(SIZE, batch_size=BATCH, seed=SEED)
    m = CheckpointManager(root, model, opt, interval=10, keep_last=0, group=dist.group.WORLD,
                          cooperative_load=False, data=pos)
    step = m.load_latest() or 0
    if rank == 0:
        with open(f"{out}/restored.{phase}", "w") as f:
            f.write(str(step))
    ledger = open(f"{out}/ledger.{phase}.{rank}", "w")
    while pos.epoch < EPOCHS:
        for idx in pos.batches(rank, world):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xs[idx]), ys[idx], reduction="sum")
            loss.backward()
            for p in model.parameters():  # the global batch's mean gradient
                dist.all_reduce(p.grad)
                p.grad /= min(world * BATCH, SIZE)
            opt.step()
            step += 1
            ledger.write(f"{step} {pos.epoch} {' '.join(map(str, idx))}\n")
            ledger.flush()
            m.step(step)
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
    m.close()
    if rank == 0:
        torch.save(model.state_dict(), f"{out}/final.pt")
    dist.barrier()
    dist.destroy_process_group()


def run_phase(root, out, phase, world, kill_at):
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", root, out, str(phase), str(kill_at)],
                                      env=env))
    for p in procs:
        code = p.wait(timeout=300)
        assert code == (-signal.SIGKILL if kill_at > 0 else 0), f"phase {phase}: a rank exited with {code}"


def effective_ledger(out, phases):
    """(step, epoch, rank, indices) of what each phase trained up to the
    step the next one restored."""
    entries = []
    for i, world in enumerate(phases):
        restored_next = int(open(f"{out}/restored.{i + 1}").read()) if i + 1 < len(phases) else None
        for rank in range(world):
            with open(f"{out}/ledger.{i}.{rank}") as f:
                for line in f:
                    step, epoch, *idx = line.split()
                    if restored_next is None or int(step) <= restored_next:
                        entries.append((int(step), int(epoch), rank, [int(x) for x in idx]))
    return sorted(entries, key=lambda e: (e[0], e[2]))


def run_job(tmp, name, plan):
    """plan: [(world, kill_at or 0)]; returns the effective ledger and out dir."""
    root, out = str(tmp / f"{name}-root"), str(tmp / f"{name}-out")
    os.makedirs(out)
    for phase, (world, kill_at) in enumerate(plan):
        run_phase(root, out, phase, world, kill_at)
    return effective_ledger(out, [w for w, _ in plan]), out


def test_the_data_position_reshards_exactly_once_and_resumes_bit_identically(tmp_path):
    ledger, _ = run_job(tmp_path, "shrink", [(4, 53), (3, 113), (2, 0)])
    steps = [e[0] for e in ledger]
    assert len(set(steps)) == steps[-1] and min(steps) == 1, "the restored steps do not continue each other"
    for epoch in range(EPOCHS):
        seen = [i for e in ledger if e[1] == epoch for i in e[3]]
        assert len(seen) == SIZE and sorted(seen) == list(range(SIZE)), \
            f"epoch {epoch}: {len(seen) - len(set(seen))} duplicates, {SIZE - len(set(seen))} gaps"
    assert {e[2] for e in ledger if e[0] > 113} == {0, 1}  # the last phase on 2 ranks

    straight, straight_out = run_job(tmp_path, "straight", [(2, 0)])
    resumed, resumed_out = run_job(tmp_path, "resumed", [(2, 37), (2, 0)])
    assert resumed == straight, "a resumed run at the same size consumed another order"
    a, b = torch.load(f"{straight_out}/final.pt"), torch.load(f"{resumed_out}/final.pt")
    assert all(torch.equal(a[k], b[k]) for k in a), "the final model differs from the uninterrupted run's"


def test_batches_cover_each_epoch_once_at_any_size():
    from ckpt.torch import DataPosition

    pos = DataPosition(1003, batch_size=4, seed=1)
    seen = []
    for world in [4, 3, 3, 2, 5]:  # a resize every few steps, mid-epoch
        for _ in range(3):
            parts = [next(pos.batches(r, world), []) for r in range(world)]
            seen.append([i for p in parts for i in p])
            pos.advance(world)
    flat = [i for batch in seen for i in batch]
    assert flat == pos.order(0)[:len(flat)], "the global order depends on the sizes"
    restored = DataPosition(1003, batch_size=4, seed=1)
    restored.load_state_dict(pos.state_dict())
    assert list(restored.batches(0, 2)) == list(pos.batches(0, 2))
    # To the epoch's end: what is left, then the next epoch in a new order.
    rest = [i for r in range(3) for b in pos.batches(r, 3) for i in b]
    assert sorted(rest + flat) == list(range(1003))
    while pos.epoch == 0:
        pos.advance(3)
    assert pos.consumed == 0 and pos.order(1) != pos.order(0)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--rank":
    rank_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
