#!/usr/bin/env python3
"""Fails when an #include points up the layers of the tree.

    scripts/check-layers.py [ROOT]       check the tree (default: this checkout)
    scripts/check-layers.py --self-test  plant violations in a scratch tree

Layers, lowest first (a file may include its own folder and lower layers):

    0  util                     and the value headers ckpt/export.h, limits.h, codec.h, options.h,
                                communicator.h, load_exchange.h, version.h, log.h, experimental/commit_arbiter.h
    1  layout, codec, net       ckpt/dtype.h, data_position.h, hdf5.h, tensor.h, mesh.h, state.h, synthetic.h
    2  format                   ckpt/storage.h, plugin_abi.h (the interface the format reads through),
                                safetensors.h
    3  storage, plan            ckpt/plan.h, conformance.h
    3.5 format_roots            another format presented as a checkpoint root (safetensors models read
                                in place): a backend that builds manifests, so above storage
    4  pipeline
    5  core, comm, policy, peer ckpt/checkpointer.h, plan_costs.h, preempt.h, verify.h, audit.h, mpi.h, interval.h, peer.h
    6  coordinator              ckpt/coordinator.h
    7  integrations, tools      ckpt/ckpt.h (the C API)

Two rules guard the storage seam: nothing below core (libckpt/storage, plan,
pipeline) names a file of a checkpoint (no root_files.h, no "MANIFEST" or
"step-..." strings), and a
backend's folder (storage/roots/NAME, storage/adapters/NAME, format_roots/NAME)
is included from nowhere else in the library, the tools, the benchmarks or
the integrations: a backend's own operations are reached through
StorageCapability, and backends reach one another through OpenStorage.

Benchmarks and tests sit on top. They may use the tools' shared library
(tools/common: argument parsing, the synthetic job) and the test doubles of
tests/support, but benchmarks may not reach into the command-line tool's
own files (tools/ckpt), and the library may not include test code. The
tools themselves use the public API, util/ and tools/common only.
Exit status: 0 clean, 1 violations found (listed), 2 usage.
"""
import os
import re
import sys
import tempfile

FOLDER_LAYER = {
    "util": 0, "net": 1,
    "layout": 1, "codec": 1,
    "format": 2,
    "storage": 3, "plan": 3,
    "format_roots": 3.5,
    "pipeline": 4,
    "core": 5, "comm": 5, "policy": 5, "peer": 5,
    "coordinator": 6,
}

PUBLIC_LAYER = {
    "export.h": 0, "limits.h": 0, "codec.h": 0, "options.h": 0, "communicator.h": 0, "load_exchange.h": 0,
    "version.h": 0, "log.h": 0,
    "dtype.h": 1, "data_position.h": 1, "hdf5.h": 1, "tensor.h": 1, "mesh.h": 1, "state.h": 1, "synthetic.h": 1,
    "storage.h": 2, "plugin_abi.h": 2, "safetensors.h": 2,
    "plan.h": 3, "conformance.h": 3,
    "checkpointer.h": 5, "plan_costs.h": 5, "preempt.h": 5, "verify.h": 5, "audit.h": 5, "mpi.h": 5, "interval.h": 5, "peer.h": 5,
    "experimental/commit_arbiter.h": 0,
    "coordinator.h": 6,
    "ckpt.h": 7,
}

# The command-line tool's own headers (tools/ckpt): not for benchmarks.
TOOL_HEADERS = {"commands.h"}
# Test code: never included by the library.
TEST_PREFIXES = ("support/", "testutil/")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# A string naming a file of a checkpoint root (format/root_files.h).
CHECKPOINT_FILE = re.compile(r'"[^"]*(MANIFEST|LATEST|CLAIM|ABORTED|RETIRING|\.ckd|\.report|step-[0-9])[^"]*"')
# A backend's folder, as an included name or a path under libckpt/.
BACKEND_DIR = re.compile(r"^(storage/(?:roots|adapters)/[a-z0-9_]+|format_roots/[a-z0-9_]+)/")


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def target_layer(name):
    """Layer of an included name, or None for names outside the layering."""
    if name.startswith("ckpt/"):
        return PUBLIC_LAYER.get(name[len("ckpt/"):])
    folder = name.split("/", 1)[0]
    if "/" in name and folder in FOLDER_LAYER:
        return FOLDER_LAYER[folder]
    return None


def sources(root, sub):
    """The code under `sub`; a test beside the code it tests (NAME_test.cc, and the helpers its tests share, NAME_test.h) sits on top, as tests/ does."""
    top = os.path.join(root, sub)
    for dirpath, _, files in os.walk(top):
        for f in sorted(files):
            if f.endswith((".h", ".cc", ".c")) and not f.endswith(("_test.cc", "_test.h")):
                yield os.path.join(dirpath, f)


def check(root):
    problems = []

    def complain(path, number, text):
        problems.append(f"{os.path.relpath(path, root)}:{number}: {text}")

    for path in sources(root, "libckpt"):
        rel = os.path.relpath(path, os.path.join(root, "libckpt"))
        folder = rel.split(os.sep, 1)[0]
        if folder not in FOLDER_LAYER:
            continue
        mine = FOLDER_LAYER[folder]
        for number, name in includes(path):
            if name.startswith(TEST_PREFIXES):
                complain(path, number, f'the library includes the test code "{name}"')
            layer = target_layer(name)
            if layer is None:
                continue
            other = name.split("/", 1)[0]
            if layer > mine:
                complain(path, number, f'{folder} (layer {mine}) includes "{name}" (layer {layer})')
            elif layer == mine and other != "ckpt" and other != folder:
                complain(path, number, f'{folder} includes "{name}", a sibling of the same layer')
    # The storage seam: a backend moves bytes and never names a file of a
    # checkpoint (which file completes a step is the caller's to say:
    # TierEviction); nor does anything outside storage/ name a backend.
    # Below core, the same holds for plan and pipeline: where a step's files
    # are is the manifest's to say (ManifestFilePath), and a container
    # writer takes its file's name from its format (format/data_file.h).
    for below_core in ("storage", "plan", "pipeline"):
        for path in sources(root, "libckpt/" + below_core):
            for number, name in includes(path):
                if name == "format/root_files.h":
                    complain(path, number,
                             f'{below_core} includes "format/root_files.h": nothing below core names a checkpoint file')
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    if CHECKPOINT_FILE.search(line) and not line.lstrip().startswith("//"):
                        complain(path, number, f"{below_core} names a checkpoint file in a string")
    for sub in ("libckpt", "tools", "benchmarks", "integrations"):
        for path in sources(root, sub):
            own = BACKEND_DIR.match(os.path.relpath(path, os.path.join(root, "libckpt")).replace(os.sep, "/"))
            for number, name in includes(path):
                theirs = BACKEND_DIR.match(name)
                if theirs and (sub != "libckpt" or not own or own.group(1) != theirs.group(1)):
                    complain(path, number, f'includes the backend "{name}": ask for a StorageCapability, '
                             "or open it through OpenStorage")
    for path in sources(root, "include/ckpt"):
        mine = PUBLIC_LAYER.get(os.path.relpath(path, os.path.join(root, "include/ckpt")))
        if mine is None:
            complain(path, 1, "a public header without a layer (add it to scripts/check-layers.py)")
            continue
        for number, name in includes(path):
            layer = target_layer(name)
            if name.startswith("ckpt/") and layer is None:
                complain(path, number, f'includes "{name}", which has no layer')
            elif layer is not None and layer > mine:
                complain(path, number, f'public header of layer {mine} includes "{name}" (layer {layer})')
            elif not name.startswith("ckpt/") and not name.startswith("absl/"):
                complain(path, number, f'public header includes the internal "{name}"')
    # The command-line tool is a client of the public API: beyond include/ckpt
    # it may use util/ and its own tools/common, nothing else of libckpt.
    for path in sources(root, "tools"):
        for number, name in includes(path):
            layer = target_layer(name)
            if layer is None or name.startswith(("ckpt/", "util/")) or BACKEND_DIR.match(name):
                continue
            complain(path, number, f'the command-line tool includes the internal "{name}": use the public '
                     "API (include/ckpt), adding to it if it lacks something")
    for path in sources(root, "benchmarks"):
        for number, name in includes(path):
            if os.path.basename(name) in TOOL_HEADERS or name.startswith("ckpt/commands"):
                complain(path, number, f'benchmark includes the command-line tool\'s "{name}"')
    return problems


# Known violations still to be removed; anything else found fails.
KNOWN = set()


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        write("libckpt/format/manifest.h", '#include "ckpt/codec.h"\n#include "util/bytes.h"\n')
        write("include/ckpt/codec.h", "#include <cstdint>\n")
        assert check(root) == [], check(root)
        write("libckpt/format/bad.cc", '#include "ckpt/checkpointer.h"\n')
        write("libckpt/pipeline/up.cc", '#include "core/root.h"\n')
        write("libckpt/layout/side.cc", '#include "codec/codec.h"\n')
        write("include/ckpt/new.h", "\n")
        write("include/ckpt/mesh.h", '#include "util/strings.h"\n')
        write("benchmarks/b.cc", '#include "commands.h"\n#include "common/cli.h"\n#include "support/sim_member.h"\n')
        write("libckpt/coordinator/double.cc", '#include "support/sim_member.h"\n')
        write("libckpt/storage/up.cc", '#include "core/root.h"\n')
        write("libckpt/storage/names.cc", 'const char* k = "step-0000000001/MANIFEST";\n')
        write("libckpt/storage/files.cc", '#include "format/root_files.h"\n')
        write("libckpt/pipeline/files.cc", '#include "format/root_files.h"\n')
        write("libckpt/plan/names.cc", 'const char* k = "LATEST";\n')
        write("libckpt/core/backend.cc", '#include "storage/roots/s3/s3_storage.h"\n')
        write("libckpt/storage/roots/s3/s3_storage.cc", '#include "storage/roots/s3/s3_sign.h"\n')
        write("libckpt/storage/roots/hdf5/h.cc", '#include "storage/roots/file/io_engine.h"\n')
        write("libckpt/format_roots/st/st.cc", '#include "format/manifest.h"\n#include "storage/backend.h"\n')
        write("tools/ckpt/cmd_x.cc", '#include "format_roots/st/st.h"\n')
        write("tools/common/inside.cc", '#include "common/cli.h"\n#include "util/bytes.h"\n#include "core/root.h"\n')
        write("libckpt/storage/roots/s3/s3_test.cc", '#include "core/root.h"\n#include "testutil/test_util.h"\n')
        found = check(root)
        expect = ["libckpt/format/bad.cc:1", "libckpt/pipeline/up.cc:1", "libckpt/layout/side.cc:1",
                  "include/ckpt/new.h:1", "include/ckpt/mesh.h:1", "benchmarks/b.cc:1",
                  "libckpt/coordinator/double.cc:1", "libckpt/storage/up.cc:1", "libckpt/storage/names.cc:1",
                  "libckpt/storage/files.cc:1", "libckpt/core/backend.cc:1", "libckpt/storage/roots/hdf5/h.cc:1",
                  "tools/ckpt/cmd_x.cc:1", "libckpt/pipeline/files.cc:1", "libckpt/plan/names.cc:1",
                  "tools/common/inside.cc:3"]
        for e in expect:
            assert any(p.startswith(e) for p in found), (e, found)
        assert len(found) == len(expect), found
    print(f"check-layers self-test: {len(expect)} planted violations found, a clean tree passes")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if not os.path.isdir(os.path.join(root, "libckpt")):
        print(f"check-layers: {root} is not a ckpt checkout", file=sys.stderr)
        return 2
    problems = check(root)
    new = [p for p in problems if p.split(":", 1)[0] not in KNOWN]
    known = len(problems) - len(new)
    for p in new:
        print(p)
    fixed = sorted(k for k in KNOWN if not any(p.startswith(k + ":") for p in problems))
    print(f"check-layers: {len(new)} new violation(s), {known} known"
          + (f"; no longer violating, drop from KNOWN: {', '.join(fixed)}" if fixed else ""))
    return 1 if new or fixed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
