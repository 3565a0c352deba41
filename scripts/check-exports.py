#!/usr/bin/env python3
"""Fails when a shared library of ckpt exports more than its public API.

    scripts/check-exports.py LIB.so [LIB.so ...]

libckpt, libckpt_coordinator and libckpt_mpi are built with hidden
visibility; the public headers (include/ckpt) mark what is exported with
CKPT_EXPORT. Every exported C++ symbol of namespace ckpt must name a class,
function, enum or constant declared in a public header; template
instantiations of std:: and absl:: types (over public ckpt types) are
allowed. Any other exported symbol is listed.

It also checks that every ckpt symbol a library needs from another (libckpt
for the coordinator's) is one the libraries given export: a library that
calls an internal function of libckpt links, then fails to load.

It also checks that each library exports something and that a few internal
names that once leaked (the save engine, the parsers of util/strings.h, the
coordinator's server) are hidden.
Exit status: 0 clean, 1 problems found (listed), 2 usage or unreadable.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC = os.path.join(ROOT, "include", "ckpt")

DECL = re.compile(r"\b(?:class|struct|enum class|enum|using|namespace)\s+(?:CKPT_EXPORT\s+)?([A-Za-z_]\w*)")
FUNC = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
CONST = re.compile(r"\bconstexpr\s+[\w:<>]+\s+([A-Za-z_]\w*)\s*=")
# Names that must never be exported (internal classes and helpers).
MUST_HIDE = ["ckpt::SaveEngine::", "ckpt::ParseByteCount", "ckpt::ParseDuration", "ckpt::GlobMatch",
             "ckpt::Xxh3", "ckpt::coord::", "ckpt::ExamineStep", "ckpt::EncodeManifest"]
PREFIXES = ("vtable for ", "typeinfo for ", "typeinfo name for ", "VTT for ", "construction vtable for ",
            "guard variable for ", "non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ")


def public_names():
    names = set()
    for dirpath, _, files in os.walk(PUBLIC):
        for name in files:
            if not name.endswith(".h"):
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                text = f.read()
            text = re.sub(r"//[^\n]*", "", text)
            for rx in (DECL, FUNC, CONST):
                names.update(rx.findall(text))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", lib], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(out.stderr.strip() or f"nm failed on {lib}")
    symbols = []
    for line in out.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] not in ("A",):
            symbols.append(parts[2])
    return symbols


def check(lib, names):
    problems = []
    symbols = exported(lib)
    ckpt_symbols = 0
    for sym in symbols:
        bare = sym
        for p in PREFIXES:
            if bare.startswith(p):
                bare = bare[len(p):]
                break
        if bare.startswith(("std::", "absl::", "__gnu_cxx::", "void std::", "void absl::")):
            continue
        if bare in ("_init", "_fini", "__bss_start", "_edata", "_end"):
            continue
        m = re.match(r"^(?:[^()]*\s)?ckpt::(\(anonymous namespace\)|[A-Za-z_]\w*)", bare)
        if not m:
            problems.append(f"{os.path.basename(lib)}: exports {sym!r}, which is not in namespace ckpt")
            continue
        ckpt_symbols += 1
        first = m.group(1)
        if first not in names:
            problems.append(f"{os.path.basename(lib)}: exports {sym!r}: ckpt::{first} is not declared in include/ckpt")
        for hidden in MUST_HIDE:
            if bare.startswith(hidden):
                problems.append(f"{os.path.basename(lib)}: exports the internal {sym!r}")
    if ckpt_symbols == 0:
        problems.append(f"{os.path.basename(lib)}: exports no ckpt symbol at all")
    return problems, len(symbols), ckpt_symbols


def undefined_ckpt(lib):
    out = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(out.stderr.strip() or f"nm failed on {lib}")
    return [line.split()[-1] for line in out.stdout.splitlines()
            if re.match(r"^_ZN?K?4ckpt", line.split()[-1])]


def demangle(sym):
    out = subprocess.run(["c++filt", sym], capture_output=True, text=True)
    return out.stdout.strip() or sym


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    names = public_names()
    all_problems = []
    for lib in argv[1:]:
        try:
            problems, total, ours = check(lib, names)
        except OSError as e:
            print(f"check-exports: {lib}: {e}", file=sys.stderr)
            return 2
        print(f"{os.path.basename(lib)}: {total} exported symbols, {ours} of namespace ckpt")
        all_problems += problems
    try:
        defined = set()
        for lib in argv[1:]:
            out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
            defined.update(line.split()[-1] for line in out.stdout.splitlines() if line.strip())
        for lib in argv[1:]:
            for sym in undefined_ckpt(lib):
                if sym not in defined:
                    all_problems.append(f"{os.path.basename(lib)}: needs {demangle(sym)!r}, which no library given "
                                        "exports (it would fail to load)")
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check-exports: {e}", file=sys.stderr)
        return 2
    for p in all_problems:
        print(p)
    return 1 if all_problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
