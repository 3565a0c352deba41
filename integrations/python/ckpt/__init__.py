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

The library's messages (what it does on its own, saves that failed in the
background) go to the `logging` logger "ckpt" and its children
("ckpt.coordinator", "ckpt.peer", "ckpt.s3", "ckpt.storage"), never to
stderr: configure logging as for any library.
"""
import atexit as _atexit
import logging as _logging

from . import errors as _errors
from ._ckpt import (LATEST, Checkpointer, IntervalPolicy, PeerMemory, SaveHandle, State, dtype_size, place_erasure,
                    place_replicas)
from ._ckpt import _set_error_classes, _set_log_handler, _stop_logging
from .errors import *  # noqa: F401,F403  (ckpt.Error, ckpt.DataLossError, ...)

# absl status codes -> exception classes (ckpt/errors.py).
_set_error_classes({
    1: _errors.Error, 2: _errors.Error, 3: _errors.InvalidArgumentError, 4: _errors.DeadlineExceededError,
    5: _errors.NotFoundError, 6: _errors.AlreadyExistsError, 7: _errors.PermissionDeniedError,
    8: _errors.ResourceExhaustedError, 9: _errors.FailedPreconditionError, 10: _errors.AbortedError,
    11: _errors.InvalidArgumentError, 12: _errors.UnimplementedError, 13: _errors.InternalError,
    14: _errors.UnavailableError, 15: _errors.DataLossError, 16: _errors.PermissionDeniedError,
})

_LOG_LEVELS = (_logging.DEBUG, _logging.INFO, _logging.WARNING, _logging.ERROR)


def _log(level, component, message):
    logger = _logging.getLogger(f"ckpt.{component}" if component else "ckpt")
    logger.log(_LOG_LEVELS[level] if 0 <= level < len(_LOG_LEVELS) else _logging.ERROR, "%s", message)


_set_log_handler(_log)
_atexit.register(_stop_logging)

__all__ = ["LATEST", "Checkpointer", "IntervalPolicy", "PeerMemory", "SaveHandle", "State", "add_array", "dtype_size",
           "place_erasure", "place_replicas"] + _errors.__all__


def add_array(state, name, array, global_shape=None, offsets=None, dtype=None):
    """Registers a C-contiguous numpy array of this machine's byte order (the
    whole tensor, or the box at `offsets` of a tensor of `global_shape`). The
    array is neither copied nor released while the state lives; a load
    writes into it, so a load into a read-only array is refused.

    `dtype` names the stored type when numpy has none for it (fp8 as uint8
    arrays: dtype="float8_e4m3fn" or "float8_e5m2"); its size must be the
    array's item size."""
    import numpy as np

    if not array.flags["C_CONTIGUOUS"]:
        raise InvalidArgumentError(f"{name}: the array must be C-contiguous")
    if not array.dtype.isnative:
        # Refused rather than converted: a copy would break the contract that
        # a load writes into the caller's array.
        raise InvalidArgumentError(
            f"{name}: the array's byte order ({array.dtype.str}) is not this machine's; "
            f"pass array.astype(array.dtype.newbyteorder('='))")
    shape = list(array.shape)
    global_shape = list(global_shape) if global_shape is not None else shape
    offsets = list(offsets) if offsets is not None else [0] * len(shape)
    if dtype is None:
        dtype = "bool" if array.dtype == np.bool_ else array.dtype.name
    elif dtype_size(dtype) != array.itemsize:
        raise InvalidArgumentError(
            f"{name}: dtype {dtype} has {dtype_size(dtype)}-byte elements, the array {array.itemsize}-byte ones")
    state.add_shard(name, dtype, global_shape, offsets, shape, array.ctypes.data, array,
                    nbytes=array.nbytes, writable=bool(array.flags["WRITEABLE"]))
