"""ckpt.torch against torch.save on the same state_dict, interleaved.

    PYTHONPATH=build/integrations/python /usr/bin/python3 benchmarks/torch_bench.py \
        --dir /tmp/tb --size 1G --runs 3

For each run: torch.save + fsync (wall time), then ckpt.torch.save: the time
the training loop is blocked (until save() returns) and the time until the
step is committed (durable). Medians, with each run's ratios.
"""
import argparse
import os
import shutil
import statistics
import time

import torch

import ckpt.torch as ct
from ckpt import _ckpt


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    size = parse_size(args.size)
    torch.manual_seed(0)
    layers = max(1, size // (64 << 20))
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=True) for _ in range(layers)])
    nbytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    print(f"state_dict: {layers} Linear(4096, 4096) f32 layers, {nbytes / 2**30:.2f} GiB")
    os.makedirs(args.dir, exist_ok=True)
    ts, stall, commit = [], [], []
    for run in range(args.runs):
        path = os.path.join(args.dir, "torch.pt")
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(model.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        ts.append(time.perf_counter() - t0)
        os.remove(path)

        root = os.path.join(args.dir, "ckpt")
        shutil.rmtree(root, ignore_errors=True)
        cp = _ckpt.Checkpointer(root, staging_bytes=nbytes + (64 << 20))
        t0 = time.perf_counter()
        handle = ct.save(cp, run + 1, model=model, rng=True)
        stall.append(time.perf_counter() - t0)
        handle.wait()
        commit.append(time.perf_counter() - t0)
        del cp
        shutil.rmtree(root, ignore_errors=True)
        print(f"run {run + 1}: torch.save+fsync {ts[-1]:.2f} s; ckpt blocked {stall[-1]:.3f} s "
              f"({stall[-1] / ts[-1]:.3f}x), committed {commit[-1]:.2f} s ({commit[-1] / ts[-1]:.2f}x)", flush=True)
    m_ts, m_st, m_co = statistics.median(ts), statistics.median(stall), statistics.median(commit)
    gb = nbytes / 1e9
    print(f"\nmedians over {args.runs} runs ({gb:.2f} GB):")
    print(f"  torch.save + fsync        {m_ts:7.3f} s  {gb / m_ts:6.2f} GB/s")
    print(f"  ckpt: training blocked    {m_st:7.3f} s  {m_st / m_ts:6.3f}x torch.save (target <= 0.1)")
    print(f"  ckpt: durable, committed  {m_co:7.3f} s  {m_co / m_ts:6.3f}x torch.save (target < 1)")


if __name__ == "__main__":
    main()
