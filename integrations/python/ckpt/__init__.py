"""ckpt: asynchronous sharded checkpoints for training.

The native part (`ckpt._ckpt`) holds checkpointers, states that point at
existing buffers without copying, and save handles; `ckpt.torch` saves and
restores PyTorch models, optimizers, schedulers and RNG states with it.

    import ckpt
    cp = ckpt.Checkpointer("/nvme/ckpt", codec="zstd", keep_last=3)
    state = ckpt.State()
    ckpt.add_array(state, "w", weights)          # a numpy array, not copied
    handle = cp.save(100, state)                 # returns once copied
    ...
    handle.wait()                                # committed, or raises
"""
from ._ckpt import LATEST, Checkpointer, IntervalPolicy, SaveHandle, State

__all__ = ["LATEST", "Checkpointer", "IntervalPolicy", "SaveHandle", "State", "add_array"]


def add_array(state, name, array, global_shape=None, offsets=None):
    """Registers a C-contiguous numpy array of this machine's byte order (the
    whole tensor, or the box at `offsets` of a tensor of `global_shape`). The
    array is neither copied nor released while the state lives; a load
    writes into it, so a load into a read-only array is refused."""
    import numpy as np

    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError(f"{name}: the array must be C-contiguous")
    if not array.dtype.isnative:
        # Refused rather than converted: a copy would break the contract that
        # a load writes into the caller's array.
        raise ValueError(
            f"{name}: the array's byte order ({array.dtype.str}) is not this machine's; "
            f"pass array.astype(array.dtype.newbyteorder('='))")
    shape = list(array.shape)
    global_shape = list(global_shape) if global_shape is not None else shape
    offsets = list(offsets) if offsets is not None else [0] * len(shape)
    dtype = "bool" if array.dtype == np.bool_ else array.dtype.name
    state.add_shard(name, dtype, global_shape, offsets, shape, array.ctypes.data, array,
                    nbytes=array.nbytes, writable=bool(array.flags["WRITEABLE"]))
