"""What users would pick instead of ckpt, measured on the same bytes.

One measured operation per process, started by benchmarks/run.py, which reads
the JSON line printed at the end. Every state is the synthetic model of
`ckpt synth --params N` (the same values the C++ probe saves), built before
the clock starts. Loads first drop the file from the page cache, so they read
from the disk as ckpt's O_DIRECT loads do.

    python3 contenders.py torch-save --file F --params 128M --dtype bf16
    python3 contenders.py torch-load --file F --params 128M --dtype bf16
    python3 contenders.py h5py-save  --file F ...   |  h5py-load --file F ...
    python3 contenders.py ckpt-py-save --root DIR ...
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

from ckpt import _ckpt
import ckpt.torch as ct

TORCH_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
CKPT_DTYPES = {"bf16": "bfloat16", "f32": "float32"}


def parse_count(text):
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def synthetic_state(params, dtype, seed=1):
    """{name: tensor} of the synthetic model, filled with its values."""
    out = {}
    for name, shape in _ckpt.synthetic_tensors(params, CKPT_DTYPES[dtype]):
        t = torch.empty(shape, dtype=TORCH_DTYPES[dtype])
        _ckpt.fill_synthetic(name, CKPT_DTYPES[dtype], shape, seed, t.data_ptr())
        out[name] = t
    return out


def state_bytes(state):
    return sum(t.numel() * t.element_size() for t in state.values())


def fsync(path, evict=False):
    """fsyncs a file or directory; with `evict`, also drops the file from the
    page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if evict:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_save(a, write):
    """Times write(path) plus fsync of the file and its directory, then drops
    the file from the page cache for the load that follows."""
    state = synthetic_state(a.params, a.dtype)
    t0 = time.perf_counter()
    write(state, a.file)
    fsync(a.file)
    fsync(os.path.dirname(os.path.abspath(a.file)))
    seconds = time.perf_counter() - t0
    fsync(a.file, evict=True)
    return {"seconds": seconds, "bytes": state_bytes(state), "file_bytes": os.path.getsize(a.file)}


def timed_load(a, read, check):
    """Times read(path) from a cold page cache, then check(expected, got)."""
    fsync(a.file, evict=True)
    t0 = time.perf_counter()
    got = read(a.file)
    seconds = time.perf_counter() - t0
    expected = synthetic_state(a.params, a.dtype)
    check(expected, got)
    return {"seconds": seconds, "bytes": state_bytes(expected)}


def torch_save(a):
    def write(state, path):
        with open(path, "wb") as f:
            torch.save(state, f)

    return timed_save(a, write)


def torch_load(a):
    def check(expected, got):
        for name, t in expected.items():
            if tuple(got[name].shape) != tuple(t.shape) or not torch.equal(got[name], t):
                sys.exit(f"torch.load: tensor '{name}' differs from what was saved")

    return timed_load(a, lambda path: torch.load(path, map_location="cpu"), check)


def h5_array(t):
    # HDF5 has no bfloat16: such tensors are stored as their 16-bit patterns.
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def h5py_save(a):
    import h5py

    def write(state, path):
        arrays = {name: h5_array(t) for name, t in state.items()}
        with h5py.File(path, "w") as f:
            for name, arr in arrays.items():
                f.create_dataset(name, data=arr)

    return timed_save(a, write)


def h5py_load(a):
    import h5py

    def read(path):
        got = {}
        with h5py.File(path, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    got[name] = obj[...]
            f.visititems(visit)
        return got

    def check(expected, got):
        for name, t in expected.items():
            if not np.array_equal(got[name], h5_array(t)):
                sys.exit(f"h5py: dataset '{name}' differs from what was saved")

    return timed_load(a, read, check)


def ckpt_py_save(a):
    state = synthetic_state(a.params, a.dtype)
    nbytes = state_bytes(state)
    cp = _ckpt.Checkpointer(a.root, codec=a.codec, staging_bytes=nbytes + (16 << 20))
    ct.save_tensors(cp, 0, state).wait()  # warm-up: maps the staging arena
    t0 = time.perf_counter()
    handle = ct.save_tensors(cp, 1, state)
    blocked = time.perf_counter() - t0
    handle.wait()
    committed = time.perf_counter() - t0
    return {"stall_s": blocked, "commit_s": committed, "bytes": nbytes, "bytes_stored": handle.bytes_stored}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["torch-save", "torch-load", "h5py-save", "h5py-load", "ckpt-py-save"])
    ap.add_argument("--file", help="file to write or read")
    ap.add_argument("--root", help="checkpoint root (ckpt-py-save)")
    ap.add_argument("--params", default="128M", help="parameters of the synthetic model")
    ap.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPES))
    ap.add_argument("--codec", default="none")
    a = ap.parse_args()
    a.params = parse_count(a.params)
    run = {"torch-save": torch_save, "torch-load": torch_load, "h5py-save": h5py_save,
           "h5py-load": h5py_load, "ckpt-py-save": ckpt_py_save}[a.what]
    print(json.dumps(run(a)), flush=True)


if __name__ == "__main__":
    main()
