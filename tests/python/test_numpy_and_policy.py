"""numpy arrays round-trip zero-copy (a load writes into the caller's
array), errors surface as Python exceptions with the reason, and a
CheckpointManager driven by an IntervalPolicy saves on its own and learns
the measured save costs.

    /usr/bin/python3 -m pytest test_numpy_and_policy.py      (PYTHONPATH holds ckpt)
"""
import time

import numpy as np
import torch

import ckpt
import ckpt.torch as ct


def test_numpy_round_trip_errors_dtypes_and_interval_policy(tmp_path):
    work = str(tmp_path)
    cp = ckpt.Checkpointer(f"{work}/np", codec="zstd")
    a = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    s = ckpt.State()
    ckpt.add_array(s, "a", a)
    s.add_blob("meta", b"\x00\x01binary", True)
    cp.save(3, s).wait()
    b = np.zeros_like(a)
    t = ckpt.State()
    ckpt.add_array(t, "a", b[:32], global_shape=a.shape, offsets=(0, 0))
    t.want_blob("meta", True)
    assert cp.load(t) == 3
    assert np.array_equal(b[:32], a[:32]) and not b[32:].any(), "the load did not write into the array"
    assert t.blob("meta") == b"\x00\x01binary"
    try:
        cp.load(t, 99)
        raise AssertionError("loading a missing step succeeded")
    except ckpt.NotFoundError as e:
        assert isinstance(e, KeyError) and isinstance(e, ckpt.Error) and e.code == "NOT_FOUND", type(e)
        assert "99" in str(e) and not str(e).startswith("'"), str(e)
    try:
        cp.save(3, s).wait()
        raise AssertionError("saving a committed step again succeeded")
    except ckpt.AlreadyExistsError as e:
        assert "step 3 is already committed" in str(e), e

    # Buffers the library must not write or misread (regressions: a load
    # wrote into an immutable bytes object and crashed on a read-only
    # memmap; a big-endian array was saved as native floats).
    frozen = np.frombuffer(bytes(a.tobytes()), dtype=np.float32).reshape(a.shape)
    assert not frozen.flags["WRITEABLE"]
    r = ckpt.State()
    ckpt.add_array(r, "a", frozen)
    cp.save(4, r).wait()  # saving from a read-only array is fine
    try:
        cp.load(r, 4)
        raise AssertionError("a load into a read-only array was accepted")
    except ckpt.InvalidArgumentError as e:
        assert isinstance(e, ValueError)
        assert "'a'" in str(e) and "read-only" in str(e), e
    # The automatic codec and several staging threads, through Python.
    big = np.random.default_rng(1).standard_normal((512, 1024)).astype(np.float32)
    auto = ckpt.Checkpointer(f"{work}/auto", codec="auto", staging_threads=3)
    u = ckpt.State()
    ckpt.add_array(u, "big", big)
    auto.save(1, u).wait()
    back = np.zeros_like(big)
    v = ckpt.State()
    ckpt.add_array(v, "big", back)
    assert auto.load(v) == 1 and np.array_equal(back, big)
    try:
        ckpt.Checkpointer(f"{work}/bad", staging_threads=-1)
        raise AssertionError("a negative staging_threads was accepted")
    except ckpt.InvalidArgumentError as e:
        assert "staging_threads" in str(e), e
    np.save(f"{work}/m.npy", a)
    mm = np.load(f"{work}/m.npy", mmap_mode="r")
    m = ckpt.State()
    ckpt.add_array(m, "a", mm)
    try:
        cp.load(m, 4)
        raise AssertionError("a load into a read-only memmap was accepted")
    except ValueError as e:
        assert "read-only" in str(e), e
    try:
        ckpt.add_array(ckpt.State(), "be", a.astype(">f4"))
        raise AssertionError("a big-endian array was accepted")
    except ValueError as e:
        assert str(e).startswith("be:") and "byte order" in str(e), e
    try:
        ckpt.State().add_shard("raw", "float32", [64, 33], [0, 0], [64, 33], a.ctypes.data, None, nbytes=100)
        raise AssertionError("a box larger than its buffer was accepted")
    except ValueError as e:
        assert "raw" in str(e) and "8448 bytes" in str(e), e
    try:
        ckpt.State().add_shard("deep", "float32", [1] * 40, [0] * 40, [1] * 40, a.ctypes.data, a)
        raise AssertionError("a tensor of rank 40 was accepted")
    except ckpt.InvalidArgumentError as e:
        assert "rank 40 exceeds the limit of 32" in str(e), e

    # Every dtype of the library, fp8 included (numpy has no fp8 type: the
    # bytes travel in uint8 arrays named by dtype=).
    f8 = np.arange(256, dtype=np.uint8).reshape(16, 16)
    s8 = ckpt.State()
    ckpt.add_array(s8, "f8", f8, dtype="float8_e4m3fn")
    cp.save(10, s8).wait()
    back = np.zeros_like(f8)
    t8 = ckpt.State()
    ckpt.add_array(t8, "f8", back, dtype="float8_e4m3fn")
    assert cp.load(t8, 10) == 10 and np.array_equal(back, f8)
    try:
        ckpt.add_array(ckpt.State(), "f8", f8, dtype="float32")
        raise AssertionError("a dtype of another size was accepted")
    except ckpt.InvalidArgumentError as e:
        assert "4-byte" in str(e), e
    wrong = ckpt.State()
    ckpt.add_array(wrong, "f8", back, dtype="float8_e5m2")
    try:
        cp.load(wrong, 10)
        raise AssertionError("a load into another fp8 type was accepted")
    except ckpt.Error as e:
        assert "f8" in str(e), e

    # Damage is a DataLossError naming the file.
    import glob
    data = sorted(glob.glob(f"{work}/np/step-0000000010/rank-*.ckd"))[0]
    with open(data, "r+b") as f:
        f.seek(4096 + 40)
        byte = f.read(1)
        f.seek(4096 + 40)
        f.write(bytes([byte[0] ^ 0x10]))
    try:
        cp.load(t8, 10)
        raise AssertionError("a load of a damaged block succeeded")
    except ckpt.DataLossError as e:
        assert e.code == "DATA_LOSS" and "rank-000000.ckd" in str(e), e

    # SaveOptions reach Python; the save id is the step's CLAIM.
    h = cp.save(11, s8, metadata={"run": "numpy"}, save_id=0x1234)
    h.wait()
    assert h.save_id == 0x1234, h.save_id
    with open(f"{work}/np/step-0000000011/CLAIM") as f:
        assert "save 0x0000000000001234" in f.read()
    try:
        cp.save(7, s8)
        raise AssertionError("an older step was saved without allow_older_step")
    except ckpt.FailedPreconditionError as e:
        assert "allow_older_step" in str(e), e
    cp.save(7, s8, allow_older_step=True).wait()

    # The stubs describe the native module exactly: every name on both sides.
    import ast
    import os
    stub = ast.parse(open(os.path.join(os.path.dirname(ckpt.__file__), "_ckpt.pyi")).read())
    native = ckpt._ckpt
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(native, node.name)
            declared = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            actual = {n for n in dir(cls) if not n.startswith("_")}
            assert declared - {"__init__"} == actual, (node.name, declared ^ actual)
        elif isinstance(node, ast.FunctionDef):
            assert hasattr(native, node.name), node.name
    public = {n for n in dir(native) if not n.startswith("__")}
    stubbed = {n.name for n in stub.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))} | {"LATEST"}
    assert public == stubbed, public ^ stubbed

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    policy = ckpt.IntervalPolicy(mtbf_s=3600, restart_s=1, stall_s=0.001, write_s=0.01,
                                 min_interval_s=0.05, max_interval_s=0.2)
    manager = ct.CheckpointManager(f"{work}/policy", model, policy=policy, keep_last=2)
    t0 = time.monotonic()
    step = 0
    while time.monotonic() - t0 < 1.5:
        step += 1
        time.sleep(0.01)
        manager.step(step)
    manager.close()
    assert 3 <= manager.saves <= 40, f"{manager.saves} saves in 1.5 s"
    assert 0.05 <= policy.interval_s <= 0.2, policy.interval_s
    assert policy.write_s > 0

    # Two levels: memory saves between durable ones, never before the last committed.
    two = ckpt.IntervalPolicy(mtbf_s=4 * 3600, restart_s=600, stall_s=2, write_s=60, min_interval_s=1,
                              two_level=True, memory_stall_s=0.5, memory_write_s=5, memory_restart_s=60,
                              survivable=0.9)
    assert two.durable_every > 1, two.durable_every
    assert two.next_level(0.0) == ""
    levels = []
    now = 0.0
    for _ in range(2 * two.durable_every):
        now += two.interval_s + 0.001
        assert two.next_level(now, previous_committed=False) == ""
        level = two.next_level(now)
        levels.append(level)
        two.save_started(now, level)
    assert levels.count("durable") == 2 and levels[two.durable_every - 1] == "durable", levels
    try:
        two.save_started(now, "tape")
        raise AssertionError("an unknown level was accepted")
    except ValueError:
        pass
    print(f"numpy round trip ok; policy-driven manager saved {manager.saves} times "
          f"(interval {policy.interval_s:.3f} s, measured write {policy.write_s:.4f} s)")



def test_an_array_resized_after_it_was_added_is_refused_not_read(tmp_path):
    """Regression: an array resized with refcheck=False after add_array had
    its bytes moved or freed, and the save read them anyway (a crash). A save
    or load checks first that every array still holds its box."""
    cp = ckpt.Checkpointer(f"{tmp_path}/resized")
    a = np.ones((256, 256), dtype=np.float32)
    s = ckpt.State()
    ckpt.add_array(s, "a", a)
    a.resize((16, 16), refcheck=False)
    for attempt in (lambda: cp.save(1, s).wait(), lambda: cp.load(s)):
        try:
            attempt()
            raise AssertionError("a save or load used an array that was resized")
        except ckpt.Error as e:
            assert "tensor 'a'" in str(e) and "resized or moved" in str(e), str(e)
    fresh = ckpt.State()
    ckpt.add_array(fresh, "a", a)
    cp.save(1, fresh).wait()
    back = np.zeros_like(a)
    t = ckpt.State()
    ckpt.add_array(t, "a", back)
    assert cp.load(t) == 1 and np.array_equal(back, a)


def test_numpy_states_declared_by_layouts(tmp_path):
    # Two ranks of a mesh dp=2 in this process: "w" split in rows at cuts,
    # "b" replicated. Each learns its box from the layout; the replica is
    # written once, and the step loads whole.
    root = f"{tmp_path}/layouts"
    w = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    b = np.arange(4, dtype=np.float32) + 100
    placements = {"w": [(0, [0, 2, 6])], "b": [None]}
    handles, keep = [], []
    for rank in range(2):
        cp = ckpt.Checkpointer(root, rank=rank, world_size=2)
        s = ckpt.State()
        try:
            s.add_layout("w", "float32", [6, 4], placements["w"], 0, None)
            raise AssertionError("a layout before the mesh was accepted")
        except ckpt.Error as e:
            assert "set_mesh" in str(e), str(e)
        s.set_mesh(["dp"], [2], rank)
        offsets, sizes = s.layout_box("w", "float32", [6, 4], placements["w"])
        assert offsets == [[0, 2][rank], 0] and sizes == [[2, 4][rank], 4], (offsets, sizes)
        mine = np.ascontiguousarray(w[offsets[0]:offsets[0] + sizes[0]])
        bias = b.copy()
        keep += [cp, mine, bias]
        s.add_layout("w", "float32", [6, 4], placements["w"], mine.ctypes.data, mine)
        s.add_layout("b", "float32", [4], placements["b"], bias.ctypes.data, bias)
        try:
            s.add_layout("b", "float32", [4], placements["b"], bias.ctypes.data, bias)
            raise AssertionError("a layout declared twice was accepted")
        except ckpt.InvalidArgumentError as e:
            assert "twice" in str(e), str(e)
        handles.append(cp.save(1, s, save_id=0x1a70))
        keep.append(s)
    for h in handles:
        h.wait()
    got_w, got_b = np.zeros_like(w), np.zeros_like(b)
    t = ckpt.State()
    ckpt.add_array(t, "w", got_w)
    ckpt.add_array(t, "b", got_b)
    assert ckpt.Checkpointer(root).load(t) == 1
    assert np.array_equal(got_w, w) and np.array_equal(got_b, b)
