"""Reads a Hugging Face safetensors export with a reader written here from
the safetensors specification (json + numpy, no ckpt code) and compares every
element with the same step exported to HDF5 (read with h5py).

usage: check_safetensors.py EXPORT_DIR REFERENCE.h5 [--dtype bf16|f16|f32]
       [--rename FILE] [--only PREFIX] [--exclude PREFIX] [--shards N]
Exit 0 when everything matches; prints what differs otherwise."""
import argparse
import json
import os
import re
import struct
import sys

import h5py
import numpy as np

SPEC = {  # safetensors dtype -> (numpy dtype of the raw bytes, bytes)
    "BOOL": ("u1", 1), "U8": ("u1", 1), "I8": ("i1", 1), "F8_E5M2": ("u1", 1), "F8_E4M3": ("u1", 1),
    "I16": ("<i2", 2), "U16": ("<u2", 2), "F16": ("<f2", 2), "BF16": ("<u2", 2), "I32": ("<i4", 4),
    "U32": ("<u4", 4), "F32": ("<f4", 4), "F64": ("<f8", 8), "I64": ("<i8", 8), "U64": ("<u8", 8),
}
FLOAT_CKPT = {"f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2"}
failures = []


def fail(msg):
    failures.append(msg)
    print("MISMATCH:", msg)


def read_file(path):
    """The tensors of one .safetensors file: name -> (dtype, shape, raw array)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    start = 8 + n
    meta = header.pop("__metadata__", {})
    spans = []
    out = {}
    for name, t in header.items():
        np_dtype, size = SPEC[t["dtype"]]
        b, e = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64)) if t["shape"] else 1
        if e - b != count * size:
            fail(f"{path}: {name}: {e - b} bytes for {t['dtype']} {t['shape']}")
        spans.append((b, e))
        arr = np.frombuffer(data, dtype=np_dtype, count=count, offset=start + b).reshape(t["shape"])
        out[name] = (t["dtype"], list(t["shape"]), arr)
    spans.sort()
    at = 0
    for b, e in spans:
        if b != at:
            fail(f"{path}: hole or overlap at buffer byte {at}")
        at = e
    if start + at != len(data):
        fail(f"{path}: {len(data) - start - at} bytes after the last tensor")
    return out, meta


def to_bf16_rne(f32):
    u = f32.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(f32)
    rounded[nan] = (u[nan] >> 16) | 0x40
    return rounded.astype("<u2")


def bf16_to_f32(u16):
    return (u16.astype("<u4") << 16).view("<f4")


def load_rules(path):
    exact, rules = {}, []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            old, new = line
            if old.startswith("re:"):
                rules.append((re.compile(old[3:]), re.sub(r"\$(\d)", r"\\\1", new)))
            else:
                exact[old] = new
    def apply(name):
        if name in exact:
            return exact[name]
        for pat, repl in rules:
            if pat.search(name):
                return pat.sub(repl, name, count=1)
        return name
    return apply


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export_dir")
    ap.add_argument("reference")
    ap.add_argument("--dtype")
    ap.add_argument("--rename")
    ap.add_argument("--only")
    ap.add_argument("--exclude")
    ap.add_argument("--shards", type=int)
    a = ap.parse_args()
    rename = load_rules(a.rename) if a.rename else (lambda n: n)

    index_path = os.path.join(a.export_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
    else:
        index = None
        files = ["model.safetensors"]
    if a.shards is not None and len(files) != a.shards:
        fail(f"{len(files)} shard(s), expected {a.shards}")
    got, first_meta = {}, None
    for i, name in enumerate(files):
        if index is not None and name != f"model-{i + 1:05d}-of-{len(files):05d}.safetensors":
            fail(f"shard name {name}")
        tensors, meta = read_file(os.path.join(a.export_dir, name))
        if i == 0:
            first_meta = meta
        if meta.get("format") != "pt":
            fail(f"{name}: __metadata__ format is {meta.get('format')!r}, transformers wants 'pt'")
        for t, v in tensors.items():
            if t in got:
                fail(f"{t} in two shards")
            got[t] = v
            if index is not None and index["weight_map"].get(t) != name:
                fail(f"weight_map sends {t} to {index['weight_map'].get(t)}, it is in {name}")
    if index is not None:
        if set(index["weight_map"]) != set(got):
            fail("weight_map and the shards name different tensors")
        total = sum(v[2].nbytes for v in got.values())
        if index["metadata"]["total_size"] != total:
            fail(f"total_size {index['metadata']['total_size']}, the tensors hold {total}")

    compared = 0
    with h5py.File(a.reference, "r") as ref:
        names = []
        ref.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and not n.startswith("_ckpt") else None)
        expected = set()
        for fqn in names:
            if a.only and not fqn.startswith(a.only):
                continue
            if a.exclude and fqn.startswith(a.exclude):
                continue
            new = rename(fqn)
            expected.add(new)
            if new not in got:
                fail(f"{fqn} (as {new}) is not in the export")
                continue
            ds = ref[fqn]
            ckpt_dtype = ds.attrs["ckpt_dtype"]
            ckpt_dtype = ckpt_dtype.decode() if isinstance(ckpt_dtype, bytes) else str(ckpt_dtype)
            want = np.asarray(ds[...])
            st_dtype, shape, arr = got[new]
            if shape != list(want.shape):
                fail(f"{new}: shape {shape}, expected {list(want.shape)}")
                continue
            if a.dtype and ckpt_dtype in FLOAT_CKPT:
                src = bf16_to_f32(want) if ckpt_dtype == "bf16" else want.astype("<f4")
                if a.dtype == "bf16":
                    want, want_dtype = to_bf16_rne(src), "BF16"
                elif a.dtype == "f32":
                    want, want_dtype = src, "F32"
                else:
                    want, want_dtype = src.astype("<f2"), "F16"
            else:
                want_dtype = {"bf16": "BF16", "f32": "F32", "f16": "F16", "f64": "F64", "i64": "I64", "i32": "I32",
                              "i16": "I16", "i8": "I8", "u8": "U8", "bool": "BOOL", "f8e4m3": "F8_E4M3",
                              "f8e5m2": "F8_E5M2"}[ckpt_dtype]
            if st_dtype != want_dtype:
                fail(f"{new}: dtype {st_dtype}, expected {want_dtype}")
                continue
            if want.tobytes() != arr.tobytes():
                diff = int(np.count_nonzero(want.reshape(-1).view(np.uint8) != arr.reshape(-1).view(np.uint8)))
                fail(f"{new}: {diff} differing bytes")
                continue
            compared += want.size
        if set(got) != expected:
            fail(f"unexpected tensors in the export: {sorted(set(got) - expected)[:5]}")
        step = ref.attrs["ckpt_step"][0]
        if first_meta.get("ckpt.step") != str(step):
            fail(f"__metadata__ ckpt.step {first_meta.get('ckpt.step')!r}, the step is {step}")
    print(f"checked {len(got)} tensors, {compared} elements, {len(files)} shard(s): "
          + ("ok" if not failures else f"{len(failures)} problem(s)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
