"""PyTorch integration: save and restore a model, its optimizer (Adam
moments and step), an LR scheduler, every RNG (torch, numpy, Python) and
user extras, asynchronously, with bit-identical resume.

    from ckpt.torch import CheckpointManager
    manager = CheckpointManager("/nvme/run7", model, optimizer, scheduler,
                                interval=100, keep_last=3)
    start = manager.load_latest() or 0          # restores everything it saved
    for step in range(start + 1, steps + 1):
        train_one_step()
        manager.step(step)                      # saves every `interval` steps
    manager.close()

Tensors are registered by address (no copy); `save` returns once they are
copied into ckpt's staging memory, so training may change them right away.
Everything that is not a tensor (optimizer hyper-parameters, scheduler
fields, RNG tuples, extras) travels in one pickled blob: as with
`torch.load`, only restore checkpoints you trust.
"""
import pickle
import random
import time

import numpy as np
import torch

from . import _ckpt
from .errors import InvalidArgumentError
from ._ckpt import IntervalPolicy  # noqa: F401  (re-exported for CheckpointManager(policy=...))

_TREE_BLOB = "torch.tree"


class _TensorRef:
    """Where a tensor of the saved tree went, with its shape and dtype."""

    def __init__(self, name, tensor):
        self.name = name
        self.shape = tuple(tensor.shape)
        self.dtype = str(tensor.dtype).replace("torch.", "")


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _register(state, name, tensor, keep):
    if tensor.device.type != "cpu":
        tensor = tensor.detach().cpu()
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    keep.append(t)
    shape = list(t.shape)
    state.add_shard(name, _dtype_name(t), shape, [0] * len(shape), shape, t.data_ptr(), t)


def _flatten(obj, prefix, state, keep):
    """The tree with every tensor replaced by a _TensorRef, registering the
    tensors in `state` under their path."""
    if torch.is_tensor(obj):
        _register(state, prefix, obj, keep)
        return _TensorRef(prefix, obj)
    if isinstance(obj, dict):
        return {k: _flatten(v, f"{prefix}/{k}", state, keep) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, f"{prefix}/{i}", state, keep) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _unflatten(obj, state, keep, targets):
    """The tree with every _TensorRef replaced by a tensor registered for the
    load: the caller's own tensor when `targets` has one (loaded in place),
    else a new one."""
    if isinstance(obj, _TensorRef):
        t = targets.get(obj.name)
        if t is None or tuple(t.shape) != obj.shape or _dtype_name(t) != obj.dtype or not t.is_contiguous():
            t = torch.empty(obj.shape, dtype=getattr(torch, obj.dtype))
        keep.append(t)
        shape = list(t.shape)
        state.add_shard(obj.name, _dtype_name(t), shape, [0] * len(shape), shape, t.data_ptr(), t)
        return t
    if isinstance(obj, dict):
        return {k: _unflatten(v, state, keep, targets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unflatten(v, state, keep, targets) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_unflatten(v, state, keep, targets) for v in obj)
    return obj


def rng_state():
    """Every RNG a training loop draws from."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(s):
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def save(checkpointer, step, model=None, optimizer=None, scheduler=None, extra=None, rng=True):
    """Starts an asynchronous save of everything given; returns the handle
    (wait() for the commit). The tensors may change once this returns."""
    tree = {}
    if model is not None:
        tree["model"] = model.state_dict()
    if optimizer is not None:
        tree["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        tree["scheduler"] = scheduler.state_dict()
    if rng:
        tree["rng"] = rng_state()
    if extra is not None:
        tree["extra"] = extra
    state = _ckpt.State()
    keep = []
    skeleton = _flatten(tree, "t", state, keep)
    state.add_blob(_TREE_BLOB, pickle.dumps(skeleton), True)
    return checkpointer.save(step, state)


def load(checkpointer, model=None, optimizer=None, scheduler=None, step=_ckpt.LATEST, rng=True):
    """Restores what a `save` stored into the given objects (the model's
    tensors in place); returns (step, extra)."""
    probe = _ckpt.State()
    probe.want_blob(_TREE_BLOB, True)
    step = checkpointer.load(probe, step)
    skeleton = pickle.loads(probe.blob(_TREE_BLOB))
    targets = {}
    if model is not None and "model" in skeleton:
        targets = {f"t/model/{k}": v for k, v in model.state_dict().items()}
    state = _ckpt.State()
    keep = []
    tree = _unflatten(skeleton, state, keep, targets)
    checkpointer.load(state, step)
    if model is not None and "model" in tree:
        saved = tree["model"]
        if saved.keys() != model.state_dict().keys():
            model.load_state_dict(saved)  # raises, naming the missing and unexpected keys
        # Loaded in place where the model's own tensor could take it; copy the rest.
        rest = {k: v for k, v in saved.items() if v is not targets.get(f"t/model/{k}")}
        if rest:
            model.load_state_dict(rest, strict=False)
    if optimizer is not None and "optimizer" in tree:
        optimizer.load_state_dict(tree["optimizer"])
    if scheduler is not None and "scheduler" in tree:
        scheduler.load_state_dict(tree["scheduler"])
    if rng and "rng" in tree:
        set_rng_state(tree["rng"])
    return step, tree.get("extra")


class CheckpointManager:
    """Saves every `interval` steps, or when an `IntervalPolicy` says so
    (from the failure rate and the save costs it measures), asynchronously:
    the previous save must have committed before the next starts. Keeps the
    newest `keep_last` and restores the latest on start."""

    def __init__(self, root, model, optimizer=None, scheduler=None, interval=100, keep_last=3,
                 codec="none", async_save=True, staging_bytes=256 << 20, policy=None, staging_threads=0):
        self.checkpointer = _ckpt.Checkpointer(root, codec=codec, keep_last=keep_last,
                                               staging_bytes=staging_bytes, staging_threads=staging_threads)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.interval = interval
        self.policy = policy
        self.async_save = async_save
        self._pending = None
        self.saves = 0

    def load_latest(self):
        """Restores the latest committed step; returns it (None when none)."""
        if self.checkpointer.latest_step() is None:
            return None
        step, self.extra = load(self.checkpointer, self.model, self.optimizer, self.scheduler)
        return step

    def save(self, step, extra=None):
        self.wait()
        if self.policy is not None:
            self.policy.save_started(time.monotonic())
        self._pending = save(self.checkpointer, step, self.model, self.optimizer, self.scheduler, extra)
        self.saves += 1
        if not self.async_save:
            self.wait()
        return self._pending

    def step(self, step, extra=None):
        """Call after every training step: saves when `step` is a multiple of
        the interval, or when the policy says it is time."""
        if self.policy is not None:
            durable = self._pending is None or self._pending.done()
            if self.policy.should_checkpoint(time.monotonic(), durable):
                return self.save(step, extra)
            return None
        if step % self.interval == 0:
            return self.save(step, extra)
        return None

    def wait(self):
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.wait()
            if self.policy is not None:
                self.policy.record_save(pending)

    def close(self):
        self.wait()
        self.checkpointer.wait_all()


# --------------------------------------------------------------------------
# Distributed: ranks coordinate through a torch.distributed process group.


class ProcessGroupCommunicator(_ckpt.Communicator):
    """ckpt's collectives over a torch.distributed process group (gloo on
    CPU works): which replica writes a box held by several ranks, and the
    per-rank load plans rank 0 hands out. Only small messages pass."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self._dist, self._group = dist, group
        super().__init__(dist.get_rank(group), dist.get_world_size(group))

    def gather(self, mine, timeout):
        out = [None] * self.size if self.rank == 0 else None
        self._dist.gather_object(mine, out, dst=0, group=self._group)
        return out if self.rank == 0 else []

    def scatter(self, messages, timeout):
        out = [None]
        self._dist.scatter_object_list(out, list(messages) if self.rank == 0 else None, src=0, group=self._group)
        return out[0]

    def broadcast(self, message, timeout):
        box = [message]
        self._dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def barrier(self, timeout):
        self._dist.barrier(group=self._group)


class Shard:
    """The part of a global tensor this rank holds: `local` is the box at
    `offsets` of a tensor of `global_shape`."""

    def __init__(self, local, global_shape, offsets):
        self.local, self.global_shape, self.offsets = local, list(global_shape), list(offsets)


def shard_rows(tensor, rank, world):
    """This rank's rows of `tensor` split along dim 0 the way torch.chunk
    splits (FSDP-style); a view, not a copy."""
    rows = tensor.shape[0]
    per = -(-rows // world)
    start = min(rows, rank * per)
    stop = min(rows, start + per)
    return Shard(tensor[start:stop], tensor.shape, [start] + [0] * (tensor.dim() - 1))


def distributed_checkpointer(root, group=None, **kwargs):
    """A Checkpointer for this rank of an initialised process group; every
    rank must call save_tensors / load_tensors together."""
    return _ckpt.Checkpointer(root, communicator=ProcessGroupCommunicator(group), **kwargs)


def _add(state, name, value, keep):
    if isinstance(value, Shard):
        t = value.local.detach()
        if not t.is_contiguous():
            raise InvalidArgumentError(f"{name}: the local shard must be contiguous")
        keep.append(t)
        state.add_shard(name, _dtype_name(t), value.global_shape, value.offsets, list(t.shape), t.data_ptr(), t)
    else:
        _register(state, name, value, keep)


def save_tensors(checkpointer, step, tensors):
    """Saves {name: tensor or Shard}: whole tensors that several ranks hold
    are replicas (written once), Shards are this rank's part."""
    state = _ckpt.State()
    keep = []
    for name, value in tensors.items():
        _add(state, name, value, keep)
    return checkpointer.save(step, state)


def load_tensors(checkpointer, tensors, step=_ckpt.LATEST):
    """Fills {name: tensor or Shard} in place from `step`, whatever mesh
    saved it (resharded); returns the step."""
    state = _ckpt.State()
    keep = []
    for name, value in tensors.items():
        t = value.local if isinstance(value, Shard) else value
        if not t.is_contiguous():
            raise InvalidArgumentError(f"{name}: load targets must be contiguous")
        _add(state, name, value, keep)
    return checkpointer.load(state, step)
