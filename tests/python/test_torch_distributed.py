"""4 gloo ranks save a model with its 2-d weights sharded along dim 0
(FSDP-style) and its biases replicated, declared by their layouts; 2 ranks
restore it (resharded) and the reassembled global state equals what was
saved. 4 data-parallel ranks of a CheckpointManager (2 per failure domain)
restore their replicated model and optimizer cooperatively: the checkpoint
is read from storage about once in all instead of 4 times, and every rank
gets it bit-exact.

    /usr/bin/python3 -m pytest test_torch_distributed.py     (PYTHONPATH holds ckpt)
Ranks are launched as processes with env:// (torchrun is not used).
"""
import os
import subprocess
import sys

import torch

from helpers import free_port


def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(10, 33), torch.nn.ReLU(), torch.nn.Linear(33, 7))


def manager_main(mode, root, out):
    """A data-parallel rank of a CheckpointManager: train, save at step 4,
    clobber, restore (cooperatively unless `mode` says "solo")."""
    import json

    import torch.distributed as dist

    from ckpt.torch import CheckpointManager

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    m = CheckpointManager(root, net, optimizer, interval=4, group=dist.group.WORLD, domain=f"node-{rank // 2}",
                          cooperative_load=mode != "solo")
    for step in range(1, 5):
        g = torch.Generator().manual_seed(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(torch.randn(16, 64, generator=g)), torch.randn(16, 64, generator=g)).backward()
        optimizer.step()
        m.step(step)
    m.wait()
    want = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    assert m.load_latest() == 4
    assert all(torch.equal(v, want[k]) for k, v in net.state_dict().items()), "the restore is not bit-exact"
    with open(f"{out}.{rank}", "w") as f:
        json.dump(m.last_load, f)
    m.close()
    dist.barrier()
    dist.destroy_process_group()


def rank_main(mode, root, out):
    import torch.distributed as dist

    import ckpt.torch as ct

    if mode in ("coop", "solo"):
        manager_main(mode, root, out)
        return
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    cp = ct.distributed_checkpointer(root)
    full = model().state_dict()
    if mode == "save":
        tensors = {k: ct.shard_rows(v, rank, world) if v.dim() == 2 else v for k, v in full.items()}
        # Rows from shard_rows and whole tensors: declared by their layouts
        # (the rows split over the ranks, the biases replicated).
        assert ct._layouts(cp, tensors) == {k: 0 if v.dim() == 2 else None for k, v in full.items()}
        assert ct._layouts(cp, dict(tensors, other=ct.Shard(full["0.weight"], [99, 10], [0, 0]))) is None
        ct.save_tensors(cp, 1, tensors).wait()
    else:
        targets = {}
        for k, v in full.items():
            if v.dim() == 2:
                s = ct.shard_rows(torch.zeros_like(v), rank, world)
                s.local = s.local.clone()  # its own contiguous buffer
                targets[k] = s
            else:
                targets[k] = torch.zeros_like(v)
        assert ct.load_tensors(cp, targets) == 1
        torch.save({k: (v.local, v.offsets) if isinstance(v, ct.Shard) else (v, None) for k, v in targets.items()},
                   f"{out}.{rank}")
    dist.barrier()
    dist.destroy_process_group()


def launch(mode, world, root, out):
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", mode, root, out], env=env))
    for p in procs:
        assert p.wait(timeout=240) == 0, f"a rank of '{mode}' failed"


def test_gloo_ranks_save_sharded_and_restore_resharded(tmp_path):
    work = str(tmp_path)
    launch("save", 4, f"{work}/root", f"{work}/unused")
    launch("load", 2, f"{work}/root", f"{work}/loaded")
    full = model().state_dict()
    parts = [torch.load(f"{work}/loaded.{r}") for r in range(2)]
    for name, value in full.items():
        if value.dim() == 2:
            got = torch.zeros_like(value)
            for part in parts:
                local, offsets = part[name]
                got[offsets[0]:offsets[0] + local.shape[0]] = local
        else:
            got = parts[1][name][0]
            assert torch.equal(parts[0][name][0], got), f"{name}: the two ranks' replicas differ"
        assert torch.equal(got, value), f"{name} differs after the resharded restore"
    print("torch.distributed: saved on 4 gloo ranks, restored on 2, identical")


def test_data_parallel_ranks_restore_reading_the_checkpoint_once(tmp_path):
    import json

    work = str(tmp_path)
    totals = {}
    for mode in ("coop", "solo"):
        launch(mode, 4, f"{work}/{mode}", f"{work}/{mode}-stats")
        stats = [json.load(open(f"{work}/{mode}-stats.{r}")) for r in range(4)]
        step_dir = f"{work}/{mode}/step-0000000004"
        stored = sum(os.path.getsize(os.path.join(step_dir, n)) for n in os.listdir(step_dir) if n.endswith(".ckd"))
        totals[mode] = (sum(s["bytes_from_storage"] for s in stats), stored, stats)
    coop, stored, stats = totals["coop"]
    assert all(s["cooperative"] for s in stats), stats
    assert sum(s["bytes_from_peers"] for s in stats) > 0, stats
    assert sum(s["peer_failovers"] for s in stats) == 0, stats
    solo = totals["solo"][0]
    assert not any(s["cooperative"] for s in totals["solo"][2]), totals["solo"][2]
    # The tree's blob and the manifest's parts are read by every rank in
    # both; the tensors, once cooperatively and 4 times alone.
    assert coop <= 1.1 * stored, (coop, stored)
    assert solo >= 3.5 * stored, (solo, stored)
    print(f"ckpt.torch: 4 ranks read {coop} bytes from storage cooperatively, {solo} alone ({stored} stored)")


if __name__ == "__main__":
    # One rank (the test launches them).
    rank_main(sys.argv[2], sys.argv[3], sys.argv[4])
