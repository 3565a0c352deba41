"""Preemption saves: 4 gloo ranks train with a CheckpointManager catching
SIGTERM (deadline 3 s); the test sends SIGTERM to every rank at a random
moment, as a scheduler does before it kills a job. At the next step every
rank saves that step; the save commits before the deadline and the ranks
exit with 143. The next start restores that step bit-exactly (against the
same training replayed without checkpoints), trains on, and is preempted in
turn: 20 trials in a row, each one's restart the next one's check.

    /usr/bin/python3 -m pytest test_torch_preemption.py     (PYTHONPATH holds ckpt)
Ranks are launched as processes with env:// (torchrun is not used).
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

import torch

from helpers import free_port


TRIALS, WORLD, DEADLINE = 20, 4, 3.0


def make():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def rank_main(root, out, trial):
    import torch.distributed as dist

    from ckpt.torch import CheckpointManager

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, opt = make()
    m = CheckpointManager(root, model, opt, interval=1000, keep_last=2, group=dist.group.WORLD,
                          cooperative_load=False, preempt_signals=(signal.SIGTERM,), preempt_deadline=DEADLINE)
    step = m.load_latest() or 0
    if rank == 0:
        # The restore equals the same steps trained without checkpoints.
        ref, ref_opt = make()
        for s in range(1, step + 1):
            x, y = batch(s)
            ref_opt.zero_grad()
            torch.nn.functional.mse_loss(ref(x), y).backward()
            ref_opt.step()
        exact = all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters()))
        with open(f"{out}/restored.{trial}", "w") as f:
            json.dump({"step": step, "exact": exact}, f)
    dist.barrier()
    open(f"{out}/ready.{trial}.{rank}", "w").close()
    while True:
        x, y = batch(step + 1)  # every rank the same batch: the mean gradient is that batch's
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        step += 1
        m.step(step)  # exits with 143 once preempted


def test_sigterm_saves_before_the_deadline_and_the_next_start_resumes(tmp_path):
    root, out = str(tmp_path / "root"), str(tmp_path / "out")
    os.makedirs(out)
    rng = random.Random(5)
    for trial in range(TRIALS + 1):
        port = free_port()
        procs = []
        for rank in range(WORLD):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       WORLD_SIZE=str(WORLD))
            procs.append(subprocess.Popen([sys.executable, __file__, "--rank", root, out, str(trial)], env=env,
                                          stderr=subprocess.PIPE, text=True))
        t0 = time.monotonic()
        while not all(os.path.exists(f"{out}/ready.{trial}.{r}") for r in range(WORLD)):
            assert time.monotonic() - t0 < 120 and all(p.poll() is None for p in procs), f"trial {trial}: no start"
            time.sleep(0.02)
        restored = json.load(open(f"{out}/restored.{trial}"))
        assert restored["exact"], f"trial {trial}: the restore of step {restored['step']} is not bit-exact"
        if trial > 0:
            assert restored["step"] == preempted_step, (trial, restored, preempted_step)
        if trial == TRIALS:  # the last start only checks the previous preemption
            for p in procs:
                p.kill()
                p.wait()
            break
        time.sleep(rng.uniform(0.2, 0.8))
        signalled = time.monotonic()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errs = []
        for p in procs:
            _, err = p.communicate(timeout=60)
            errs.append(err)
            assert p.returncode == 143, f"trial {trial}: exit {p.returncode}\n{err}"
        took = time.monotonic() - signalled
        said = [line for line in errs[0].splitlines() if "preempted: step" in line]
        assert said and "committed (durable)" in said[-1], errs[0]
        preempted_step = int(said[-1].split("preempted: step ")[1].split()[0])
        seconds = float(said[-1].split(") ")[1].split(" s")[0])
        assert seconds <= DEADLINE, f"trial {trial}: committed {seconds} s after the signal"
        assert took < DEADLINE + 10, f"trial {trial}: the ranks took {took:.1f} s to exit"


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--rank":
    rank_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
