"""The benchmark suite: ckpt next to the hardware ceilings and to what users
would pick instead, on this machine and storage, in one run.

Started by benchmarks/run (which installs and builds first). Every contender
runs as its own process (its peak RSS is its own) and the contenders are
interleaved: each run visits every group in an order rotated from the last
run's, so drift of a shared disk hits all of them alike. Each figure is the
median of --runs with its range, and each ratio is the median of the per-run
ratios to the ceiling measured in the same run.

Writes results.json, chart.svg and report.md to --out; --update-docs also
rewrites the section of docs/performance.md for this --size and its chart,
docs/performance-run-SIZE.svg.
"""
import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"  # Debian's, where python3-torch and python3-h5py live
CODECS = ["none", "zstd", "shuffle-zstd", "auto"]
# Sinks for the automatic codec: the disk under --dir, mem:// (the process's
# memory, reusing the memory of the step retention removed: standing in for
# a sink faster than any compressor), tmpfs (shown, not judged: on hosts with
# shadowed page tables its kernel copy slows down in a process holding a
# large state on 4 KiB pages; see docs/performance.md) and the disk behind a
# simulated device of 200 MB/s (slower than the compressors).
SINK_CODECS = ["none", "shuffle-zstd", "auto"]
SLOW_SINK_BPS = "200M"
# Saves per codec, sink and process (their median), after two warm-up saves
# (the second brings a store whose old step is removed to its steady state).
# mem:// gets more: its saves take a tenth of a second.
SINK_SAVES, FAST_SINK_SAVES = 3, 5
# Processes per codec, sink and run, in rounds, so that the codecs are
# compared in adjacent processes (one process per codec and run, a minute
# apart, moved with the host by more than the 5% margin). mem:// gets more:
# there a save's stall is a third of it, and on a host whose memory copies
# run at 18 GB/s in one process and 30 in the next, process times fall in
# two groups, 25% apart. The median of 12 processes per codec then lands in
# either group by the luck of the draw: two codecs doing the same work
# differed by more than 5% in about one suite in six (resampled from 32
# processes of none and auto alternating), and in one in eleven with 24
# processes (8 rounds x 3 runs). The slow device, judged by stored bytes,
# gets one round.
SINK_ROUNDS, FAST_SINK_ROUNDS = 2, 8
# A sink of the automatic codec's comparison: the directory to clear between
# processes (None: nothing on disk), the --root URI, rounds per run, steps
# kept (--keep) and measured saves per process (--repeat).
Sink = collections.namedtuple("Sink", "name root uri rounds keep saves")
# The codecs' order in successive rounds: over six rounds each codec comes
# first twice and follows each other codec twice, and each pair of rounds is
# one order and its reverse. A plain rotation put auto right after
# shuffle-zstd in two rounds of three and none there never, so whatever a
# process leaves behind for the next counted against one codec only.
SINK_ORDERS = [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1], [2, 0, 1], [1, 0, 2]]
DTYPES = ["bf16", "f32"]
# Measured saves per contender and run (their median), and memcpy passes.
SAVES_PER_RUN = 3
MEMCPY_PASSES = 5
# Saves of the stall target per dtype and run, each followed by memcpy on as
# many threads in the same process (--memcpy-beside): a pass a minute away
# from the save it is compared with moves with the host.
STALL_SAVES = 5
DTYPE_BYTES = {"bf16": 2, "f32": 4}
SAVE_MESH, RESHARD_MESHES = "tp=4", ["tp=2", "tp=3", "tp=8"]
# Loads of each mesh per run, in rounds whose order alternates; a mesh is
# judged by the median of its ratios to the same round's same-mesh load, as
# one load per run moved with the host by more than the targets' margins.
RESHARD_ROUNDS = 3
# Loads of each rank per process, its median counted: on a disk whose speed
# wandered between 1.5 and 5.6 GB/s from one read of a file to the next, one
# load per rank put a round's tp=8/tp=4 ratio anywhere in 0.63-1.91; the
# median of 5 kept it in 0.76-1.27 (8 rounds each, 512M bf16 parameters).
RESHARD_REPEAT = 5
PLAN_ARGS = ["--ranks-from", "dp=128,tp=8,pp=16", "--ranks-to", "dp=64,tp=8,pp=32", "--params", "70G",
             "--layers", "80", "--optimizer", "adam", "--zero"]
# Tensor-parallel moves of the 70B state saved on dp=128,tp=8,pp=16 (ranks kept
# within a few percent): read amplification from `ckpt plan`.
TP_FROM = "dp=128,tp=8,pp=16"
TP_MOVES = ["dp=96,tp=12,pp=16", "dp=192,tp=6,pp=16", "dp=64,tp=16,pp=16"]
TP_MODEL = ["--params", "70G", "--layers", "80", "--optimizer", "adam", "--zero"]
# Learning rates of the delta benchmark's AdamW runs: a pretraining-like
# one and a fine-tuning-like one (how far weights move between saves decides
# what a delta stores).
DELTA_LRS = ["3e-4", "3e-5"]
DELTA_QUICK = ["--saves", "4", "--chain", "3", "--every", "2", "--warmup", "2", "--d", "32", "--layers", "1",
               "--vocab", "64", "--restores", "1"]


def size_label(n):
    """The --size a state of n bytes is asked for with: 1G, 256M."""
    for unit, shift in [("T", 40), ("G", 30), ("M", 20), ("K", 10)]:
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def doc_section(n):
    """performance.md holds one generated section per state size, between
    these markers, and its chart beside it."""
    tag = f"benchmarks/run --size {size_label(n)}"
    return f"<!-- BEGIN {tag} -->", f"<!-- END {tag} -->", f"performance-run-{size_label(n)}.svg"


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def human(n):
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def spawn_and_wait(argv, env):
    """Runs argv; returns (returncode, stdout, stderr, wall seconds, peak RSS bytes)."""
    t0 = time.perf_counter()
    # stderr goes to a file, so a chatty child cannot block on a full pipe
    # while stdout is read; the child is reaped with wait4 for its rusage.
    with tempfile.TemporaryFile("w+") as errf:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, env=env, text=True)
        out = p.stdout.read()
        p.stdout.close()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        errf.seek(0)
        err = errf.read()
    return p.returncode, out, err, wall, usage.ru_maxrss * 1024


class Suite:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.ckpt = os.path.join(self.build, "tools", "ckpt")
        self.probe = os.path.join(self.build, "benchmarks", "bench_probe")
        self.contenders = os.path.join(REPO, "benchmarks", "contenders.py")
        self.s3_clients = os.path.join(REPO, "benchmarks", "s3_clients.py")
        self.s3 = None  # the S3 server's endpoint once started
        self.env = dict(os.environ, PYTHONPATH=os.path.join(self.build, "integrations", "python"))
        self.dir = os.path.abspath(a.dir)
        self.tty = sys.stderr.isatty()
        self.step = 0
        self.steps = 0

    # -- running one contender ------------------------------------------
    def run(self, label, argv):
        self.step += 1
        if self.tty:
            sys.stderr.write(f"\r\033[K[{self.step}/{self.steps}] run {self.run_index + 1}: {label}")
            sys.stderr.flush()
        rc, out, err, wall, rss = spawn_and_wait(argv, self.env)
        if rc != 0:
            raise RuntimeError(f"{label} failed (exit {rc}): {' '.join(argv)}\n{err.strip()}")
        try:
            fig = json.loads(out)  # fio: one document over many lines
        except ValueError:
            lines = [l for l in out.splitlines() if l.startswith("{")]
            if not lines:
                raise RuntimeError(f"{label}: no JSON in its output:\n{out}\n{err}")
            fig = json.loads(lines[-1])
        fig["wall_s"] = wall
        fig["peak_rss_bytes"] = rss
        return fig

    def fio(self, path, write, size=None):
        argv = ["fio", "--name=ceiling", f"--filename={path}", f"--rw={'write' if write else 'read'}",
                "--bs=4m", f"--size={size or self.bytes}", "--direct=1", "--ioengine=io_uring", "--iodepth=64",
                "--numjobs=1", "--output-format=json"]  # fio preallocates the file, as ckpt does
        if write:
            argv.append("--end_fsync=1")
        fig = self.run(f"fio {'write' if write else 'read'}", argv)
        job = fig["jobs"][0]["write" if write else "read"]
        return {"bytes_per_s": float(job["bw_bytes"]), "peak_rss_bytes": fig["peak_rss_bytes"]}

    # -- the groups of one run ------------------------------------------
    def params(self, dtype):
        return str(self.bytes // DTYPE_BYTES[dtype])

    def group_ceilings(self, r):
        path = os.path.join(self.dir, "ceiling.bin")
        r["fio_write"] = self.fio(path, True)
        r["fio_read"] = self.fio(path, False)
        os.remove(path)
        size = str(min(self.bytes, 1 << 30))
        # Medians of several passes: one pass takes a few milliseconds, and
        # a shared host's other work lands in some of them.
        r["memcpy"] = self.run("memcpy", [self.probe, "memcpy", "--size", size, "--repeat", str(MEMCPY_PASSES)])
        # The stall's ceiling: memcpy on as many threads as a save stages with.
        r["memcpy_staging"] = self.run("memcpy (staging threads)", [self.probe, "memcpy", "--size", size,
                                                                     "--threads", "0", "--repeat",
                                                                     str(MEMCPY_PASSES)])

    def group_ckpt(self, r, dtype, codec):
        root = os.path.join(self.dir, f"ckpt-{dtype}-{codec}")
        shutil.rmtree(root, ignore_errors=True)
        key = f"ckpt/{dtype}/{codec}"
        r[key + "/save"] = self.run(f"ckpt save {dtype} {codec}", [
            self.probe, "save", "--root", root, "--params", self.params(dtype), "--dtype", dtype,
            "--codec", codec, "--repeat", str(SAVES_PER_RUN)])
        r[key + "/load"] = self.run(f"ckpt load {dtype} {codec}", [
            self.probe, "load", "--root", root, "--step", "1", "--mesh", "dp=1"])
        # The read ceiling of these very bytes, right after ckpt read them:
        # the disk sits behind caches whose state a separate file would not
        # share (fio reads them warmed by ckpt's read, if anything).
        data = os.path.join(root, "step-0000000001", "rank-000000.ckd")
        r[key + "/fio_read"] = self.fio(data, False, os.path.getsize(data) // (4 << 20) * (4 << 20))
        r[key + "/verify"] = self.run(f"ckpt verify {dtype} {codec}", [
            self.ckpt, "verify", root, "--step", "1", "--json"])
        shutil.rmtree(root, ignore_errors=True)
        if codec == "none":
            # Its own process: the memcpy buffers would count in the peak
            # RSS of the save above.
            r[f"ckpt/{dtype}/stall"] = self.run(f"ckpt stall {dtype}, each save beside memcpy", [
                self.probe, "save", "--root", root, "--params", self.params(dtype), "--dtype", dtype,
                "--codec", codec, "--repeat", str(STALL_SAVES), "--memcpy-beside"])
            shutil.rmtree(root, ignore_errors=True)

    def group_reshard600(self, r):
        """tp=4 -> tp=3 of a --reshard-params model (2 layers, so its matrices
        are large): what `ckpt restore-check --json` reports it decoded."""
        root = os.path.join(self.dir, "ckpt-reshard600")
        shutil.rmtree(root, ignore_errors=True)
        self.run("ckpt synth on tp=4", [self.ckpt, "synth", "--out", root, "--params", self.a.reshard_params, "--mesh", "tp=4",
                                             "--layers", "2", "--step", "1", "--json"])
        r["reshard600/params"] = self.a.reshard_params
        r["reshard600/tp=3"] = self.run("ckpt restore-check onto tp=3", [
            self.ckpt, "restore-check", root, "--mesh", "tp=3", "--json"])
        shutil.rmtree(root, ignore_errors=True)

    def sinks(self):
        """The sinks auto is compared on, each a Sink."""
        disk_dir = os.path.join(self.dir, "ckpt-sink-disk")
        slow_dir = os.path.join(self.dir, "ckpt-slow")
        # mem:// keeps the newest step, with room for the one retention
        # removes, so the next reuses its memory. Files stay on the others,
        # so that no save there follows a removal (an unlink of 1 GiB takes
        # 0.30 s on ext4, and the next save writes into what it freed).
        out = [Sink("disk", disk_dir, disk_dir, SINK_ROUNDS, 0, SINK_SAVES),
               Sink("fast", None, f"mem://ckpt-bench-{os.getpid()}?spare={2 * self.bytes}", FAST_SINK_ROUNDS, 1,
                    FAST_SINK_SAVES)]
        if os.path.isdir("/dev/shm"):
            shm = os.path.join("/dev/shm", f"ckpt-bench-{os.getpid()}")
            out.append(Sink("tmpfs", shm, shm, SINK_ROUNDS, 0, SINK_SAVES))
        out.append(Sink("slow", slow_dir, f"faulty://{slow_dir}?fault.write_bandwidth={SLOW_SINK_BPS}", 1, 0,
                        SINK_SAVES))
        return out

    def sink_processes(self):
        return sum(sink.rounds for sink in self.sinks()) * len(SINK_CODECS)

    def group_sinks(self, r):
        for name, root, uri, rounds, keep, saves in self.sinks():
            figs = {c: [] for c in SINK_CODECS}
            orders = r[f"sink/{name}/orders"] = []
            for i in range(rounds):
                order = [SINK_CODECS[c] for c in SINK_ORDERS[(self.run_index * rounds + i) % len(SINK_ORDERS)]]
                orders.append(order)
                for codec in order:
                    if root:
                        shutil.rmtree(root, ignore_errors=True)
                    figs[codec].append(self.run(f"ckpt save {codec} on the {name} sink (round {i + 1})", [
                        self.probe, "save", "--root", uri, "--params", self.params("bf16"), "--codec", codec,
                        "--warmup", "2", "--keep", str(keep), "--repeat", str(saves)]))
                    if root:
                        shutil.rmtree(root, ignore_errors=True)
            for codec, got in figs.items():
                # This run's figure: the median of its rounds' medians.
                r[f"sink/{name}/{codec}"] = dict(got[0], commit_s=statistics.median(g["commit_s"] for g in got))
                r[f"sink/{name}/{codec}/rounds"] = [g["commit_s"] for g in got]

    def group_reshard(self, r):
        root = os.path.join(self.dir, "ckpt-reshard")
        shutil.rmtree(root, ignore_errors=True)
        r["reshard/save"] = self.run(f"ckpt save on {SAVE_MESH}", [
            self.probe, "save", "--root", root, "--params", self.params("bf16"), "--mesh", SAVE_MESH])
        # The same mesh first and the others after, alternating between
        # rounds, so the host cache a read warms does not favour one side.
        rounds = []
        for i in range(RESHARD_ROUNDS):
            meshes = [SAVE_MESH] + RESHARD_MESHES
            if (self.run_index * RESHARD_ROUNDS + i) % 2:
                meshes = RESHARD_MESHES + [SAVE_MESH]
            got = {}
            for mesh in meshes:
                got[mesh] = r[f"reshard/load/{mesh}"] = self.run(f"ckpt load onto {mesh} (round {i + 1})", [
                    self.probe, "load", "--root", root, "--step", "1", "--mesh", mesh, "--repeat", str(RESHARD_REPEAT)])
            rounds.append({mesh: fig["load_s"] for mesh, fig in got.items()})
        r["reshard/rounds"] = rounds
        shutil.rmtree(root, ignore_errors=True)

    def group_python(self, r, dtype, tool):
        path = os.path.join(self.dir, f"{tool}-{dtype}.{'pt' if tool == 'torch' else 'h5'}")
        common = ["--params", self.params(dtype), "--dtype", dtype]
        r[f"{tool}/{dtype}/save"] = self.run(f"{tool} save {dtype}", [
            PYTHON, self.contenders, f"{tool}-save", "--file", path] + common)
        r[f"{tool}/{dtype}/load"] = self.run(f"{tool} load {dtype}", [
            PYTHON, self.contenders, f"{tool}-load", "--file", path] + common)
        r[f"{tool}/{dtype}/fio_read"] = self.fio(path, False, os.path.getsize(path) // (4 << 20) * (4 << 20))
        os.remove(path)

    def group_ckpt_py(self, r, dtype):
        root = os.path.join(self.dir, f"ckpt-py-{dtype}")
        shutil.rmtree(root, ignore_errors=True)
        r[f"ckpt-py/{dtype}/save"] = self.run(f"ckpt.torch save {dtype}", [
            PYTHON, self.contenders, "ckpt-py-save", "--root", root, "--params", self.params(dtype),
            "--dtype", dtype])
        shutil.rmtree(root, ignore_errors=True)

    def group_interference(self, r):
        """A real torch training loop on one thread, its steps timed while
        saves persist in the background (durable and memory level) and
        without saves (benchmarks/interference_bench.py)."""
        r["interference"] = self.run("trainer steps during background saves", [
            PYTHON, os.path.join(REPO, "benchmarks", "interference_bench.py"), "--dir", self.dir, "--rounds", "2",
            "--steps", str(self.a.interference_steps), "--json"])

    def group_delta(self, r):
        """Delta saves against whole ones on the snapshots of a real AdamW
        run (benchmarks/delta_bench.py), once per learning rate."""
        for lr in DELTA_LRS:
            r[f"delta/{lr}"] = self.run(f"delta saves (AdamW lr {lr})", [
                PYTHON, os.path.join(REPO, "benchmarks", "delta_bench.py"), "--dir", self.dir, "--lr", lr, "--json"]
                + (DELTA_QUICK if self.a.delta_quick else []))

    def group_safetensors(self, r):
        """ckpt export --format safetensors of a bf16 step, then a load of the
        model in place, next to fio reading the largest shard."""
        root = os.path.join(self.dir, "st-source")
        hf = os.path.join(self.dir, "st-bf16")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(hf, ignore_errors=True)
        self.run("ckpt save for export", [self.probe, "save", "--root", root, "--params", self.params("bf16"),
                                          "--dtype", "bf16"])
        r["safetensors/export"] = self.run("ckpt export --format safetensors", [
            self.ckpt, "export", root, "--format", "safetensors", "--to", hf, "--step", "1", "--json"])
        shutil.rmtree(root, ignore_errors=True)
        r["safetensors/load"] = self.run("load the safetensors model", [
            self.probe, "load", "--root", hf, "--step", "1", "--mesh", "dp=1"])
        shards = [os.path.join(hf, f) for f in os.listdir(hf) if f.endswith(".safetensors")]
        big = max(shards, key=os.path.getsize)
        r["safetensors/fio_read"] = self.fio(big, False, os.path.getsize(big) // (4 << 20) * (4 << 20))
        shutil.rmtree(hf, ignore_errors=True)

    def start_s3(self):
        """A one-node RADOS Gateway under --dir (scripts/s3-test-server.sh):
        s3:// is measured against a real S3 server, next to the AWS CLI and
        s3cmd moving the same bytes to it."""
        d = os.path.join(self.dir, "s3-server")
        p = subprocess.run([os.path.join(REPO, "scripts", "s3-test-server.sh"), "start", d],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"the S3 server did not start:\n{p.stdout}\n{p.stderr}")
        with open(os.path.join(d, "env")) as f:
            for word in f.read().split():
                if "=" in word:
                    k, v = word.split("=", 1)
                    self.env[k] = v
        self.s3 = self.env["S3_ENDPOINT"]
        self.s3_dir = d

    def stop_s3(self):
        if self.s3:
            subprocess.run([os.path.join(REPO, "scripts", "s3-test-server.sh"), "stop", self.s3_dir],
                           capture_output=True)
            self.s3 = None

    def s3_empty(self):
        subprocess.run(["/usr/bin/aws", "--endpoint-url", self.s3, "s3", "rm", "--recursive", "--only-show-errors",
                        "s3://ckpt-test/"], env=self.env, check=True)

    def group_s3(self, r):
        """ckpt's save and load of the bf16 state through s3://, then the AWS
        CLI and s3cmd moving the very data object ckpt wrote (down, up) to
        the same server; and a tp=4 -> tp=3 restore from s3://."""
        uri = f"s3://ckpt-test/ckpt?endpoint={self.s3}"
        r["s3/ckpt/save"] = self.run("ckpt save to s3://", [
            self.probe, "save", "--root", uri, "--params", self.params("bf16")])
        r["s3/ckpt/load"] = self.run("ckpt load from s3://", [
            self.probe, "load", "--root", uri, "--step", "1", "--mesh", "dp=1"])
        obj = "s3://ckpt-test/ckpt/step-0000000001/rank-000000.ckd"
        local = os.path.join(self.dir, "s3-object.ckd")
        for tool in ["aws", "s3cmd"]:
            r[f"s3/{tool}/get"] = self.run(f"{tool} download", [
                PYTHON, self.s3_clients, f"{tool}-get", "--file", local, "--url", obj, "--endpoint", self.s3])
            r[f"s3/{tool}/put"] = self.run(f"{tool} upload", [
                PYTHON, self.s3_clients, f"{tool}-put", "--file", local, "--url", f"s3://ckpt-test/{tool}/object.ckd",
                "--endpoint", self.s3])
            os.remove(local)
        self.s3_empty()
        reshard = f"s3://ckpt-test/reshard?endpoint={self.s3}"
        self.run("ckpt synth on tp=4 to s3://", [self.ckpt, "synth", "--out", reshard, "--params",
                                                  self.a.reshard_params, "--mesh", "tp=4", "--layers", "2",
                                                  "--step", "1", "--json"])
        r["s3/reshard/tp=3"] = self.run("ckpt restore-check onto tp=3 from s3://", [
            self.ckpt, "restore-check", reshard, "--mesh", "tp=3", "--json"])
        self.s3_empty()

    def group_plan(self, r):
        r["plan"] = self.run("ckpt plan at 16,384 ranks", [self.ckpt, "plan"] + PLAN_ARGS + ["--json"])
        for to in TP_MOVES:
            r[f"plan/{to}"] = self.run(f"ckpt plan {TP_FROM} -> {to}", [
                self.ckpt, "plan", "--ranks-from", TP_FROM, "--ranks-to", to] + TP_MODEL + ["--json"])

    def groups(self):
        g = [("ceilings", self.group_ceilings, 4)]
        for dtype in DTYPES:
            for codec in CODECS:
                g.append((f"ckpt {dtype} {codec}", lambda r, d=dtype, c=codec: self.group_ckpt(r, d, c),
                          5 if codec == "none" else 4))
        g.append(("reshard", self.group_reshard, 1 + RESHARD_ROUNDS * (1 + len(RESHARD_MESHES))))
        g.append(("reshard 600M", self.group_reshard600, 2))
        g.append(("sinks", self.group_sinks, self.sink_processes()))
        for dtype in DTYPES:
            g.append((f"torch {dtype}", lambda r, d=dtype: self.group_python(r, d, "torch"), 3))
            g.append((f"h5py {dtype}", lambda r, d=dtype: self.group_python(r, d, "h5py"), 3))
            g.append((f"ckpt.torch {dtype}", lambda r, d=dtype: self.group_ckpt_py(r, d), 1))
        g.append(("safetensors", self.group_safetensors, 4))
        g.append(("interference", self.group_interference, 1))
        g.append(("delta", self.group_delta, len(DELTA_LRS)))
        if self.s3:
            g.append(("s3", self.group_s3, 8))
        g.append(("plan", self.group_plan, 1 + len(TP_MOVES)))
        return g

    def measure(self):
        self.bytes = self.a.size
        os.makedirs(self.dir, exist_ok=True)
        if not self.a.no_s3:
            self.start_s3()
        try:
            return self.measure_groups()
        finally:
            self.stop_s3()

    def measure_groups(self):
        groups = self.groups()
        self.steps = sum(n for _, _, n in groups) * self.a.runs
        runs = []
        t0 = time.time()
        for i in range(self.a.runs):
            self.run_index = i
            r = {}
            k = (i * 5) % len(groups)  # a different group leads each run
            for _, fn, _ in groups[k:] + groups[:k]:
                fn(r)
            runs.append(r)
        if self.tty:
            sys.stderr.write("\r\033[K")
        return runs, time.time() - t0


# -- figures --------------------------------------------------------------

def stat(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def summarize(runs):
    """Medians, ranges and per-run ratios of everything measured."""
    s = {}

    def per_run(fn):
        out = []
        for r in runs:
            try:
                out.append(fn(r))
            except (KeyError, ZeroDivisionError):
                out.append(None)
        return stat(out)

    s["write_ceiling"] = per_run(lambda r: r["fio_write"]["bytes_per_s"])
    s["read_ceiling"] = per_run(lambda r: r["fio_read"]["bytes_per_s"])
    s["memcpy"] = per_run(lambda r: r["memcpy"]["bytes_per_s"])
    s["memcpy_staging"] = per_run(lambda r: r["memcpy_staging"]["bytes_per_s"])
    s["staging_threads"] = runs[0]["memcpy_staging"]["threads"]
    for dtype in DTYPES:
        k = f"ckpt/{dtype}/stall"
        s[k] = {
            "stall_s": per_run(lambda r: r[k]["stall_s"]),
            "memcpy": per_run(lambda r: r[k]["memcpy_bytes_per_s"]),
            "stall_x_memcpy": per_run(lambda r: r[k]["stall_x_memcpy"]),
        }
    for dtype in DTYPES:
        alt_save = lambda r, d=dtype: min(r[f"torch/{d}/save"]["seconds"], r[f"h5py/{d}/save"]["seconds"])
        alt_load = lambda r, d=dtype: min(r[f"torch/{d}/load"]["seconds"], r[f"h5py/{d}/load"]["seconds"])
        for codec in CODECS:
            k = f"ckpt/{dtype}/{codec}"
            d = s[k] = {}
            d["bytes"] = runs[0][k + "/save"]["bytes"]
            d["stored_ratio"] = runs[0][k + "/save"]["bytes_stored"] / d["bytes"]
            d["stall_s"] = per_run(lambda r: r[k + "/save"]["stall_s"])
            d["commit_s"] = per_run(lambda r: r[k + "/save"]["commit_s"])
            d["load_s"] = per_run(lambda r: r[k + "/load"]["load_s"])
            d["verify_s"] = per_run(lambda r: r[k + "/verify"]["wall_s"])
            d["save_bps"] = per_run(lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["commit_s"])
            d["load_bps"] = per_run(lambda r: r[k + "/load"]["bytes_needed"] / r[k + "/load"]["load_s"])
            d["stall_x_memcpy"] = per_run(
                lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["stall_s"] / r["memcpy_staging"]["bytes_per_s"])
            d["save_x_write"] = per_run(
                lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["commit_s"] / r["fio_write"]["bytes_per_s"])
            # Stored bytes off the disk per second, against fio reading the
            # same data file right after.
            d["load_x_read"] = per_run(
                lambda r: r[k + "/load"]["bytes_read"] / r[k + "/load"]["load_s"] / r[k + "/fio_read"]["bytes_per_s"])
            d["load_x_read_group"] = per_run(
                lambda r: r[k + "/load"]["bytes_read"] / r[k + "/load"]["load_s"] / r["fio_read"]["bytes_per_s"])
            d["verify_x_read"] = per_run(
                lambda r: r[k + "/save"]["bytes_stored"] / r[k + "/verify"]["wall_s"] / r[k + "/fio_read"]["bytes_per_s"])
            d["paired_read_ceiling"] = per_run(lambda r: r[k + "/fio_read"]["bytes_per_s"])
            d["save_speedup_vs_best_alt"] = per_run(lambda r: alt_save(r) / r[k + "/save"]["commit_s"])
            d["load_speedup_vs_best_alt"] = per_run(lambda r: alt_load(r) / r[k + "/load"]["load_s"])
            d["stall_over_torch_save"] = per_run(
                lambda r: r[k + "/save"]["stall_s"] / r[f"torch/{dtype}/save"]["seconds"])
            d["save_speedup_vs_torch"] = per_run(
                lambda r: r[f"torch/{dtype}/save"]["seconds"] / r[k + "/save"]["commit_s"])
            d["load_speedup_vs_torch"] = per_run(
                lambda r: r[f"torch/{dtype}/load"]["seconds"] / r[k + "/load"]["load_s"])
            d["peak_rss_save"] = per_run(lambda r: r[k + "/save"]["peak_rss_bytes"])
            d["peak_rss_load"] = per_run(lambda r: r[k + "/load"]["peak_rss_bytes"])
            d["peak_rss_verify"] = per_run(lambda r: r[k + "/verify"]["peak_rss_bytes"])
            sv = runs[0][k + "/save"]
            d["rss_budget"] = sv["state_bytes"] + sv["staging_bytes"]
            d["rss_x_budget"] = per_run(lambda r: r[k + "/save"]["peak_rss_bytes"] / d["rss_budget"])
        for tool in ["torch", "h5py"]:
            k = f"{tool}/{dtype}"
            s[k] = {
                "save_s": per_run(lambda r: r[k + "/save"]["seconds"]),
                "load_s": per_run(lambda r: r[k + "/load"]["seconds"]),
                "save_bps": per_run(lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["seconds"]),
                "load_bps": per_run(lambda r: r[k + "/load"]["bytes"] / r[k + "/load"]["seconds"]),
                "save_x_write": per_run(
                    lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["seconds"] / r["fio_write"]["bytes_per_s"]),
                "load_x_read": per_run(
                    lambda r: r[k + "/load"]["bytes"] / r[k + "/load"]["seconds"] / r[k + "/fio_read"]["bytes_per_s"]),
                "peak_rss_save": per_run(lambda r: r[k + "/save"]["peak_rss_bytes"]),
                "peak_rss_load": per_run(lambda r: r[k + "/load"]["peak_rss_bytes"]),
            }
        k = f"ckpt-py/{dtype}"
        s[k] = {
            "stall_s": per_run(lambda r: r[k + "/save"]["stall_s"]),
            "commit_s": per_run(lambda r: r[k + "/save"]["commit_s"]),
            "save_bps": per_run(lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["commit_s"]),
            "save_x_write": per_run(
                lambda r: r[k + "/save"]["bytes"] / r[k + "/save"]["commit_s"] / r["fio_write"]["bytes_per_s"]),
            "stall_over_torch_save": per_run(
                lambda r: r[k + "/save"]["stall_s"] / r[f"torch/{dtype}/save"]["seconds"]),
            "save_speedup_vs_torch": per_run(
                lambda r: r[f"torch/{dtype}/save"]["seconds"] / r[k + "/save"]["commit_s"]),
            "peak_rss_save": per_run(lambda r: r[k + "/save"]["peak_rss_bytes"]),
        }
    ex = "safetensors/export"
    ld = "safetensors/load"
    s["safetensors/bf16"] = {
        "bytes": runs[0][ex]["total_size"],
        "export_s": per_run(lambda r: r[ex]["wall_s"]),
        "export_x_write": per_run(lambda r: r[ex]["total_size"] / r[ex]["wall_s"] / r["fio_write"]["bytes_per_s"]),
        "export_speedup_vs_torch_save": per_run(lambda r: r["torch/bf16/save"]["seconds"] / r[ex]["wall_s"]),
        "peak_rss_export": per_run(lambda r: r[ex]["peak_rss_bytes"]),
        "load_s": per_run(lambda r: r[ld]["load_s"]),
        "load_x_read": per_run(
            lambda r: r[ld]["bytes_read"] / r[ld]["load_s"] / r["safetensors/fio_read"]["bytes_per_s"]),
        "load_speedup_vs_torch_load": per_run(lambda r: r["torch/bf16/load"]["seconds"] / r[ld]["load_s"]),
        "read_amplification": per_run(lambda r: r[ld]["bytes_read"] / r[ld]["bytes_needed"]),
        "peak_rss_load": per_run(lambda r: r[ld]["peak_rss_bytes"]),
    }
    def rounds_median(r, fn):
        return statistics.median(fn(rd) for rd in r["reshard/rounds"])

    s["reshard"] = {"saved_on": SAVE_MESH, "rounds": RESHARD_ROUNDS,
                    "same_mesh_s": per_run(lambda r: rounds_median(r, lambda rd: rd[SAVE_MESH]))}
    for mesh in RESHARD_MESHES:
        k = f"reshard/load/{mesh}"
        s["reshard"][mesh] = {
            "load_s": per_run(lambda r: rounds_median(r, lambda rd: rd[mesh])),
            "x_same_mesh": per_run(lambda r: rounds_median(r, lambda rd: rd[mesh] / rd[SAVE_MESH])),
            "read_amplification": per_run(lambda r: r[k]["bytes_decoded"] / r[k]["bytes_needed"]),
            "peak_rss": per_run(lambda r: r[k]["peak_rss_bytes"]),
        }
    s["plan"] = {
        "wall_s": per_run(lambda r: r["plan"]["wall_s"]),
        "peak_rss": per_run(lambda r: r["plan"]["peak_rss_bytes"]),
        "json": runs[0]["plan"],
    }
    s["tp_moves"] = {to: runs[0][f"plan/{to}"]["read_amplification"] for to in TP_MOVES}
    s["reshard600"] = per_run(lambda r: r["reshard600/tp=3"]["bytes_decoded"] / r["reshard600/tp=3"]["bytes_needed"])
    if "sink/fast/auto" in runs[0]:
        s["sinks"] = {}
        for name in [n for n in ["disk", "fast", "tmpfs", "slow"] if f"sink/{n}/auto" in runs[0]]:
            pooled = {}
            for codec in SINK_CODECS:
                k = f"sink/{name}/{codec}"
                # Every process's median, all runs and rounds together.
                # (Results saved before rounds have one figure per run.)
                rounds = lambda r, k=k: r.get(k + "/rounds", [r[k]["commit_s"]])
                pooled[codec] = statistics.median(x for r in runs for x in rounds(r))
                s["sinks"][f"{name}/{codec}"] = {
                    "commit_s": per_run(lambda r: r[k]["commit_s"]),
                    "commit_s_pooled": pooled[codec],
                    "processes": sum(len(rounds(r)) for r in runs),
                    "stored_ratio": runs[0][k]["bytes_stored"] / runs[0][k]["bytes"],
                }
            # Judged on the pooled medians (the faster of two per-run
            # figures is biased low on a noisy host); the range is the
            # per-run ratios'.
            each = per_run(lambda r, n=name: r[f"sink/{n}/auto"]["commit_s"] /
                           min(r[f"sink/{n}/none"]["commit_s"], r[f"sink/{n}/shuffle-zstd"]["commit_s"]))
            each["median"] = pooled["auto"] / min(pooled["none"], pooled["shuffle-zstd"])
            s["sinks"][f"{name}/auto_x_best"] = each
    if "interference" in runs[0]:
        s["interference"] = {level: per_run(lambda r, l=level: r["interference"][l]["ratio"])
                             for level in ["durable", "memory"]}
        s["interference"]["step_s"] = per_run(lambda r: r["interference"]["step_s_without_saves"])
    for lr in DELTA_LRS:
        k = f"delta/{lr}"
        if k not in runs[0]:
            continue
        d = s.setdefault("delta", {})
        d[lr] = {
            "bf16_after_first": per_run(lambda r, k=k: r[k]["dense"]["bf16"]["ratio_after_first"]),
            "bf16_all": per_run(lambda r, k=k: r[k]["dense"]["bf16"]["ratio_all"]),
            "master_after_first": per_run(lambda r, k=k: r[k]["dense"]["master"]["ratio_after_first"]),
            "v_after_first": per_run(lambda r, k=k: r[k]["dense"]["exp_avg_sq"]["ratio_after_first"]),
            "state_after_first": per_run(lambda r, k=k: r[k]["dense"]["state"]["ratio_after_first"]),
            "state_all": per_run(lambda r, k=k: r[k]["dense"]["state"]["ratio_all"]),
            "frozen_after_first": per_run(lambda r, k=k: r[k]["frozen"]["state"]["ratio_after_first"]),
            "frozen_all": per_run(lambda r, k=k: r[k]["frozen"]["state"]["ratio_all"]),
            "save_x_auto": per_run(lambda r, k=k: r[k]["dense"]["state"]["save_throughput_ratio"]),
            "restore_x_whole": per_run(lambda r, k=k: r[k]["dense"]["state"]["restore_ratio"]),
            "frozen_restore_x_whole": per_run(lambda r, k=k: r[k]["frozen"]["state"]["restore_ratio"]),
            "restore_x_base": per_run(lambda r, k=k: r[k]["dense"]["state"]["restore_x_base"]),
            "frozen_fraction": per_run(lambda r, k=k: r[k]["frozen_fraction"]),
        }
    if "s3/ckpt/save" in runs[0]:
        best_put = lambda r: min(r["s3/aws/put"]["seconds"], r["s3/s3cmd/put"]["seconds"])
        best_get = lambda r: min(r["s3/aws/get"]["seconds"], r["s3/s3cmd/get"]["seconds"])
        rs = "s3/reshard/tp=3"
        s["s3"] = {
            "bytes": runs[0]["s3/ckpt/save"]["bytes"],
            "save_s": per_run(lambda r: r["s3/ckpt/save"]["commit_s"]),
            "stall_s": per_run(lambda r: r["s3/ckpt/save"]["stall_s"]),
            "load_s": per_run(lambda r: r["s3/ckpt/load"]["load_s"]),
            "save_bps": per_run(lambda r: r["s3/ckpt/save"]["bytes"] / r["s3/ckpt/save"]["commit_s"]),
            "load_bps": per_run(lambda r: r["s3/ckpt/load"]["bytes_needed"] / r["s3/ckpt/load"]["load_s"]),
            "save_x_best_cli": per_run(lambda r: best_put(r) / r["s3/ckpt/save"]["commit_s"]),
            "load_x_best_cli": per_run(lambda r: best_get(r) / r["s3/ckpt/load"]["load_s"]),
            "reshard_read_amplification": per_run(lambda r: r[rs]["bytes_read"] / r[rs]["bytes_needed"]),
            "peak_rss_save": per_run(lambda r: r["s3/ckpt/save"]["peak_rss_bytes"]),
        }
        for tool in ["aws", "s3cmd"]:
            for op in ["put", "get"]:
                s["s3"][f"{tool}_{op}_s"] = per_run(lambda r, t=tool, o=op: r[f"s3/{t}/{o}"]["seconds"])
    return s


def targets(s):
    """Each target of the suite: (name, figure text, met)."""
    out = []

    def add(name, value, ok, text):
        out.append({"target": name, "value": value, "met": bool(ok), "figure": text})

    for dtype in DTYPES:
        n = s[f"ckpt/{dtype}/none"]
        x = n["save_x_write"]["median"]
        add(f"durable save (none, {dtype}) >= 0.9x write ceiling", x, x >= 0.9, f"{x:.2f}x")
        sp = n["save_speedup_vs_torch"]["median"]
        add(f"durable save (none, {dtype}) >= 1.3x faster than torch.save + fsync", sp, sp >= 1.3, f"{sp:.2f}x")
        st = s[f"ckpt/{dtype}/stall"]["stall_x_memcpy"]["median"]
        add(f"stall ({dtype}) >= 0.9x memcpy of as many threads ({s['staging_threads']}), each save beside its "
            "own pass", st, st >= 0.9, f"{st:.2f}x")
        so = n["stall_over_torch_save"]["median"]
        add(f"stall ({dtype}) <= 1/20 of torch.save's wall time", so, so <= 0.05, f"1/{1 / so:.0f}")
        lx = n["load_x_read"]["median"]
        add(f"load ({dtype}) >= 0.9x read ceiling", lx, lx >= 0.9, f"{lx:.2f}x")
        lt = n["load_speedup_vs_best_alt"]["median"]
        add(f"load ({dtype}) faster than torch.load and h5py", lt, lt > 1.0, f"{lt:.2f}x")
    sz = s["ckpt/bf16/shuffle-zstd"]["save_x_write"]["median"]
    add("shuffle-zstd on bf16: logical throughput >= 1.3x the raw write ceiling", sz, sz >= 1.3, f"{sz:.2f}x")
    worst = max(s["reshard"][m]["x_same_mesh"]["median"] for m in RESHARD_MESHES)
    add(f"resharded load ({'/'.join(RESHARD_MESHES)} from {SAVE_MESH}) <= 1.25x same-mesh", worst, worst <= 1.25,
        f"{worst:.2f}x")
    amp = s["reshard600"]["median"]
    add(f"{s['reshard_params']} params, tp=4 -> tp=3 (restore-check): bytes decoded <= 1.10x needed", amp, amp <= 1.10, f"{amp:.3f}")
    worst_move = max(s["tp_moves"].values())
    add(f"ckpt plan at 70B, tp 8 -> 12, 6, 16: read amplification <= 1.05", worst_move, worst_move <= 1.05,
        f"{worst_move:.4f}")
    if "sinks" in s and "disk/auto_x_best" in s["sinks"]:
        ax = s["sinks"]["disk/auto_x_best"]["median"]
        add("auto (bf16): durable save <= 1.05x the faster of none and shuffle-zstd, on the disk", ax, ax <= 1.05,
            f"{ax:.2f}x")
    if "sinks" in s:
        fx = s["sinks"]["fast/auto_x_best"]["median"]
        add("auto (bf16): the same on mem:// (a sink faster than the compressors)", fx, fx <= 1.05, f"{fx:.2f}x")
        slow_auto = s["sinks"]["slow/auto"]["stored_ratio"]
        slow_shuffle = s["sinks"]["slow/shuffle-zstd"]["stored_ratio"]
        add(f"auto (bf16): stored bytes <= shuffle-zstd's + 2% on a {SLOW_SINK_BPS}B/s device",
            slow_auto / slow_shuffle, slow_auto <= slow_shuffle * 1.02, f"{slow_auto:.3f} vs {slow_shuffle:.3f}")
    if "s3" in s:
        x = s["s3"]["save_x_best_cli"]["median"]
        add("s3:// save (bf16, until committed) >= 1.0x the faster of aws s3 cp and s3cmd uploading it", x, x >= 1.0,
            f"{x:.2f}x")
        x = s["s3"]["load_x_best_cli"]["median"]
        add("s3:// load >= 1.0x the faster of aws s3 cp and s3cmd downloading it", x, x >= 1.0, f"{x:.2f}x")
        x = s["s3"]["reshard_read_amplification"]["median"]
        add(f"s3:// restore tp=4 -> tp=3 ({s['reshard_params']} params): bytes read <= 1.05x needed", x, x <= 1.05,
            f"{x:.3f}")
    for lr, d in s.get("delta", {}).items():
        x = d["bf16_after_first"]["median"]
        add(f"delta saves (AdamW lr {lr}): bf16 weights stored <= 0.5 of whole saves", x, x <= 0.5, f"{x:.3f}")
        x = d["state_after_first"]["median"]
        add(f"delta saves (AdamW lr {lr}): whole training state stored <= 0.9 of whole saves", x, x <= 0.9,
            f"{x:.3f}")
        x = d["frozen_after_first"]["median"]
        add(f"delta saves (AdamW lr {lr}): state of a LoRA fine-tune with "
            f"{100 * d['frozen_fraction']['median']:.1f}% of parameters frozen stored <= 0.15 of whole saves", x,
            x <= 0.15, f"{x:.3f}")
        x = d["restore_x_whole"]["median"]
        add(f"delta saves (AdamW lr {lr}): restoring a chain's last step <= 1.5x a whole step's", x, x <= 1.5,
            f"{x:.2f}x")
        x = d["save_x_auto"]["median"]
        add(f"delta saves (AdamW lr {lr}): save throughput >= 0.9x auto", x, x >= 0.9, f"{x:.2f}x")
    if "interference" in s:
        for level in ["durable", "memory"]:
            x = s["interference"][level]["median"]
            add(f"trainer step time during background saves ({level}) <= 1.05x without saves (p50; torch on one "
                "thread)", x, x <= 1.05, f"{x:.3f}x")
    rss = max(s[f"ckpt/{d}/{c}"]["rss_x_budget"]["max"] for d in DTYPES for c in CODECS)
    add("peak RSS during save <= state + staging budget + 10%", rss, rss <= 1.10, f"{rss:.2f}x of state + staging")
    return out


# -- machine --------------------------------------------------------------

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(dirpath):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass

    def pkg(name):
        return sh(f"dpkg-query -W -f='${{Version}}' {name} 2>/dev/null")

    src = sh(f"df --output=source,fstype {dirpath} | tail -1").split()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "kernel": platform.release(),
        "os": sh(". /etc/os-release && echo $PRETTY_NAME"),
        "dir": dirpath,
        "device": src[0] if src else "",
        "filesystem": src[1] if len(src) > 1 else "",
        "packages": {k: pkg(k) for k in ["g++", "liburing-dev", "libzstd-dev", "libxxhash-dev", "fio",
                                         "python3-torch", "python3-h5py", "libhdf5-dev"]},
        "python": sh(f"{PYTHON} -c 'import sys; print(sys.version.split()[0])'"),
    }


# -- output ---------------------------------------------------------------

def chart_svg(s, size):
    """Grouped horizontal bars (GB/s) with min-max whiskers, bf16 and f32."""
    rows = [("save", None, None)]
    rows.append(("write ceiling (fio O_DIRECT)", s["write_ceiling"], s["write_ceiling"]))
    for codec in CODECS:
        rows.append((f"ckpt save, {codec}", s[f"ckpt/bf16/{codec}"]["save_bps"], s[f"ckpt/f32/{codec}"]["save_bps"]))
    rows.append(("ckpt.torch async save", s["ckpt-py/bf16"]["save_bps"], s["ckpt-py/f32"]["save_bps"]))
    rows.append(("torch.save + fsync", s["torch/bf16"]["save_bps"], s["torch/f32"]["save_bps"]))
    rows.append(("h5py write + fsync", s["h5py/bf16"]["save_bps"], s["h5py/f32"]["save_bps"]))
    rows.append(("load", None, None))
    rows.append(("read ceiling (fio O_DIRECT)", s["read_ceiling"], s["read_ceiling"]))
    for codec in CODECS:
        rows.append((f"ckpt load, {codec}", s[f"ckpt/bf16/{codec}"]["load_bps"], s[f"ckpt/f32/{codec}"]["load_bps"]))
    rows.append(("torch.load", s["torch/bf16"]["load_bps"], s["torch/f32"]["load_bps"]))
    rows.append(("h5py read", s["h5py/bf16"]["load_bps"], s["h5py/f32"]["load_bps"]))
    vmax = max((st["max"] for _, a, b in rows for st in (a, b) if st), default=1) / 1e9
    vmax = max(0.1, vmax * 1.08)
    left, width, bar, gap, top = 230, 520, 9, 8, 46
    y = top
    parts = []
    for label, a, b in rows:
        if a is None and b is None:
            y += 6
            parts.append(f'<text x="10" y="{y + 12}" font-weight="bold">{label} (GB/s)</text>')
            y += 20
            continue
        shared = a is b  # a ceiling: one bar for both dtypes
        parts.append(f'<text x="{left - 8}" y="{y + (bar / 2 + 4 if shared else bar + 4)}" '
                     f'text-anchor="end">{label}</text>')
        bars = ((a, "#8c8c8c"),) if shared else ((a, "#3b6fb6"), (b, "#e08a2c"))
        for i, (st, color) in enumerate(bars):
            if not st:
                continue
            yy = y + i * (bar + 1)
            w = st["median"] / 1e9 / vmax * width
            x0, x1 = left + st["min"] / 1e9 / vmax * width, left + st["max"] / 1e9 / vmax * width
            parts.append(f'<rect x="{left}" y="{yy}" width="{w:.1f}" height="{bar}" fill="{color}"/>')
            parts.append(f'<line x1="{x0:.1f}" y1="{yy + bar / 2}" x2="{x1:.1f}" y2="{yy + bar / 2}" stroke="#222"/>')
            parts.append(f'<text x="{left + w + 4 + max(0, x1 - left - w):.1f}" y="{yy + bar - 1}" font-size="9">'
                         f'{st["median"] / 1e9:.2f}</text>')
        y += 2 * bar + gap
    # Axis ticks.
    step = 0.1 if vmax <= 1 else 0.25 if vmax <= 2.5 else 0.5 if vmax <= 5 else 1 if vmax <= 10 else 5
    t = 0.0
    while t <= vmax + 1e-9:
        x = left + t / vmax * width
        parts.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{y + 14}" text-anchor="middle" font-size="9">{t:g}</text>')
        t += step
    height = y + 40
    legend = (f'<rect x="{left}" y="{height - 18}" width="10" height="10" fill="#3b6fb6"/>'
              f'<text x="{left + 14}" y="{height - 9}">bf16</text>'
              f'<rect x="{left + 60}" y="{height - 18}" width="10" height="10" fill="#e08a2c"/>'
              f'<text x="{left + 74}" y="{height - 9}">f32</text>'
              f'<rect x="{left + 110}" y="{height - 18}" width="10" height="10" fill="#8c8c8c"/>'
              f'<text x="{left + 124}" y="{height - 9}">ceiling</text>'
              f'<text x="{left + 180}" y="{height - 9}" font-size="9">bars: median; whiskers: min to max</text>')
    title = (f'<text x="10" y="20" font-size="14" font-weight="bold">ckpt against the disk and the alternatives: '
             f'{human(size)} state</text>')
    grid = "".join(p for p in parts if p.startswith("<line") and 'stroke="#ddd"' in p)
    rest = "".join(p for p in parts if not (p.startswith("<line") and 'stroke="#ddd"' in p))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{height}" '
            f'font-family="sans-serif" font-size="11">'
            f'<rect width="100%" height="100%" fill="white"/>{title}{grid}{rest}{legend}</svg>\n')


def fmt(st, scale=1.0, digits=3):
    if not st:
        return "n/a"
    m, lo, hi = st["median"] * scale, st["min"] * scale, st["max"] * scale
    return f"{m:.{digits}f} [{lo:.{digits}f}–{hi:.{digits}f}]"


def report_md(s, t, mach, a, elapsed, command, svg_name, date):
    gb = 1e-9
    L = []
    L.append(f"Measured {date[:10]} with")
    L.append("")
    L.append("```")
    L.append(command)
    L.append("```")
    L.append("")
    L.append(f"({a.runs} interleaved runs, {human(a.size)} state per contender, {elapsed / 60:.1f} minutes.) "
             "Figures are medians with [min–max] over the runs; every ratio is the median of the "
             "per-run ratios to the ceiling measured in the same run: the write ceiling and memcpy of the "
             "run, and for every load fio reading the very file that was just loaded, right after it "
             "(the disk sits behind caches that a separate file would not share). Within a run, the "
             f"ckpt saves of the tables below are the medians of {SAVES_PER_RUN} saves in one process "
             f"(steps 1..{SAVES_PER_RUN} after a warm-up) and memcpy the median of {MEMCPY_PASSES} passes. "
             f"The stall target pairs each of {STALL_SAVES} further saves (none) with memcpy on as many "
             "threads in the same process right after it (a warming pass, then the measured one, copying the "
             "saved state itself into the save's own staging arena, idle between saves), and takes the median of those "
             "ratios: on a shared host one pass a minute away can run at a third or three times the speed.")
    L.append("")
    L.append("### Machine")
    L.append("")
    p = mach["packages"]
    L.append(f"- {mach['cpu']}, {mach['cores']} cores, {human(mach['memory_bytes'])} memory; {mach['os']}, "
             f"Linux {mach['kernel']}")
    L.append(f"- storage measured: `{mach['dir']}` on {mach['device']} ({mach['filesystem']})")
    L.append(f"- g++ {p.get('g++')}, liburing {p.get('liburing-dev')}, zstd {p.get('libzstd-dev')}, "
             f"xxHash {p.get('libxxhash-dev')}, fio {p.get('fio')}, torch {p.get('python3-torch')}, "
             f"h5py {p.get('python3-h5py')} (Python {mach['python']})")
    L.append("")
    L.append("### Ceilings")
    L.append("")
    L.append("| ceiling | GB/s |")
    L.append("|---|---:|")
    L.append(f"| sequential write, fio io_uring O_DIRECT QD64 4 MiB, file preallocated, fsync at end | {fmt(s['write_ceiling'], gb)} |")
    L.append(f"| sequential read of the file just written, same settings | {fmt(s['read_ceiling'], gb)} |")
    paired = [s[f"ckpt/{d}/{c}"]["paired_read_ceiling"] for d in DTYPES for c in CODECS]
    L.append(f"| the same, on each ckpt data file right after its load (all codecs) | "
             f"{min(p['min'] for p in paired) * gb:.3f}–{max(p['max'] for p in paired) * gb:.3f} |")
    L.append(f"| single-thread memcpy | {fmt(s['memcpy'], gb, 2)} |")
    L.append(f"| memcpy on {s['staging_threads']} threads (as many as a save stages with) | "
             f"{fmt(s['memcpy_staging'], gb, 2)} |")
    for dtype in DTYPES:
        st = s[f"ckpt/{dtype}/stall"]
        L.append(f"| the same, right after each save of the stall target ({dtype}; stall "
                 f"{fmt(st['stall_s'])} s) | {fmt(st['memcpy'], gb, 2)} |")
    L.append("")
    over = [f"{d} {c}" for d in DTYPES for c in CODECS if s[f"ckpt/{d}/{c}"]["load_x_read"]["median"] > 1]
    if over:
        L.append("Where a load's ratio to its read ceiling exceeds 1 (" + ", ".join(over) + "), fio reading "
                 "the same file right after ckpt got less from this storage than ckpt's own reads did: here the "
                 "read ceiling is not an upper bound (caches below the storage serve data written moments "
                 "before, unevenly), and the load figures are best compared with each other and with the "
                 "alternatives, which read the same way.")
        L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | figure | met |")
    L.append("|---|---:|:---:|")
    for x in t:
        L.append(f"| {x['target']} | {x['figure']} | {'yes' if x['met'] else '**no**'} |")
    L.append("")
    L.append(f"![save and load throughput]({svg_name})")
    L.append("")
    for dtype in DTYPES:
        L.append(f"### ckpt on {dtype}")
        L.append("")
        L.append("| codec | stored/logical | stall s (x memcpy) | durable + committed GB/s (x write) | "
                 "load GB/s (x read) | deep verify s (x read) | peak RSS of the save / state + staging |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for codec in CODECS:
            d = s[f"ckpt/{dtype}/{codec}"]
            L.append(f"| {codec} | {d['stored_ratio']:.3f} | {fmt(d['stall_s'])} ({d['stall_x_memcpy']['median']:.2f}) | "
                     f"{fmt(d['save_bps'], gb)} ({d['save_x_write']['median']:.2f}) | "
                     f"{fmt(d['load_bps'], gb)} ({d['load_x_read']['median']:.2f}) | "
                     f"{fmt(d['verify_s'])} ({d['verify_x_read']['median']:.2f}) | "
                     f"{d['peak_rss_save']['max'] / 2**20:.0f} / {d['rss_budget'] / 2**20:.0f} MiB "
                     f"({d['rss_x_budget']['max']:.3f}) |")
        L.append("")
    L.append("### Against what users would pick instead")
    L.append("")
    L.append("Same tensors, same bytes. torch.save and h5py write to one file, then fsync it and its "
             "directory; their loads start with the file dropped from the page cache. The ckpt rows are "
             "the uncompressed save (until committed) and load from above; ckpt.torch is the Python "
             "module saving the same torch tensors asynchronously.")
    L.append("")
    L.append("| dtype | contender | save s | blocked s | load s | save GB/s (x write) | load GB/s (x read) | "
             "peak RSS save |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for dtype in DTYPES:
        d = s[f"ckpt/{dtype}/none"]
        L.append(f"| {dtype} | ckpt (C++) | {fmt(d['commit_s'])} | {fmt(d['stall_s'])} | {fmt(d['load_s'])} | "
                 f"{d['save_bps']['median'] * gb:.3f} ({d['save_x_write']['median']:.2f}) | "
                 f"{d['load_bps']['median'] * gb:.3f} ({d['load_x_read']['median']:.2f}) | "
                 f"{human(d['peak_rss_save']['max'])} |")
        py = s[f"ckpt-py/{dtype}"]
        L.append(f"| {dtype} | ckpt.torch (Python) | {fmt(py['commit_s'])} | {fmt(py['stall_s'])} | | "
                 f"{py['save_bps']['median'] * gb:.3f} ({py['save_x_write']['median']:.2f}) | | "
                 f"{human(py['peak_rss_save']['max'])} |")
        for tool, name in [("torch", "torch.save / torch.load"), ("h5py", "h5py")]:
            x = s[f"{tool}/{dtype}"]
            L.append(f"| {dtype} | {name} | {fmt(x['save_s'])} | {fmt(x['save_s'])} | {fmt(x['load_s'])} | "
                     f"{x['save_bps']['median'] * gb:.3f} ({x['save_x_write']['median']:.2f}) | "
                     f"{x['load_bps']['median'] * gb:.3f} ({x['load_x_read']['median']:.2f}) | "
                     f"{human(x['peak_rss_save']['max'])} |")
    L.append("")
    L.append("Ratios of ckpt (none) to the best alternative in the same run (higher is better for ckpt):")
    L.append("")
    L.append("| dtype | save speed-up | load speed-up | stall / torch.save wall time | "
             "ckpt.torch blocked / torch.save |")
    L.append("|---|---:|---:|---:|---:|")
    for dtype in DTYPES:
        d = s[f"ckpt/{dtype}/none"]
        py = s[f"ckpt-py/{dtype}"]
        L.append(f"| {dtype} | {d['save_speedup_vs_best_alt']['median']:.2f}x | "
                 f"{d['load_speedup_vs_best_alt']['median']:.2f}x | {d['stall_over_torch_save']['median']:.3f} | "
                 f"{py['stall_over_torch_save']['median']:.3f} |")
    L.append("")
    if "sinks" in s:
        L.append("### The automatic codec on other sinks")
        L.append("")
        L.append(f"The bf16 state saved until committed on the disk under --dir, to `mem://` (the process's memory, "
                 f"`?spare=` set so that each step reuses the memory of the one retention removed: a sink faster "
                 f"than the compressors), on tmpfs (`/dev/shm`; shown, not judged, see the notes after this section) "
                 f"and on the disk behind a simulated device of {SLOW_SINK_BPS}B/s "
                 f"(`faulty://DIR?fault.write_bandwidth={SLOW_SINK_BPS}`, slower than them). Each process saves "
                 f"twice to warm up, then {SINK_SAVES} times measured ({FAST_SINK_SAVES} on mem://; the median: "
                 f"`bench_probe save --warmup 2 --repeat N`, on mem:// with `--keep 1`, elsewhere every step kept, "
                 f"so that no save follows a removal of an old step); each run has {SINK_ROUNDS} "
                 f"rounds of one process per codec ({FAST_SINK_ROUNDS} on mem://, one behind the slow device), "
                 f"in orders where each codec follows each other one as often. "
                 f"The times are medians over the runs' figures (each the median of its rounds); auto / faster "
                 f"divides auto's median over every process of every run by the faster of the others' (the range: "
                 f"the runs' own ratios).")
        L.append("")
        L.append("| sink | none s | shuffle-zstd s | auto s | auto / faster [runs] | stored: shuffle-zstd, auto |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for name, label in [("disk", "disk"), ("fast", "mem://"), ("tmpfs", "tmpfs"),
                            ("slow", f"{SLOW_SINK_BPS}B/s device")]:
            k = s["sinks"]
            if name + "/auto" not in k:
                continue
            x = k[name + "/auto_x_best"]
            L.append(f"| {label} | {fmt(k[name + '/none']['commit_s'])} | {fmt(k[name + '/shuffle-zstd']['commit_s'])} | "
                     f"{fmt(k[name + '/auto']['commit_s'])} | {x['median']:.2f}x [{x['min']:.2f}–{x['max']:.2f}] | "
                     f"{k[name + '/shuffle-zstd']['stored_ratio']:.3f}, {k[name + '/auto']['stored_ratio']:.3f} |")
        L.append("")
    if "s3" in s:
        k = s["s3"]
        L.append("### Object storage (s3://)")
        L.append("")
        L.append(f"The bf16 state ({human(k['bytes'])}) saved through `s3://` to a one-node Ceph RADOS Gateway on "
                 "loopback under --dir (started by the suite, `scripts/s3-test-server.sh`) until committed, and loaded "
                 "back; then the AWS CLI (`aws s3 cp`, its multipart defaults) and `s3cmd` downloading the data object "
                 "ckpt wrote and uploading it again to the same server.")
        L.append("")
        L.append("| | ckpt s3:// s | aws s3 cp s | s3cmd s | ckpt / faster client |")
        L.append("|---|---:|---:|---:|---:|")
        L.append(f"| up (save) | {fmt(k['save_s'])} | {fmt(k['aws_put_s'])} | {fmt(k['s3cmd_put_s'])} | "
                 f"{k['save_x_best_cli']['median']:.2f}x |")
        L.append(f"| down (load) | {fmt(k['load_s'])} | {fmt(k['aws_get_s'])} | {fmt(k['s3cmd_get_s'])} | "
                 f"{k['load_x_best_cli']['median']:.2f}x |")
        L.append("")
        L.append(f"Stall of the save {fmt(k['stall_s'])} s; a tp=4 -> tp=3 restore of {s['reshard_params']} "
                 f"parameters from `s3://` read {k['reshard_read_amplification']['median']:.3f}x the bytes it needed.")
        L.append("")
    L.append(f"### Resharded load")
    L.append("")
    rs = s["reshard"]
    L.append(f"The bf16 state saved on `{SAVE_MESH}` (one process, a thread per rank) and loaded onto each mesh, "
             f"ranks one after another, {rs['rounds']} times per run in rounds whose order alternates (the same mesh "
             f"first, then last). Each process loads every rank {RESHARD_REPEAT} times and counts its median; seconds "
             "are each run's median round (median [min–max] over the runs), x same-mesh the median of each round's "
             "ratio.")
    L.append("")
    L.append("| load onto | seconds | x same-mesh | bytes decoded / needed |")
    L.append("|---|---:|---:|---:|")
    L.append(f"| {SAVE_MESH} (same) | {fmt(rs['same_mesh_s'])} | 1.00 | |")
    for mesh in RESHARD_MESHES:
        m = rs[mesh]
        L.append(f"| {mesh} | {fmt(m['load_s'])} | {m['x_same_mesh']['median']:.2f} | "
                 f"{m['read_amplification']['median']:.3f} |")
    L.append("")
    st = s["safetensors/bf16"]
    L.append("### Hugging Face safetensors")
    L.append("")
    L.append(f"The bf16 state ({human(st['bytes'])}) exported with `ckpt export --format safetensors` (reading the "
             "ckpt step, writing and fsyncing the shards; the whole command's wall time), then loaded in place "
             "(`safetensors://`) onto dp=1; torch.save / torch.load of the same tensors from the table above.")
    L.append("")
    L.append("| | seconds | x ceiling | vs torch | peak RSS |")
    L.append("|---|---:|---:|---:|---:|")
    L.append(f"| export | {fmt(st['export_s'])} | {st['export_x_write']['median']:.2f} (write) | "
             f"{st['export_speedup_vs_torch_save']['median']:.2f}x torch.save | {human(st['peak_rss_export']['max'])} |")
    L.append(f"| load in place | {fmt(st['load_s'])} | {st['load_x_read']['median']:.2f} (read) | "
             f"{st['load_speedup_vs_torch_load']['median']:.2f}x torch.load | {human(st['peak_rss_load']['max'])} |")
    L.append("")
    if "interference" in s:
        it = s["interference"]
        L.append("### The trainer during background saves")
        L.append("")
        L.append("A torch training loop (a 4-layer transformer, d=256, AdamW, on one thread) saves its 36 MiB state "
                 "with zstd every 4 steps, while the machine's other cores are free for ckpt's background threads "
                 "(`benchmarks/interference_bench.py`). The median step time (forward, backward, optimizer) among the "
                 "steps that start while a save persists, over the median step of runs without saves, rounds "
                 "alternating; the memory level sends its copies to a peer memory in another process.")
        L.append("")
        L.append(f"| level | step during persistence / without saves |")
        L.append("|---|---:|")
        for level in ["durable", "memory"]:
            L.append(f"| {level} | {it[level]['median']:.3f} ({it[level]['min']:.3f}-{it[level]['max']:.3f}) |")
        L.append("")
    if "delta" in s:
        L.append("### Delta saves on a training trajectory")
        L.append("")
        L.append("A small transformer language model trained with AdamW in torch on CPU, snapshotted every 10 steps "
                 "(bf16 weights, fp32 master weights, both moments), saved whole (codec auto) and with deltas "
                 "(chain 16) on separate roots, their saves taking turns (`benchmarks/delta_bench.py`); a LoRA "
                 "fine-tune of it with 90% of all parameters frozen beside. Stored bytes with deltas over whole, "
                 "over the saves after the first; restore of the chain's last step and save throughput against "
                 "whole saves.")
        L.append("")
        L.append("| AdamW lr | bf16 | master | 2nd moment | state | LoRA state | save x auto | restore x whole |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for lr, d in s["delta"].items():
            L.append(f"| {lr} | {d['bf16_after_first']['median']:.3f} | {d['master_after_first']['median']:.3f} | "
                     f"{d['v_after_first']['median']:.3f} | {d['state_after_first']['median']:.3f} | "
                     f"{d['frozen_after_first']['median']:.3f} | {d['save_x_auto']['median']:.2f} | "
                     f"{d['restore_x_whole']['median']:.2f} |")
        L.append("")
    L.append("### Planning at 16,384 ranks")
    L.append("")
    L.append(f"`ckpt plan {' '.join(PLAN_ARGS)}`: {fmt(s['plan']['wall_s'])} s wall, "
             f"peak RSS {human(s['plan']['peak_rss']['max'])}.")
    L.append("")
    L.append(f"A {s['reshard_params']}-parameter bf16 model (2 layers) saved on tp=4 and loaded onto tp=3 by `ckpt restore-check "
             f"--json`: bytes decoded {s['reshard600']['median']:.3f}x what the ranks need.")
    L.append("")
    L.append(f"Read amplification of tensor-parallel moves from `{TP_FROM}` (`ckpt plan --ranks-from {TP_FROM} "
             f"--ranks-to MESH {' '.join(TP_MODEL)}`, all ranks' reads over what they need):")
    L.append("")
    L.append("| load onto | read / needed |")
    L.append("|---|---:|")
    for to, amp in s["tp_moves"].items():
        L.append(f"| {to} | {amp:.4f} |")
    L.append("")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(prog="benchmarks/run", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--dir", default="/var/tmp/ckpt-bench", help="directory on the storage to measure")
    ap.add_argument("--size", default="256M", help="state size per contender (default 256M)")
    ap.add_argument("--interference-steps", type=int, default=40,
                    help="training steps of each run of the trainer-during-saves benchmark")
    ap.add_argument("--delta-quick", action="store_true",
                    help="a tiny model and a short chain for the delta benchmark (checks the runner, not figures)")
    ap.add_argument("--reshard-params", default="600M",
                    help="parameters of the model saved on tp=4 and restored onto tp=3 (default 600M)")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs; medians are reported (default 3)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="the build directory")
    ap.add_argument("--out", default=None, help="results directory (default BUILD/bench-results)")
    ap.add_argument("--update-docs", action="store_true",
                    help="rewrite the section of docs/performance.md for this --size, and its chart "
                         "docs/performance-run-SIZE.svg")
    ap.add_argument("--docs", default=os.path.join(REPO, "docs"), help="the docs directory --update-docs writes")
    ap.add_argument("--json", action="store_true", help="print the results JSON instead of the report")
    ap.add_argument("--no-s3", action="store_true",
                    help="leave out s3:// (which starts a one-node Ceph RADOS Gateway under --dir)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--from-json", metavar="FILE",
                    help="measure nothing: redo the figures, chart and report from an earlier results.json")
    a = ap.parse_args()
    try:
        a.size = parse_size(a.size)
    except ValueError:
        ap.error(f"bad --size {a.size!r}")
    if a.runs < 1 or a.size < (16 << 20):
        ap.error("--runs must be >= 1 and --size >= 16M")
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-results"))
    for tool in ["fio"]:
        if shutil.which(tool) is None:
            ap.error(f"{tool} is not installed (benchmarks/run installs it)")
    if a.from_json:
        try:
            with open(a.from_json) as f:
                earlier = json.load(f)
            runs, elapsed, mach, command = earlier["raw"], earlier["elapsed_s"], earlier["machine"], earlier["command"]
            date = earlier["date"]
            a.size, a.runs = earlier["size_bytes"], earlier["runs"]
        except (OSError, ValueError, KeyError) as e:
            print(f"run.py: cannot read {a.from_json}: {e}", file=sys.stderr)
            return 2
    else:
        suite = Suite(a)
        for f in [suite.ckpt, suite.probe]:
            if not os.path.exists(f):
                ap.error(f"{f} is missing: build first (benchmarks/run does)")
        command = a.command or "benchmarks/run " + " ".join(sys.argv[1:])
        print(f"measuring {human(a.size)} states on {os.path.abspath(a.dir)}, {a.runs} runs ...", file=sys.stderr)
        try:
            runs, elapsed = suite.measure()
            date = datetime.datetime.utcnow().isoformat() + "Z"
            mach = machine(suite.dir)
        except (RuntimeError, OSError) as e:
            print(f"\nbenchmarks/run: {e}", file=sys.stderr)
            return 1
        finally:
            shutil.rmtree(suite.dir, ignore_errors=True)
    s = summarize(runs)
    s["reshard_params"] = runs[0].get("reshard600/params", a.reshard_params)
    t = targets(s)
    os.makedirs(a.out, exist_ok=True)
    results = {"command": command, "date": date, "size_bytes": a.size,
               "runs": a.runs, "elapsed_s": elapsed, "machine": mach, "summary": s, "targets": t, "raw": runs}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    svg = chart_svg(s, a.size)
    with open(os.path.join(a.out, "chart.svg"), "w") as f:
        f.write(svg)
    report = report_md(s, t, mach, a, elapsed, command, "chart.svg", date)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(report + "\n")
    if a.update_docs:
        doc = os.path.join(a.docs, "performance.md")
        with open(doc) as f:
            text = f.read()
        begin, end, chart = doc_section(a.size)
        if begin not in text or end not in text or text.index(begin) > text.index(end):
            print(f"run.py: {doc} has no section for --size {size_label(a.size)} to replace: add the lines\n"
                  f"{begin}\n{end}\nwhere its figures belong", file=sys.stderr)
            return 2
        gen = report_md(s, t, mach, a, elapsed, command, chart, date)
        text = text[:text.index(begin) + len(begin)] + "\n" + gen + "\n" + text[text.index(end):]
        with open(doc, "w") as f:
            f.write(text)
        with open(os.path.join(a.docs, chart), "w") as f:
            f.write(svg)
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print(report)
        print(f"\nresults: {a.out}/results.json, {a.out}/chart.svg, {a.out}/report.md")
    return 1 if a.strict and not all(x["met"] for x in t) else 0


if __name__ == "__main__":
    sys.exit(main())
