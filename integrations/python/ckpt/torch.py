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
import logging
import os
import pickle
import random
import secrets
import signal
import socket
import sys
import time
import warnings

import numpy as np
import torch

from . import _ckpt
from .errors import InvalidArgumentError
from ._ckpt import IntervalPolicy  # noqa: F401  (re-exported for CheckpointManager(policy=...))

_TREE_BLOB = "torch.tree"
_log = logging.getLogger("ckpt")


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


def _unflatten(obj, state, keep, targets, laid_out=False):
    """The tree with every _TensorRef replaced by a tensor registered for the
    load: the caller's own tensor when `targets` has one (loaded in place),
    else a new one. `laid_out`: each tensor is declared as one every rank
    holds whole (the state's mesh is set), so that ranks loading the same
    tensors can load them cooperatively."""
    if isinstance(obj, _TensorRef):
        t = targets.get(obj.name)
        if t is None or tuple(t.shape) != obj.shape or _dtype_name(t) != obj.dtype or not t.is_contiguous():
            t = torch.empty(obj.shape, dtype=getattr(torch, obj.dtype))
        keep.append(t)
        shape = list(t.shape)
        if laid_out:
            state.add_layout(obj.name, _dtype_name(t), shape, [None], t.data_ptr(), t)
        else:
            state.add_shard(obj.name, _dtype_name(t), shape, [0] * len(shape), shape, t.data_ptr(), t)
        return t
    if isinstance(obj, dict):
        return {k: _unflatten(v, state, keep, targets, laid_out) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unflatten(v, state, keep, targets, laid_out) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_unflatten(v, state, keep, targets, laid_out) for v in obj)
    return obj


def rng_state():
    """Every RNG a training loop draws from."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(s):
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def save(checkpointer, step, model=None, optimizer=None, scheduler=None, extra=None, rng=True, level="durable",
         per_rank=False, data=None):
    """Starts an asynchronous save of everything given; returns the handle
    (wait() for the commit). The tensors may change once this returns.
    level="memory" saves into the memory level (peers' memory). per_rank:
    every rank of a distributed checkpointer keeps its own non-tensor
    state (its RNG, `extra`); tensors several ranks hold are written once."""
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
    state.add_blob(_TREE_BLOB, pickle.dumps(skeleton), not per_rank)
    if data is not None:  # one record for the job (DataPosition), whatever the ranks
        state.add_blob(_DATA_BLOB, pickle.dumps(data.state_dict()), True)
    return checkpointer.save(step, state, level=level)


def load(checkpointer, model=None, optimizer=None, scheduler=None, step=_ckpt.LATEST, rng=True, level="durable",
         stats=None, per_rank=False, cooperative=True, data=None):
    """Restores what a `save` stored into the given objects (the model's
    tensors in place); returns (step, extra). `stats`, a dict, receives the
    load's figures (level, bytes_from_memory, bytes_from_peers,
    bytes_from_storage, bytes_for_peers, peer_failovers, delta_blocks,
    bytes_read_from_bases, bytes_rebuilt_from_parity, memory_pieces_lost,
    cooperative, ...),
    summed over its reads. per_rank (every rank of a distributed
    checkpointer loads together): the tensors are declared as every rank's
    whole copy, so that with a checkpointer built with exchange_memory the
    ranks read each stored byte once and pass it on (docs/resharding.md,
    "Cooperative loads"; cooperative=False turns it off). `data`, a
    DataPosition, is restored from the step (which must hold one)."""
    probe = _ckpt.State()
    probe.want_blob(_TREE_BLOB, not per_rank)
    if data is not None:
        probe.want_blob(_DATA_BLOB, True)
    first = checkpointer.load(probe, step, level=level, stats=True)
    step = first["step"]
    if data is not None:
        data.load_state_dict(pickle.loads(probe.blob(_DATA_BLOB)))
    skeleton = pickle.loads(probe.blob(_TREE_BLOB))
    targets = {}
    if model is not None and "model" in skeleton:
        targets = {f"t/model/{k}": v for k, v in model.state_dict().items()}
    state = _ckpt.State()
    keep = []
    if per_rank:
        state.set_mesh(["world"], [checkpointer.world_size], checkpointer.rank)
    tree = _unflatten(skeleton, state, keep, targets, laid_out=per_rank)
    second = checkpointer.load(state, step, level=level, stats=True, cooperative=cooperative)
    if stats is not None:
        stats.update(second)
        for k in ("seconds", "bytes_read", "bytes_from_memory", "bytes_from_peers", "bytes_from_storage",
                  "bytes_for_peers", "peer_failovers", "delta_blocks", "bytes_read_from_bases",
                  "bytes_rebuilt_from_parity", "memory_pieces_lost"):
            stats[k] = first[k] + second[k]
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


_DATA_BLOB = "torch.data_position"


class DataPosition:
    """Where an epoch-based run stands in its data: the epoch, the seed and
    the number of samples the whole job consumed in this epoch. Saved with
    each step by a CheckpointManager given it (`data=`), as one record for
    the job, and restored at any data-parallel size: every epoch still
    covers each index of `size` exactly once, none twice, none skipped.

    Each epoch's order is a permutation of range(size) drawn from the seed
    and the epoch (range(size) itself with shuffle=False). A training step
    consumes one global batch: the next world x batch_size indices of the
    order (fewer at the epoch's end), in `world` contiguous parts, rank r
    taking part r. At the same size and seed a resumed run consumes exactly
    the order an uninterrupted one would.

        pos = DataPosition(len(dataset), batch_size=32, seed=0)
        manager = CheckpointManager(root, model, opt, group=..., data=pos)
        manager.load_latest()                 # restores pos as well
        while pos.epoch < epochs:
            for indices in pos.batches(rank, world):   # this epoch's rest
                train_on([dataset[i] for i in indices])
                step += 1
                manager.step(step)            # advances pos by one global batch

    `batches` does not move the position (a DataLoader may fetch ahead of
    what is trained): the manager's `step` does, or `advance` when there
    is no manager. The permutation and the cut are ckpt::DataPosition's
    (ckpt/data_position.h): a C++ trainer resumes the same record."""

    def __init__(self, size, batch_size, seed=0, shuffle=True):
        self._native = _ckpt.DataPosition(int(size), int(batch_size), int(seed), bool(shuffle))

    size = property(lambda self: self._native.size)
    batch_size = property(lambda self: self._native.batch_size)
    seed = property(lambda self: self._native.seed)
    shuffle = property(lambda self: self._native.shuffle)
    epoch = property(lambda self: self._native.epoch)
    consumed = property(lambda self: self._native.consumed)

    def order(self, epoch=None):
        """The order of the indices in `epoch` (default the current one)."""
        epoch = self.epoch if epoch is None else epoch
        return [self._native.index_at(epoch, p) for p in range(self.size)]

    def batches(self, rank, world):
        """This rank's indices of each global batch left in the epoch, from
        the current position, without moving it."""
        if not 0 <= rank < world:
            raise InvalidArgumentError(f"rank {rank} is not within world size {world}")
        cursor = _ckpt.DataPosition(self.size, self.batch_size, self.seed, self.shuffle)
        cursor.restore(self._native.encode())
        epoch = cursor.epoch
        while cursor.epoch == epoch:
            yield cursor.batch(rank, world)
            cursor.advance(world)

    def advance(self, world):
        """One global batch of `world` ranks was trained on."""
        self._native.advance(world)

    def state_dict(self):
        return {"record": self._native.encode()}

    def load_state_dict(self, d):
        self._native.restore(d["record"])


class CheckpointManager:
    """Saves every `interval` steps, or when an `IntervalPolicy` says so
    (from the failure rate and the save costs it measures), asynchronously:
    the previous save must have committed before the next starts. Keeps the
    newest `keep_last` and restores the latest on start.

    Two levels (docs/levels.md): with `memory_interval=M` the ranks of an
    initialised torch.distributed process group (`group`, default the
    world) also save every M steps into each other's memory, each rank's
    files held in `memory_replicas` other failure domains (`domain`, default
    the host name), or with `memory_erasure="K+M"` cut into K data and M
    parity pieces, each in another domain ((K+M)/K of the state in memory
    instead of 1 + memory_replicas; any M domains may be lost), and
    `durable_interval` (default `interval`) spaces the
    saves to `root`. `load_latest` restores the newest step of either
    level. A memory save that fails (a full `memory_budget`) is reported
    through `memory_errors` and training goes on. With both a
    `policy=IntervalPolicy(two_level=True, ...)` and `memory_interval` the
    policy decides when to save and at which level (rank 0 decides, every
    rank follows); the intervals are then not used, and without a memory
    level (too few failure domains) its memory turns are durable saves. Each rank's peer memory
    listens on `memory_listen` (default $CKPT_MEMORY_LISTEN, else this
    host's address on the route to $MASTER_ADDR, port 0: what the other
    nodes reach; 127.0.0.1 without MASTER_ADDR); the job's
    token is `token`, $CKPT_JOB_TOKEN, or one rank 0 draws and sends over
    the process group. With a process group every rank keeps its own RNG
    state and `extra` (restored onto the same number of ranks), and with
    `cooperative_load` (the default) restores are cooperative: the ranks
    read each stored byte once and pass it to the others over their peer
    memories (started for it when there is no memory level), so that N
    data-parallel replicas do not read the checkpoint N times
    (docs/resharding.md, "Cooperative loads"); `last_load` says where the
    bytes came from.

    A save that fails (the storage is down, the disk is full, a rank died
    mid-save) never stops training: it is logged (logger "ckpt", warning),
    counted in `failed_saves` and listed in `save_errors`, and a durable
    one is retried with the state of the time, `retry_backoff_steps` steps
    later (doubling each time, default a tenth of the interval), up to
    `retry_attempts` times before the interval's turns take over again.
    Without a process group a failure is noticed at the first step after
    it; with one, at the next save or `wait` (every rank then at the same
    step, so that they retry together). `raise_on_save_error=True` raises
    it instead, at the next save, `wait` or `close`.

    Preemption: with `preempt_signals=(signal.SIGTERM, signal.SIGUSR1)` the
    manager catches those signals (installed from the main thread) and, at
    the next `step` after one reached any rank (one all-reduce of a flag
    per step over the group), every rank saves that step: to the memory
    level first when there is one, then durably, each only while
    `preempt_deadline` seconds since the signal allow; a save already in
    flight is finished within the deadline or abandoned (never committed
    half-written). The process then exits with `preempt_exit_code`
    (default 143, 128 + SIGTERM), or, with preempt_exit=False, `step`
    returns and `preempted` says what was committed ({"step", "levels",
    "seconds"}).

    With `data=DataPosition(...)` each `step` advances it by one global
    batch (of the process group's size), every save records it as one
    record for the job, and `load_latest` restores it, at whatever size the
    group has now (DataPosition).

    ckpt's background threads yield to the trainer: `background="batch"`
    (nice 10 and SCHED_BATCH, the default), `"idle"` (SCHED_IDLE: only on
    cores nothing else wants) or `"normal"`; `cpu_budget` caps the cores
    they use together (0: no cap), and `memory_send_bytes_per_s` paces the
    memory level's copies (docs/performance.md, "The trainer during
    background saves").

    `delta_chain=K` saves each tensor as a delta (XOR against its last whole
    save, compressed) for up to K saves after a whole one, tensor by tensor
    while deltas pay: frozen parameters then cost almost nothing, and every
    kept step still restores bit-exactly. It keeps one copy of the saved
    state in host memory (docs/integrations.md, "Delta saves").
    `keep_within=N` also keeps every step saved in the last N steps: a
    window to roll back to after a loss spike, cheap as deltas."""

    def __init__(self, root, model, optimizer=None, scheduler=None, interval=100, keep_last=3,
                 codec="none", async_save=True, staging_bytes=256 << 20, policy=None, staging_threads=0,
                 memory_interval=None, durable_interval=None, group=None, memory_replicas=1,
                 memory_budget=4 << 30, domain=None, memory_listen=None, token=None, cooperative_load=True,
                 cpu_budget=0.0, background="batch", memory_send_bytes_per_s=0.0, retry_attempts=3,
                 retry_backoff_steps=None, raise_on_save_error=False, data=None, preempt_signals=(),
                 preempt_deadline=30.0, preempt_exit=True, preempt_exit_code=143, delta_chain=0, keep_within=0,
                 memory_erasure=None):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.interval = durable_interval if durable_interval is not None else interval
        self.memory_interval = memory_interval
        self.policy = policy
        self.async_save = async_save
        self._pending = None
        self._pending_level = None
        self.saves = 0
        self.saves_by_level = {}
        self.memory = None
        self.memory_note = None
        self.memory_errors = []
        self.data = data
        self.preempt_deadline, self.preempt_exit, self.preempt_exit_code = preempt_deadline, preempt_exit, \
            preempt_exit_code
        self.preempted = None
        self._preempt_at = None
        self._old_handlers = {}
        for sig in preempt_signals:
            self._old_handlers[sig] = signal.signal(sig, self._on_preempt_signal)
        self.save_errors = []
        self.failed_saves = 0
        self.raise_on_save_error = raise_on_save_error
        self.retry_attempts = retry_attempts
        self.retry_backoff_steps = (retry_backoff_steps if retry_backoff_steps is not None
                                    else max(1, self.interval // 10))
        self._retries_left = retry_attempts
        self._backoff = self.retry_backoff_steps
        self._retry_step = None
        self._pending_step = None
        self.last_load = None
        kwargs = dict(codec=codec, keep_last=keep_last, staging_bytes=staging_bytes, staging_threads=staging_threads,
                      cpu_budget=cpu_budget, background=background, delta_chain=delta_chain,
                      keep_within=keep_within)
        self._dist = None
        if memory_interval or group is not None:
            import torch.distributed as dist

            if not dist.is_initialized():
                raise InvalidArgumentError("memory_interval and group need an initialised torch.distributed "
                                           "process group")
            self._dist, self._group = dist, group
            kwargs["communicator"] = ProcessGroupCommunicator(group)
        if memory_interval or (self._dist is not None and cooperative_load):
            self.memory = self._start_peer_memory(memory_budget, domain, memory_listen, token)
        if memory_interval:
            kwargs.update(self._place_memory(memory_replicas, memory_erasure))
            kwargs["memory_send_bytes_per_s"] = memory_send_bytes_per_s
        if self.memory is not None and cooperative_load:
            kwargs["exchange_memory"] = self.memory
        self.checkpointer = _ckpt.Checkpointer(root, **kwargs)

    def _start_peer_memory(self, budget, domain, listen, token):
        if token is None:
            token = os.environ.get("CKPT_JOB_TOKEN")
        if token is None:
            token = self._agree(secrets.token_hex(32))
        listen = listen or os.environ.get("CKPT_MEMORY_LISTEN") or f"{_address_toward_master()}:0"
        return _ckpt.PeerMemory(token, domain=domain or socket.gethostname(), budget_bytes=budget, listen=listen)

    def _place_memory(self, replicas, erasure=None):
        dist, group = self._dist, self._group
        everyone = [None] * dist.get_world_size(group)
        dist.all_gather_object(everyone, (self.memory.endpoint, self.memory.domain), group=group)
        endpoints = [e for e, _ in everyone]
        domains = [d for _, d in everyone]
        rank = dist.get_rank(group)
        if erasure is not None:
            try:
                k, m = (int(x) for x in str(erasure).split("+"))
            except ValueError:
                raise InvalidArgumentError(f'memory_erasure wants "K+M", e.g. "4+2", not {erasure!r}') from None
        try:
            if erasure is not None:
                placement = _ckpt.place_erasure(domains, k, m)  # piece j at placement[owner][j], piece 0 its own
            else:
                placement = [[owner] + p for owner, p in enumerate(_ckpt.place_replicas(domains, replicas))]
        except InvalidArgumentError:
            raise
        except Exception as e:  # too few failure domains: durable saves only
            self.memory_note = str(e)
            warnings.warn(f"ckpt: no memory-level saves: {e}")
            return {}
        holders = [[endpoints[k] for k in placement[owner]] for owner in range(len(endpoints))]
        out = dict(memory=self.memory, memory_replicas=holders[rank][1:], memory_holders=holders,
                   memory_peers=endpoints)
        if erasure is not None:
            out["memory_erasure"] = f"{k}+{m}"
        return out

    @property
    def memory_level(self):
        """True when memory-level saves are made."""
        return bool(self.memory_interval) and self.memory is not None and self.memory_note is None

    def _agree(self, value):
        """Rank 0's value on every rank (decisions must be the same)."""
        if self._dist is None:
            return value
        box = [value]
        self._dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def load_latest(self):
        """Restores the newest committed step, from memory when the memory
        level holds one newer than every durable step; returns it (None
        when there is none). `last_load` gets the load's figures."""
        durable = self.checkpointer.latest_step()
        memory = None
        if self.memory_level:
            try:
                memory = self.checkpointer.latest_step("memory")
            except Exception:  # no copy reachable: the durable level answers
                memory = None
        choice = None
        if memory is not None and (durable is None or memory > durable):
            choice = (memory, "memory")
        elif durable is not None:
            choice = (durable, "durable")
        choice = self._agree(choice)
        if choice is None:
            return None
        stats = {}
        step, self.extra = load(self.checkpointer, self.model, self.optimizer, self.scheduler, step=choice[0],
                                level=choice[1], stats=stats, per_rank=self._dist is not None, data=self.data)
        self.last_load = stats
        return step

    def save(self, step, extra=None, level="durable"):
        """Starts a save of this step (after the previous one finished);
        returns its handle, or None when it could not start (the failure
        is handled as any failed save's)."""
        self.wait(step)
        if self.policy is not None:
            self.policy.save_started(time.monotonic(), level)
        self.saves += 1
        self.saves_by_level[level] = self.saves_by_level.get(level, 0) + 1
        try:
            self._pending = save(self.checkpointer, step, self.model, self.optimizer, self.scheduler, extra,
                                 level=level, per_rank=self._dist is not None, data=self.data)
        except Exception as e:  # refused before it began: the storage is down, the step exists
            self._failed(step, level, e, step)
            return None
        self._pending_level, self._pending_step = level, step
        if level == "durable":
            self._retry_step = None  # this save is the retry
        if not self.async_save:
            self.wait(step)
        return self._pending

    def _level_now(self, step):
        if self._retry_step is not None and step >= self._retry_step:
            self._retry_step = None
            return "durable"
        if self.policy is not None:
            committed = self._pending is None or self._pending.done()
            if self.memory_interval is not None:
                level = self.policy.next_level(time.monotonic(), committed) or None
                # Without a memory level its turns are durable saves: skipping
                # them would leave the policy asking for memory forever.
                return "durable" if level == "memory" and not self.memory_level else level
            return "durable" if self.policy.should_checkpoint(time.monotonic(), committed) else None
        if step % self.interval == 0:
            return "durable"
        if self.memory_interval and self.memory_level and step % self.memory_interval == 0:
            return "memory"
        return None

    def step(self, step, extra=None):
        """Call after every training step: saves when `step` is a multiple of
        an interval (durable first when both are), or when the policy says
        it is time; every rank takes rank 0's decision."""
        if self.data is not None:
            self.data.advance(self._dist.get_world_size(self._group) if self._dist is not None else 1)
        if self._old_handlers and self._preemption_agreed():
            return self._preempt(step, extra)
        if self._dist is None and self._pending is not None and self._pending.done():
            self.wait(step)  # a failure is noticed now, and its retry planned from here
        level = self._level_now(step)
        if self.policy is not None:
            level = self._agree(level)
        if level is None:
            return None
        return self.save(step, extra, level)

    def _on_preempt_signal(self, signum, frame):
        if self._preempt_at is None:
            self._preempt_at = time.monotonic()

    def _preemption_agreed(self):
        """Whether a preemption signal reached any rank."""
        mine = self._preempt_at is not None
        if self._dist is None:
            return mine
        flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
        self._dist.all_reduce(flag, op=self._dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())

    def _preempt(self, step, extra):
        """Saves `step` before the deadline (memory level, then durable),
        then exits (or says so in `preempted`)."""
        if self._preempt_at is None:
            self._preempt_at = time.monotonic()  # another rank was signalled
        deadline = self._preempt_at + self.preempt_deadline

        def finish(handle):
            while not handle.done():
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.002)
            handle.wait()  # raises if it failed
            return True

        levels, abandoned = [], False
        pending, pending_step, pending_level = self._pending, self._pending_step, self._pending_level
        self._pending = None
        try:
            if pending is not None:
                if not finish(pending):
                    abandoned = True
                elif pending_step == step:
                    levels.append(pending_level)
        except Exception as e:
            self._failed(pending_step, pending_level, e, None)
        wanted = (["memory"] if self.memory_level else []) + ["durable"]
        for level in [lv for lv in wanted if lv not in levels]:
            if time.monotonic() >= deadline:
                break
            try:
                handle = save(self.checkpointer, step, self.model, self.optimizer, self.scheduler, extra, level=level,
                              per_rank=self._dist is not None, data=self.data)
                if finish(handle):
                    levels.append(level)
                else:
                    abandoned = True  # out of time: never committed, collected at the next start
                    break
            except Exception as e:
                self._failed(step, level, e, None)
        seconds = time.monotonic() - self._preempt_at
        self.preempted = {"step": step, "levels": levels, "seconds": seconds}
        if levels:
            _log.warning("preempted: step %d committed (%s) %.2f s after the signal", step, ", ".join(levels),
                         seconds)
        else:
            _log.warning("preempted: step %d could not be committed within %.1f s", step, self.preempt_deadline)
        if self.preempt_exit:
            if abandoned:
                # Exiting normally would wait for the abandoned save.
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(self.preempt_exit_code)
            sys.exit(self.preempt_exit_code)
        return None

    def wait(self, now=None):
        """Waits for the save in flight. A failure is recorded (and raised
        with raise_on_save_error); `now`, the current step, plans its retry."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                pending.wait()
            except Exception as e:
                self._failed(self._pending_step, self._pending_level, e, now)
                return
            if self._pending_level == "durable":
                self._retries_left, self._backoff = self.retry_attempts, self.retry_backoff_steps
            if self.policy is not None:
                if self.memory_interval is not None:
                    self.policy.record_save(pending, self._pending_level)
                else:
                    self.policy.record_save(pending)

    def _failed(self, step, level, error, now):
        """A save that did not commit: said, counted, retried; training goes on."""
        self.failed_saves += 1
        self.save_errors.append({"step": step, "level": level, "error": str(error)})
        if level == "memory":
            # A memory save that failed costs that step's copy only.
            self.memory_errors.append(str(error))
            warnings.warn(f"ckpt: memory step not committed: {error}")
        retry = None
        if level == "durable" and self._retries_left > 0 and now is not None:
            retry = now + self._backoff
            self._retry_step = retry
            self._retries_left -= 1
            self._backoff *= 2
        # The library said the failure at warning level; this is the plan.
        _log.info("%s save of step %s failed%s: %s", level, step,
                  f"; retrying at step {retry}" if retry is not None else "", error)
        if self.raise_on_save_error:
            raise error

    def close(self):
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers = {}
        self.wait()
        try:
            self.checkpointer.wait_all()
        except Exception as e:
            if str(e) not in {x["error"] for x in self.save_errors}:  # one already reported is no news
                self._failed(None, "durable", e, None)


# --------------------------------------------------------------------------
# Distributed: ranks coordinate through a torch.distributed process group.


def _address_toward_master():
    """This host's address on the route to $MASTER_ADDR (a datagram
    socket's connect picks the route and sends nothing); 127.0.0.1 without
    one."""
    master = os.environ.get("MASTER_ADDR")
    if not master:
        return "127.0.0.1"
    family = socket.AF_INET6 if ":" in master else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((master, int(os.environ.get("MASTER_PORT", "9"))))
        address = s.getsockname()[0]
    return f"[{address}]" if family == socket.AF_INET6 else address


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
    `offsets` of a tensor of `global_shape`. `rows_of` is (rank, world) when
    the part is the rank's even share of the rows (shard_rows): its layout."""

    def __init__(self, local, global_shape, offsets, rows_of=None):
        self.local, self.global_shape, self.offsets = local, list(global_shape), list(offsets)
        self.rows_of = rows_of


def shard_rows(tensor, rank, world):
    """This rank's rows of `tensor` split along dim 0 the way torch.chunk
    splits (FSDP-style); a view, not a copy."""
    rows = tensor.shape[0]
    per = -(-rows // world)
    start = min(rows, rank * per)
    stop = min(rows, start + per)
    return Shard(tensor[start:stop], tensor.shape, [start] + [0] * (tensor.dim() - 1), rows_of=(rank, world))


def _layouts(checkpointer, tensors):
    """{name: placement} when every value's layout over the ranks is known:
    a whole tensor (replicated: every rank holds it) or this rank's rows
    from shard_rows over all of them. None otherwise."""
    rank, world = checkpointer.rank, checkpointer.world_size
    out = {}
    for name, value in tensors.items():
        if isinstance(value, Shard):
            if value.rows_of != (rank, world):
                return None
            out[name] = 0
        else:
            out[name] = None
    return out


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
    are replicas (written once), Shards are this rank's part.

    When every value is a whole tensor or this rank's shard_rows part, the
    state is declared by its layouts over the ranks (a mesh "world"): each
    rank then works out alone which replicas it writes, and the leader
    builds the manifest from the layouts instead of every rank's chunk list.
    Every rank must then pass the same names in the same order (as with
    torch.distributed.checkpoint); a rank that does not fails the commit
    with an error that says so."""
    state = _ckpt.State()
    keep = []
    layouts = _layouts(checkpointer, tensors)
    if layouts is None:
        for name, value in tensors.items():
            _add(state, name, value, keep)
        return checkpointer.save(step, state)
    state.set_mesh(["world"], [checkpointer.world_size], checkpointer.rank)
    for name, value in tensors.items():
        t = value.local if isinstance(value, Shard) else value
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.detach()
        if not t.is_contiguous():
            if isinstance(value, Shard):
                raise InvalidArgumentError(f"{name}: the local shard must be contiguous")
            t = t.contiguous()
        keep.append(t)
        shape = value.global_shape if isinstance(value, Shard) else list(t.shape)
        state.add_layout(name, _dtype_name(t), shape, [layouts[name]], t.data_ptr(), t)
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
