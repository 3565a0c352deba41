#!/usr/bin/python3
"""Does the trainer notice checkpointing? A real torch training loop (a small
transformer with AdamW, on one thread) runs its steps while ckpt persists
saves in the background, at the durable level (a root on --dir) and at the
memory level (copies sent to a peer memory in another process, another
failure domain), and without any saves. Rounds alternate the three, so that
drift of the machine falls on each alike.

The figure is the median time of a training step (forward, backward,
optimizer: the save's own stall is not in it) among the steps that start
while a save is still persisting, over the median step of the runs without
saves.

    benchmarks/interference_bench.py [--dir DIR] [--rounds 3] [--steps 40] [--json]
Needs the build's Python package on PYTHONPATH (benchmarks/run sets it).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import ckpt
import ckpt.torch as ct

HOLDER = """
import sys, time, ckpt
m = ckpt.PeerMemory(sys.argv[1], domain="holder", budget_bytes=2 << 30, listen="127.0.0.1:0")
print(m.endpoint, flush=True)
sys.stdin.read()
"""


def build(d, layers):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, layers)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def run(mode, a, holder, work, first):
    """Step times of one run, and whether each started with a save in flight.
    Its steps are numbered from `first`: the holder keeps the memory level's
    newest step from one run to the next."""
    model, opt = build(a.d, a.layers)
    x = torch.randn(a.batch, a.tokens, a.d, generator=torch.Generator().manual_seed(1))

    def train():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    for _ in range(3):
        train()
    cp = None
    root = os.path.join(work, f"root-{mode}-{time.monotonic_ns()}")
    if mode == "durable":
        cp = ckpt.Checkpointer(root, codec=a.codec, keep_last=2, background=a.background, cpu_budget=a.cpu_budget)
    elif mode == "memory":
        memory = ckpt.PeerMemory(a.token, domain="trainer", budget_bytes=2 << 30, listen="127.0.0.1:0")
        cp = ckpt.Checkpointer(root, codec=a.codec, keep_last=2, memory=memory, memory_replicas=[holder],
                               memory_peers=[memory.endpoint, holder], memory_holders=[[memory.endpoint, holder]],
                               background=a.background, cpu_budget=a.cpu_budget,
                               memory_send_bytes_per_s=a.send_rate)
    times, busy, pending = [], [], None
    for step in range(1, a.steps + 1):
        inflight = pending is not None and not pending.done()
        t = time.perf_counter()
        train()
        times.append(time.perf_counter() - t)
        busy.append(inflight)
        if cp is not None and step % a.every == 0:
            if pending is not None:
                pending.wait()
            pending = ct.save(cp, first + step, model, opt, level=mode)
    if pending is not None:
        pending.wait()
    if cp is not None:
        cp.wait_all()
    shutil.rmtree(root, ignore_errors=True)
    return times, busy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--dir", default="/var/tmp/ckpt-bench", help="where the durable saves go")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="training steps of each run")
    ap.add_argument("--every", type=int, default=4, help="a save every N steps")
    ap.add_argument("--codec", default="zstd", help="the saves' codec (compression works the background threads)")
    ap.add_argument("--d", type=int, default=256, help="model width")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--background", default="batch", choices=["batch", "idle", "normal"],
                    help="the background threads' CPU policy (SaveEngineOptions::background_idle)")
    ap.add_argument("--cpu-budget", type=float, default=0, help="cores the background threads may use (0: no cap)")
    ap.add_argument("--send-rate", type=float, default=0, help="memory level: bytes/s its copies are sent at (0: unpaced)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    a.token = "interference-bench-token-0123456789"
    os.makedirs(a.dir, exist_ok=True)
    work = tempfile.mkdtemp(dir=a.dir, prefix="interference-")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, a.token], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        endpoint = holder.stdout.readline().strip()
        got = {"none": [], "durable": [], "memory": []}
        for r in range(a.rounds):
            for mode in got:
                times, busy = run(mode, a, endpoint, work, (r + 1) * 100000)
                # The first steps after the warm-up pay for allocations.
                got[mode].append((times[2:], busy[2:]))
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(t for times, _ in got["none"] for t in times)
    params = sum(p.numel() for p in build(a.d, a.layers)[0].parameters())
    out = {"config": {"params": params, "state_bytes": params * 12, "steps": a.steps, "rounds": a.rounds,
                      "every": a.every, "codec": a.codec, "cores": os.cpu_count(), "torch_threads": 1,
                      "background": a.background, "cpu_budget": a.cpu_budget, "send_bytes_per_s": a.send_rate},
           "step_s_without_saves": base}
    for mode in ["durable", "memory"]:
        during = [t for times, busy in got[mode] for t, b in zip(times, busy) if b]
        everything = [t for times, _ in got[mode] for t in times]
        out[mode] = {"step_s_during_saves": statistics.median(during) if during else None,
                     "steps_during_saves": len(during),
                     "ratio": statistics.median(during) / base if during else None,
                     "ratio_all_steps": statistics.median(everything) / base}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{params:,} parameters ({params * 12 / 2**20:.0f} MiB of state with AdamW), a {a.codec} save every "
              f"{a.every} steps; step without saves {base * 1000:.1f} ms (p50)")
        for mode in ["durable", "memory"]:
            m = out[mode]
            if m["ratio"] is None:
                print(f"{mode}: no step ran while a save persisted")
                continue
            print(f"{mode}: {m['step_s_during_saves'] * 1000:.1f} ms during background persistence (p50 of "
                  f"{m['steps_during_saves']} steps): {m['ratio']:.3f}x; all steps {m['ratio_all_steps']:.3f}x")


if __name__ == "__main__":
    main()
