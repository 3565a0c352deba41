"""Reads a `ckpt export` file, or the rank-*.h5 files of an hdf5:// step
directory (each chunk a dataset with global_shape and offsets attributes),
with h5py and checks every value against the
pattern hdf5_test.cc saved: element i of each tensor is i * 0.5 (f32, f16),
(i % 100) * 0.5 (bf16) or i % 100 (integers). Exit 0 when all match; prints what differs otherwise."""
import glob
import os
import sys

import h5py
import numpy as np


class Assembled:
    """The tensors of an hdf5:// step, put together from their chunks."""

    def __init__(self, step_dir):
        self.tensors = {}
        self.attrs = {}
        self.blobs = {}
        files = sorted(glob.glob(os.path.join(step_dir, "rank-*.h5")))
        if not files:
            raise SystemExit(f"no rank-*.h5 files in {step_dir}")
        for path in files:
            with h5py.File(path, "r") as f:
                self.attrs["ckpt_step"] = int(f.attrs["ckpt_step"][0])

                def visit(name, obj):
                    if not isinstance(obj, h5py.Dataset):
                        return
                    if name.startswith("_ckpt_blobs/"):
                        self.blobs[name] = bytes(obj[...])
                        return
                    if "offsets" not in obj.attrs:
                        return
                    tensor = name.rsplit("/", 1)[0]
                    shape = tuple(int(d) for d in obj.attrs["global_shape"])
                    if tensor not in self.tensors:
                        self.tensors[tensor] = Tensor(np.zeros(shape, obj.dtype), obj.attrs["ckpt_dtype"])
                    where = tuple(slice(int(o), int(o) + n) for o, n in zip(obj.attrs["offsets"], obj.shape))
                    self.tensors[tensor].data[where] = obj[...]
                    self.tensors[tensor].filled += obj.size

                f.visititems(visit)

    def __getitem__(self, name):
        if name.startswith("_ckpt_blobs/"):
            return np.frombuffer(self.blobs[name], np.uint8)
        t = self.tensors[name]
        if t.filled != t.data.size:
            raise SystemExit(f"{name}: chunks cover {t.filled} of {t.data.size} elements")
        return t


class Tensor:
    def __init__(self, data, dtype):
        self.data = data
        self.filled = 0
        self.attrs = {"ckpt_dtype": dtype}
        self.shape = data.shape
        self.dtype = data.dtype

    def __getitem__(self, key):
        return self.data[key]


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
    if os.path.isdir(path):
        return check(Assembled(path))
    with h5py.File(path, "r") as f:
        return check(f)


def check(f):
    ok = True
    step = f.attrs["ckpt_step"]
    if int(np.asarray(step).reshape(-1)[0]) != 42:
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
