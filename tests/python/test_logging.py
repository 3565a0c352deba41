"""The library's messages reach Python's `logging` (logger "ckpt" and its
children) and nothing reaches the process's stderr: retention after a commit
(said on ckpt's committer thread), the cleanup of a crashed save's leftovers
at open (on the caller's thread), and a save that fails in the background
(warning). Run in a fresh interpreter whose fd 2 is a file that must stay
empty.

    /usr/bin/python3 -m pytest test_logging.py      (PYTHONPATH holds ckpt)
"""
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import logging, os, sys
    import numpy as np
    import ckpt

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.name, record.levelno, record.getMessage()))

    logging.getLogger("ckpt").addHandler(Keep())
    logging.getLogger("ckpt").setLevel(logging.INFO)
    logging.getLogger("ckpt").propagate = False
    work = sys.argv[1]

    a = np.arange(4096, dtype=np.float32)
    s = ckpt.State()
    ckpt.add_array(s, "a", a)
    cp = ckpt.Checkpointer(f"{work}/root", keep_last=1)
    cp.save(1, s).wait()
    cp.save(2, s).wait()
    del cp
    # A save that died half-way: a step without a manifest.
    os.makedirs(f"{work}/root/step-0000000003")
    with open(f"{work}/root/step-0000000003/rank-000000.ckd", "wb") as f:
        f.write(b"x" * 100)
    cp = ckpt.Checkpointer(f"{work}/root", keep_last=1)
    del cp
    # The rank's report cannot be written (an atomic replace), so
    # the save fails on ckpt's threads after its data was written.
    bad = ckpt.Checkpointer(f"faulty://{work}/bad?fault.fail_on=put&fault.match=.report")
    try:
        bad.save(1, s).wait()
        raise AssertionError("the save under a failing storage committed")
    except ckpt.Error as e:
        failed = str(e)
    ckpt._ckpt._flush_log()
    said = "\\n".join(f"{n} {l} {m}" for n, l, m in records)
    assert any(n == "ckpt" and l == logging.INFO and "removed committed step 1: past retention" in m
               for n, l, m in records), said
    assert any(n == "ckpt" and l == logging.INFO and "partial step 3" in m for n, l, m in records), said
    assert any(n == "ckpt" and l == logging.WARNING and "save of step 1 by rank 0 failed" in m
               for n, l, m in records), said
    print("OK", len(records))
""")


def test_messages_go_to_logging_and_nothing_to_stderr(tmp_path):
    err = tmp_path / "stderr"
    with open(err, "wb") as fd2:
        out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, stderr=fd2,
                             timeout=120, env=dict(os.environ))
    text = err.read_bytes()
    assert out.returncode == 0, (out.stdout, text)
    assert out.stdout.startswith(b"OK"), out.stdout
    assert text == b"", f"{len(text)} bytes on stderr: {text[:2000]!r}"
