#!/usr/bin/env python3
"""Time from a SIGKILL to the first training step of the next generation,
restoring from peers' memory and from storage, with real processes.

A `ckpt coordinator` and --workers `ckpt worker`s in --workers/2 failure
domains (two processes each) train with --ballast bytes of state sharded over
them. In the *memory* run they save to the memory level every 2 steps and
durably every 10; both processes of the last domain are SIGKILLed once memory
step 14 has committed everywhere. In the *durable* run only durable saves are
made and the same processes are killed once step 10 has committed; the
checkpoint's files are dropped from the page cache before the kill (a restore
from storage reads the disk). The figure is from the kill to the moment the
last survivor is ready for its first step of the new generation (restored and
checked), from the workers' own clocks; it includes failure detection
(--heartbeat-ms x 3 missed heartbeats), the rendezvous and the restore.

Also reported: each run's restore time, the bytes from memory, peers and
storage, and the survivors' peak RSS next to their state, staging and
memory-level share.

  benchmarks/restart_bench.py --ballast 1G --runs 3 [--json]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def evict(root):
    """Drops the checkpoint's files from the page cache (they are fsynced)."""
    for d, _, files in os.walk(root):
        for name in files:
            try:
                fd = os.open(os.path.join(d, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def peak_rss(pid):
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def wait_for(pred, timeout, what, logs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise SystemExit(f"restart_bench: timed out waiting for {what}\n{logs()}")


def one_run(ckpt, work, mode, args):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    token = os.path.join(work, "token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("restart-bench-token-0123456789\n")
    n = args.workers
    procs = []
    coord_log = os.path.join(work, "coordinator.log")
    port_file = os.path.join(work, "coordinator.port")
    hb = args.heartbeat_ms
    coord = subprocess.Popen(
        [ckpt, "coordinator", "--state-dir", os.path.join(work, "state"), "--token-file", token, "--listen",
         "127.0.0.1:0", "--port-file", port_file, "--min-nodes", str(n - 2), "--max-nodes", str(n), "--heartbeat",
         f"{hb}ms", "--dead-after", "3", "--join-timeout", f"{args.join_timeout_ms}ms"],
        stdout=subprocess.DEVNULL, stderr=open(coord_log, "w"))
    procs.append(coord)
    logs = [os.path.join(work, f"worker{i}.log") for i in range(n)]

    def all_logs():
        return "".join(f"--- {p}\n{read(p)[-3000:]}" for p in [coord_log] + logs)

    try:
        wait_for(lambda: os.path.exists(port_file), 30, "the coordinator", all_logs)
        port = int(read(port_file).strip())
        root = os.path.join(work, "root")
        workers = []
        for i in range(n):
            argv = [ckpt, "worker", "--connect", f"127.0.0.1:{port}", "--token-file", token, "--root", root,
                    "--steps", "100000", "--save-every", "10", "--step-ms", str(args.step_ms), "--heartbeat-ms",
                    str(hb), "--ballast", str(args.ballast), "--domain", f"node-{i // 2}", "--log", logs[i]]
            if mode == "memory":
                argv += ["--memory-every", "2", "--memory-budget", str(args.memory_budget)]
            w = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(logs[i] + ".err", "w"))
            workers.append(w)
            procs.append(w)
        mark = "committed memory step 14" if mode == "memory" else "committed step 10"
        wait_for(lambda: all(mark in read(p) for p in logs), args.timeout, mark, all_logs)
        victims = [n - 2, n - 1]
        survivors = [i for i in range(n) if i not in victims]
        rss = {i: peak_rss(workers[i].pid) for i in survivors}
        if mode == "durable":
            evict(root)
        killed = time.time()
        for v in victims:
            workers[v].send_signal(signal.SIGKILL)
        for v in victims:
            workers[v].wait()
        restore = re.compile(r"generation=(\d+) rank=(\d+) world=(\d+) restore=(\d+) level=(\w+) from_memory=(\d+) "
                             r"from_peers=(\d+) from_storage=(\d+) load_s=([\d.e+-]+) alloc_s=([\d.e+-]+) assigned_at=(\d+) at=(\d+)")

        def restored():
            found = []
            for i in survivors:
                lines = [m for m in restore.finditer(read(logs[i])) if int(m.group(1)) >= 2]
                if not lines:
                    return None
                found.append(lines[0])
            return found

        wait_for(lambda: restored() is not None, args.timeout, "the survivors' restore", all_logs)
        got = restored()
        ready = max(int(m.group(12)) for m in got) / 1e6
        assigned = max(int(m.group(11)) for m in got) / 1e6
        rss_through_restore = max(peak_rss(workers[i].pid) for i in survivors)
        share_before = args.ballast / n
        return {
            "mode": mode,
            "kill_to_first_step_s": ready - killed,
            "kill_to_assignment_s": assigned - killed,
            # Less the time the survivors took to map their new, larger
            # shards' memory (a trainer's tensors exist already).
            "kill_to_first_step_less_alloc_s": max(int(m.group(12)) / 1e6 - float(m.group(10)) for m in got) - killed,
            "assignment_to_first_step_s": max((int(m.group(12)) - int(m.group(11))) / 1e6 for m in got),
            "restore_step": int(got[0].group(4)),
            "level": got[0].group(5),
            "restore_s_max": max(float(m.group(9)) for m in got),
            "bytes_from_memory": sum(int(m.group(6)) for m in got),
            "bytes_from_peers": sum(int(m.group(7)) for m in got),
            "bytes_from_storage": sum(int(m.group(8)) for m in got),
            "survivor_peak_rss_max": max(rss.values()),
            "survivor_peak_rss_through_restore": rss_through_restore,
            "share_before_kill": share_before,
            "share_after_kill": args.ballast / len(survivors),
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=os.path.join(REPO, "build", "tools", "ckpt"), help="the ckpt binary")
    ap.add_argument("--dir", default=None, help="work directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--ballast", default="1G", help="state sharded over the workers (default 1G)")
    ap.add_argument("--workers", type=int, default=6, help="processes, two per failure domain (default 6)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--step-ms", type=int, default=50)
    ap.add_argument("--heartbeat-ms", type=int, default=200)
    ap.add_argument("--join-timeout-ms", type=int, default=500,
                    help="the coordinator waits this long for more members once enough joined (default 500)")
    ap.add_argument("--memory-budget", default="4G")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    args.ballast = parse_size(args.ballast)
    args.memory_budget = parse_size(args.memory_budget)
    if args.workers < 4 or args.workers % 2:
        ap.error("--workers must be even and at least 4")
    base = args.dir or tempfile.mkdtemp(prefix="restart-bench-")
    results = {"memory": [], "durable": []}
    try:
        for run in range(args.runs):
            for mode in (["memory", "durable"] if run % 2 == 0 else ["durable", "memory"]):
                r = one_run(args.ckpt, os.path.join(base, f"{mode}-{run}"), mode, args)
                results[mode].append(r)
                if not args.json:
                    print(f"run {run} {mode:7}: kill -> first step {r['kill_to_first_step_s']:.2f} s (kill -> "
                          f"assignment {r['kill_to_assignment_s']:.2f} s, assignment -> ready "
                          f"{r['assignment_to_first_step_s']:.2f} s), restore "
                          f"step {r['restore_step']} ({r['level']}) in {r['restore_s_max']:.2f} s, from memory "
                          f"{r['bytes_from_memory'] / 1e6:.0f} MB, peers {r['bytes_from_peers'] / 1e6:.0f} MB, "
                          f"storage {r['bytes_from_storage'] / 1e6:.0f} MB, peak RSS "
                          f"{r['survivor_peak_rss_max'] / 2**20:.0f} MiB before the kill, "
                          f"{r['survivor_peak_rss_through_restore'] / 2**20:.0f} MiB through the restore", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    summary = {"ballast_bytes": args.ballast, "workers": args.workers, "heartbeat_ms": args.heartbeat_ms,
               "detection_s": 3 * args.heartbeat_ms / 1000, "join_timeout_s": args.join_timeout_ms / 1000,
               "runs": results}
    for mode in results:
        xs = [r["kill_to_first_step_s"] for r in results[mode]]
        summary[f"{mode}_kill_to_first_step_s_median"] = statistics.median(xs)
        summary[f"{mode}_kill_to_first_step_less_alloc_s_median"] = statistics.median(
            r["kill_to_first_step_less_alloc_s"] for r in results[mode])
        summary[f"{mode}_restore_s_median"] = statistics.median(r["restore_s_max"] for r in results[mode])
        summary[f"{mode}_kill_to_assignment_s_median"] = statistics.median(
            r["kill_to_assignment_s"] for r in results[mode])
        summary[f"{mode}_assignment_to_first_step_s_median"] = statistics.median(
            r["assignment_to_first_step_s"] for r in results[mode])
    summary["durable_over_memory"] = (summary["durable_kill_to_first_step_s_median"] /
                                      summary["memory_kill_to_first_step_s_median"])
    share = args.ballast / args.workers
    # Bound: state + staging + the memory level's files: own and one replica
    # of the newest step and of the one in flight, 2 (r + 1) shares.
    summary["memory_peak_rss_max"] = max(r["survivor_peak_rss_max"] for r in results["memory"])
    summary["memory_peak_rss_median"] = statistics.median(r["survivor_peak_rss_max"] for r in results["memory"])
    summary["durable_peak_rss_max"] = max(r["survivor_peak_rss_max"] for r in results["durable"])
    # The durable-only process (its state, staging and everything else) plus
    # the memory level's files: own and one replica of the newest step and of
    # the one in flight, 2 (r + 1) shares.
    summary["memory_rss_bound"] = summary["durable_peak_rss_max"] + 4 * share
    summary["memory_peak_rss_over_bound"] = summary["memory_peak_rss_max"] / summary["memory_rss_bound"]
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        print()
    else:
        print(f"kill -> first step (median of {args.runs}): memory "
              f"{summary['memory_kill_to_first_step_s_median']:.2f} s, durable "
              f"{summary['durable_kill_to_first_step_s_median']:.2f} s "
              f"({summary['durable_over_memory']:.1f}x); failure detection alone "
              f"{summary['detection_s']:.2f} s, the join timeout {summary['join_timeout_s']:.2f} s")
        for mode in ("memory", "durable"):
            print(f"  {mode:7}: kill -> assignment {summary[mode + '_kill_to_assignment_s_median']:.2f} s, "
                  f"assignment -> ready {summary[mode + '_assignment_to_first_step_s_median']:.2f} s "
                  f"(restore {summary[mode + '_restore_s_median']:.2f} s); kill -> first step less the new "
                  f"shards' page faults {summary[mode + '_kill_to_first_step_less_alloc_s_median']:.2f} s")
        print(f"peak RSS of a survivor before the kill: memory level "
              f"{summary['memory_peak_rss_median'] / 2**20:.0f} MiB median, "
              f"{summary['memory_peak_rss_max'] / 2**20:.0f} MiB max; durable only "
              f"{summary['durable_peak_rss_max'] / 2**20:.0f} MiB; share {share / 2**20:.0f} MiB; "
              f"durable-only + 4 shares = {summary['memory_rss_bound'] / 2**20:.0f} MiB "
              f"({summary['memory_peak_rss_over_bound']:.2f}x)")


if __name__ == "__main__":
    main()
