"""A Hugging Face safetensors model, written here with numpy from the
specification, is loaded by ckpt in place: a rank takes only its rows, bf16
comes back bit for bit, and a broken file raises ckpt.DataLossError.

    /usr/bin/python3 -m pytest test_safetensors.py      (PYTHONPATH holds ckpt)
"""
import json
import struct

import numpy as np

import ckpt


def write_safetensors(path, tensors, metadata=None):
    header = {"__metadata__": metadata or {"format": "pt"}}
    buf = b""
    for name, (dtype, arr) in tensors.items():
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [len(buf), len(buf) + len(data)]}
        buf += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + buf)


def test_a_model_loads_in_place_on_any_mesh(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    bf16 = rng.integers(0, 1 << 16, size=(7, 5), dtype=np.uint16)  # raw bf16 bit patterns
    ids = np.arange(12, dtype=np.int64).reshape(3, 4)
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors", {"w": ("F32", w), "h": ("BF16", bf16), "ids": ("I64", ids)})

    cp = ckpt.Checkpointer(str(model))
    assert cp.latest_step() == 0
    # Rank 1 of 2 takes the second half of w's rows; bf16 and i64 whole.
    half = np.zeros((48, 40), np.float32)
    h_back = np.zeros((7, 5), np.uint16)
    ids_back = np.zeros((3, 4), np.int64)
    s = ckpt.State()
    ckpt.add_array(s, "w", half, global_shape=(96, 40), offsets=(48, 0))
    ckpt.add_array(s, "h", h_back, dtype="bf16")
    ckpt.add_array(s, "ids", ids_back)
    assert cp.load(s) == 0
    assert np.array_equal(half, w[48:])
    assert np.array_equal(h_back, bf16)
    assert np.array_equal(ids_back, ids)

    # A model is read-only: saving into it is refused with the reason.
    try:
        cp.save(1, s).wait()
        raise AssertionError("saved into a safetensors model")
    except ckpt.Error as e:
        assert "read-only" in str(e), str(e)

    # A header whose offsets overlap: DataLossError naming the tensor.
    bad = tmp_path / "bad"
    bad.mkdir()
    raw = (model / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header["h"]["data_offsets"] = [header["h"]["data_offsets"][0] - 4, header["h"]["data_offsets"][1] - 4]
    write_raw = json.dumps(header).encode()
    write_raw += b" " * (-len(write_raw) % 8)
    (bad / "model.safetensors").write_bytes(struct.pack("<Q", len(write_raw)) + write_raw + raw[8 + n:])
    try:
        ckpt.Checkpointer(str(bad))
        raise AssertionError("opened a broken model")
    except ckpt.DataLossError as e:
        assert "tensor 'h'" in str(e) and "model.safetensors" in str(e), str(e)
