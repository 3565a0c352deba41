#!/usr/bin/env python3
"""Holds the unit tier to its promise: after a run, no test labelled `unit`
took longer than the limit (tests/tiers.txt moves a slower case to another
tier).

    scripts/tiers.py BUILD_DIR [--limit SECONDS]   check the last run in BUILD_DIR
    scripts/tiers.py --self-test                   check the check on made-up runs

Reads the labels from `ctest --show-only=json-v1` and the durations ctest
recorded (BUILD_DIR/Testing/Temporary/CTestCostData.txt). Prints the
slowest unit tests and each one over the limit with the line that would
move it. Exit status: 0 within the limit, 1 a unit test over it, 2 usage
or no run recorded.
"""
import json
import os
import subprocess
import sys


def unit_tests(build):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    names = {}
    for t in json.loads(out)["tests"]:
        labels = next((p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"), [])
        if "unit" in labels:
            command = t.get("command") or ["?"]
            names[t["name"]] = os.path.basename(command[0])
    return names


def costs(path):
    out = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3:
                try:
                    out[fields[0]] = float(fields[2])
                except ValueError:
                    pass
    return out


def over_limit(units, measured, limit):
    """(name, program, seconds) of each unit test slower than `limit`, slowest first."""
    slow = [(n, units[n], measured[n]) for n in units if measured.get(n, 0) > limit]
    return sorted(slow, key=lambda x: -x[2])


def self_test():
    units = {"A.Fast": "a_test", "A.Slow": "a_test", "B.Never": "b_test"}
    measured = {"A.Fast": 0.2, "A.Slow": 4.5, "C.Other": 60}
    slow = over_limit(units, measured, 3)
    assert slow == [("A.Slow", "a_test", 4.5)], slow
    assert over_limit(units, measured, 5) == []
    print("tiers.py self-test: ok")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) < 2 or argv[1] in ("-h", "--help") or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr if len(argv) < 2 else sys.stdout)
        return 2 if len(argv) < 2 or argv[1] not in ("-h", "--help") else 0
    build, limit = argv[1], 3.0
    if len(argv) == 4 and argv[2] == "--limit":
        limit = float(argv[3])
    elif len(argv) != 2:
        print("usage: scripts/tiers.py BUILD_DIR [--limit SECONDS]", file=sys.stderr)
        return 2
    cost_file = os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")
    if not os.path.exists(cost_file):
        print(f"tiers.py: no run recorded in {build} ({cost_file})", file=sys.stderr)
        return 2
    units, measured = unit_tests(build), costs(cost_file)
    ran = sorted(((measured[n], n) for n in units if n in measured), reverse=True)
    total = sum(c for c, _ in ran)
    print(f"unit tier: {len(ran)} tests, {total:.1f} s of test time; slowest: " +
          ", ".join(f"{n} {c:.2f} s" for c, n in ran[:3]))
    slow = over_limit(units, measured, limit)
    for name, program, seconds in slow:
        print(f"tiers.py: {name} is labelled unit but took {seconds:.1f} s (limit {limit:g} s); "
              f"add it to tests/tiers.txt: {program} integration {name}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
