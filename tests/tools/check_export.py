"""Reads a `ckpt export` file with h5py and checks every value against the
pattern hdf5_test.cc saved: element i of each tensor is i * 0.5 (f32, f16),
(i % 100) * 0.5 (bf16) or i % 100 (integers). Exit 0 when all match; prints what differs otherwise."""
import sys

import h5py
import numpy as np


def expect(name, ds, dtype):
    n = int(np.prod(ds.shape))
    i = np.arange(n)
    if dtype == "bf16":
        raw = ds[...].astype(np.uint32) << 16
        got = raw.view(np.float32).reshape(-1)
        want = ((i % 100) * 0.5).astype(np.float32)
    elif dtype in ("f32", "f16", "f64"):
        got = ds[...].reshape(-1)
        want = (i * 0.5).astype(got.dtype)
    else:
        got = ds[...].reshape(-1)
        want = (i % 100).astype(got.dtype)
    if not np.array_equal(got, want):
        bad = int(np.argmax(got != want))
        print(f"{name}: element {bad} is {got[bad]}, expected {want[bad]}")
        return False
    return True


def main(path):
    ok = True
    with h5py.File(path, "r") as f:
        if int(f.attrs["ckpt_step"]) != 42:
            print("ckpt_step is", f.attrs["ckpt_step"])
            ok = False
        checked = 0
        for name, shape, dtype, np_dtype in [
            ("model/embed.weight", (96, 40), "f32", np.float32),
            ("model/layers.0.attn.weight", (64, 48), "bf16", np.uint16),
            ("model/norm.scale", (40,), "f16", np.float16),
            ("model/step_counts", (7, 5), "i32", np.int32),
        ]:
            ds = f[name]
            if ds.shape != shape or ds.dtype != np_dtype:
                print(f"{name}: shape {ds.shape} dtype {ds.dtype}, expected {shape} {np_dtype}")
                ok = False
                continue
            attr = ds.attrs["ckpt_dtype"]
            attr = attr.decode() if isinstance(attr, bytes) else str(attr)
            if attr != dtype:
                print(f"{name}: ckpt_dtype {attr}, expected {dtype}")
                ok = False
            ok = expect(name, ds, dtype) and ok
            checked += 1
        blob = bytes(f["_ckpt_blobs/config"][...])
        if blob != b'{"lr": 0.001}':
            print("config blob is", blob)
            ok = False
    print(f"checked {checked} tensors: {'ok' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
