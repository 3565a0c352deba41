#!/usr/bin/python3
"""Delta saves on a real training trajectory. A small transformer language
model is trained with AdamW in torch on CPU (tokens from random walks over
the vocabulary: nothing downloaded), and after --warmup steps its state is
snapshotted every --every steps: bf16 weights (what a mixed-precision trainer keeps for the
forward pass), fp32 master weights, and Adam's two moments. The snapshots
are then saved with the Checkpointer twice, on separate roots: whole with
codec auto, and with deltas (codec auto, delta_chain=--chain): the bf16
weights, the master weights and the second moment each on a root of their
own, and the whole state on another. A second
trajectory is a LoRA fine-tune: the model frozen, with adapters on its
feed-forward layers and head of the rank that leaves --frozen (0.9) of all
parameters frozen, so only the adapters change and have Adam moments.

Figures, each delta over auto on the same snapshots:
  stored bytes of every part and of the whole state, over the saves after
  the first (the first is whole either way) and over all of them;
  save throughput (logical bytes / seconds from Save to committed, whole
  state; the two roots' saves take turns, so that both meet the disk alike);
  restore time of the chain's last step (its base plus --chain deltas when
  no rebase came sooner) against the same step saved whole, and against
  the chain's first (whole) step on the same root, median of --restores
  loads, each checked bit for bit.

    benchmarks/delta_bench.py [--dir DIR] [--chain 16] [--every 10] [--json]
Needs the build's Python package on PYTHONPATH (benchmarks/run sets it).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

import ckpt._ckpt as _ckpt

PARTS = ("bf16", "master", "exp_avg", "exp_avg_sq")


class LM(torch.nn.Module):
    def __init__(self, vocab, d, layers):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.body(self.embed(x)))


class LoRALinear(torch.nn.Module):
    """A frozen linear layer plus a trainable low-rank update B A (A random,
    B zero at the start), as LoRA fine-tuning trains."""

    def __init__(self, base, rank):
        super().__init__()
        self.base = base
        self.lora_a = torch.nn.Parameter(torch.randn(rank, base.in_features) / base.in_features ** 0.5)
        self.lora_b = torch.nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


def with_lora(model, frozen):
    """Freezes every parameter of `model` and adds LoRA adapters to the feed-
    forward layers and the head, of the largest rank that leaves at least
    the fraction `frozen` of all parameters frozen."""
    for p in model.parameters():
        p.requires_grad_(False)
    base = sum(p.numel() for p in model.parameters())
    targets = [(layer, name) for layer in model.body.layers for name in ("linear1", "linear2")] + [(model, "head")]
    per_rank = sum(getattr(m, n).in_features + getattr(m, n).out_features for m, n in targets)
    rank = max(1, int(base * (1 - frozen) / frozen / per_rank))
    for m, n in targets:
        setattr(m, n, LoRALinear(getattr(m, n), rank))
    return model


def trajectory(a, frozen):
    """Snapshots of the state every a.every steps: {part: {name: tensor}},
    with the trainable and total parameter counts. With --cache DIR, a
    trajectory of the same arguments is trained once and read back after."""
    if a.cache:
        key = f"{f'frozen{a.frozen:g}' if frozen else 'dense'}-lr{a.lr:g}-s{a.saves}-e{a.every}-w{a.warmup}-" \
              f"v{a.vocab}-d{a.d}-l{a.layers}-b{a.batch}-t{a.tokens}.pt"
        path = os.path.join(a.cache, key)
        if os.path.exists(path):
            return torch.load(path)
        out = train(a, frozen)
        os.makedirs(a.cache, exist_ok=True)
        torch.save(out, path + ".part")
        os.replace(path + ".part", path)
        return out
    return train(a, frozen)


def train(a, frozen):
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model = LM(a.vocab, a.d, a.layers)
    if frozen:
        model = with_lora(model, a.frozen)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=a.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    names = {p: n for n, p in model.named_parameters()}
    snaps = []
    steps = a.warmup + a.every * (a.saves - 1)
    for step in range(steps + 1):
        if step >= a.warmup and (step - a.warmup) % a.every == 0:
            snap = {part: {} for part in PARTS}
            for n, p in model.named_parameters():
                snap["bf16"][n] = p.detach().to(torch.bfloat16).clone()
                snap["master"][n] = p.detach().clone()
            for p, st in opt.state.items():
                snap["exp_avg"][names[p]] = st["exp_avg"].detach().clone()
                snap["exp_avg_sq"][names[p]] = st["exp_avg_sq"].detach().clone()
            snaps.append(snap)
        if step == steps:
            break
        # A random walk over the vocabulary: a sequence a model can learn.
        x0 = torch.randint(a.vocab, (a.batch, 1), generator=g)
        x = (x0 + torch.cumsum(torch.randint(4, (a.batch, a.tokens + 1), generator=g), 1)) % a.vocab
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, a.vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return snaps, sum(p.numel() for p in trainable), sum(p.numel() for p in model.parameters())


DTYPE = {torch.bfloat16: "bf16", torch.float32: "f32"}


def state_of(tensors):
    s = _ckpt.State()
    for name, t in sorted(tensors.items()):
        s.add_shard(name, DTYPE[t.dtype], list(t.shape), [0] * t.dim(), list(t.shape), t.data_ptr(), t,
                    t.numel() * t.element_size())
    return s


def part_tensors(snap, parts):
    out = {}
    for part in parts:
        for n, t in snap[part].items():
            out[f"{part}/{n}"] = t
    return out


def save_side_by_side(roots, chains, snaps, parts, a):
    """Saves every snapshot into each root in turn (root i with delta chain
    chains[i]; the order alternates from one snapshot to the next), so that
    the disk's slower moments (a cloud disk's burst running out) fall on
    every root alike. Returns, per root, its checkpointer, the stored bytes
    of each save and the seconds its saves took from Save to committed (each
    save is durable: its files are synced before the commit); and the
    logical bytes of one root's saves."""
    os.sync()
    cps, stored, seconds = [], [], []
    for root, chain in zip(roots, chains):
        shutil.rmtree(root, ignore_errors=True)
        cps.append(_ckpt.Checkpointer(root, codec="auto", delta_chain=chain))
        stored.append([])
        seconds.append(0.0)
    for i, snap in enumerate(snaps):
        state = state_of(part_tensors(snap, parts))
        order = range(len(roots)) if i % 2 == 0 else reversed(range(len(roots)))
        for k in order:
            t0 = time.perf_counter()
            h = cps[k].save((i + 1) * a.every, state)
            h.wait()
            seconds[k] += time.perf_counter() - t0
            stored[k].append(h.bytes_stored)
    logical = sum(t.numel() * t.element_size() for s in snaps for t in part_tensors(s, parts).values())
    return cps, stored, seconds, logical


def restore_once(cp, step, want):
    """Seconds of one load of `step` into fresh tensors, checked bit for bit."""
    out = {n: torch.empty_like(t) for n, t in want.items()}
    s = state_of(out)
    t0 = time.perf_counter()
    cp.load(s, step)
    seconds = time.perf_counter() - t0
    for n, t in want.items():
        if not torch.equal(out[n].view(torch.int16) if t.dtype == torch.bfloat16 else out[n].view(torch.uint8),
                           t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)):
            sys.exit(f"restore of step {step} differs in {n}")
    return seconds


def restore_medians(loads, rounds):
    """Median seconds of each (checkpointer, step, tensors) in `loads`, timed
    in turn round after round, so that a slower moment of the machine
    weighs on each alike."""
    times = [[] for _ in loads]
    for _ in range(rounds):
        for i, (cp, step, want) in enumerate(loads):
            times[i].append(restore_once(cp, step, want))
    return [statistics.median(t) for t in times]


def measure(a, snaps, work, label):
    r = {}
    for group in (["bf16", "master", "exp_avg_sq", "state"] if label == "dense" else ["state"]):
        parts = PARTS if group == "state" else (group,)
        (cp_a, cp_d), (st_a, st_d), (sec_a, sec_d), logical = save_side_by_side(
            [os.path.join(work, f"{label}-{group}-auto"), os.path.join(work, f"{label}-{group}-delta")], [0, a.chain],
            snaps, parts, a)
        e = {
            "stored_auto": sum(st_a), "stored_delta": sum(st_d),
            "ratio_after_first": sum(st_d[1:]) / sum(st_a[1:]),
            "ratio_all": sum(st_d) / sum(st_a),
            "ratio_per_save": [d / w for d, w in zip(st_d, st_a)],
            "logical": logical,
        }
        if group == "state":
            e["save_mb_s_auto"] = logical / sec_a / 1e6
            e["save_mb_s_delta"] = logical / sec_d / 1e6
            e["save_throughput_ratio"] = sec_a / sec_d
            last = len(snaps) * a.every
            # The chain's first step, whole in both roots, is timed too: the
            # same codec choices as the delta root's, a baseline free of
            # auto's.
            ra, rd, rb = restore_medians([(cp_a, last, part_tensors(snaps[-1], parts)),
                                          (cp_d, last, part_tensors(snaps[-1], parts)),
                                          (cp_d, a.every, part_tensors(snaps[0], parts))], a.restores)
            e.update({"restore_s_auto": ra, "restore_s_delta": rd, "restore_ratio": rd / ra,
                      "restore_s_base": rb, "restore_x_base": rd / rb})
        r[group] = e
        del cp_a, cp_d
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--chain", type=int, default=16)
    ap.add_argument("--saves", type=int, default=17, help="snapshots (the first whole, then --chain deltas)")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=20, help="steps before the first snapshot")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--restores", type=int, default=15)
    ap.add_argument("--frozen", type=float, default=0.9, help="the frozen fraction of the LoRA fine-tune")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cache", default=None, help="a folder to keep trained trajectories in, keyed by their arguments")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="delta-bench-", dir=a.dir)
    try:
        out = {"chain": a.chain, "saves": a.saves, "every": a.every}
        t0 = time.perf_counter()
        snaps, trainable, params = trajectory(a, frozen=False)
        out["params"] = params
        out["train_s"] = time.perf_counter() - t0
        out["dense"] = measure(a, snaps, work, "dense")
        del snaps
        snaps, trainable, params = trajectory(a, frozen=True)
        out["frozen_fraction"] = 1 - trainable / params
        out["frozen"] = measure(a, snaps, work, "frozen")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['params']} parameters, {a.saves} saves every {a.every} steps, chain {a.chain}; the LoRA "
          f"fine-tune has {100 * out['frozen_fraction']:.1f}% of its parameters frozen")
    for run in ("dense", "frozen"):
        for group, e in out[run].items():
            line = f"{run:6} {group:11} delta/auto stored: {e['ratio_after_first']:.3f} after the first save, " \
                   f"{e['ratio_all']:.3f} over all"
            if group == "state":
                line += f"; save throughput {e['save_throughput_ratio']:.2f}x auto; " \
                        f"restore {e['restore_ratio']:.2f}x a whole step's, {e['restore_x_base']:.2f}x its base's"
            print(line)


if __name__ == "__main__":
    main()
