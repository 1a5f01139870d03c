#!/usr/bin/env python3
"""What each test costs, from the JUnit files `ctest --output-junit BUILD/junit*.xml` wrote
(launch/test.sh writes one per leg, two for the ULFM leg) and the labels CTest knows for the build directory.

    /usr/bin/python3 tests/ctest_times.py build/release [build/asan build/ulfm] [--top 20]

Prints, per build directory: the seconds of each label (a test with several labels counts in
each), the seconds of the tests that hold both cores (RESOURCE_GROUPS `cores:2`, tests/CMakeLists.txt:
the MPI tests, one after the other: the suite's floor with -j 2; a light test may run beside them),
and then the slowest tests of all. tests/README.md keeps the budget these figures are checked against.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def both_cores(groups):
    """Whether RESOURCE_GROUPS (as --show-only=json-v1 gives it) asks for both `cores` slots."""
    return any(r.get(".type") == "cores" and r.get("slots", 0) >= 2
               for g in groups or [] for r in g.get("requirements", []))


def test_properties(build):
    """{test name: (labels, holds both cores)} from CTest's own description of the build directory."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    props = {}
    for t in json.loads(out)["tests"]:
        p = {q["name"]: q["value"] for q in t.get("properties", [])}
        props[t["name"]] = (p.get("LABELS", []), bool(p.get("RUN_SERIAL", False)) or both_cores(p.get("RESOURCE_GROUPS")))
    return props


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="build directories holding junit.xml")
    ap.add_argument("--top", type=int, default=20, help="how many of the slowest tests to list")
    a = ap.parse_args()
    everything = []
    for build in a.builds:
        # junit.xml, and junit-*.xml for a leg run in parts (launch/test.sh: the ULFM alone tests)
        junits = sorted(glob.glob(os.path.join(build, "junit*.xml")))
        if not junits:
            print(f"{build}: no junit.xml (run ctest with --output-junit)", file=sys.stderr)
            continue
        props = test_properties(build)
        by_label, serial, total, n = {}, 0.0, 0.0, 0
        for case in (c for junit in junits for c in ET.parse(junit).getroot().iter("testcase")):
            name, secs = case.get("name"), float(case.get("time", 0))
            labels, alone = props.get(name, ([], False))
            for label in labels or ["(none)"]:
                by_label[label] = by_label.get(label, 0.0) + secs
            serial += secs if alone else 0
            total += secs
            n += 1
            everything.append((secs, os.path.basename(build.rstrip("/")), name, "both cores" if alone else ""))
        labels = ", ".join(f"{k} {v:.0f}" for k, v in sorted(by_label.items(), key=lambda kv: -kv[1]))
        print(f"{build}: {n} tests, {total:.0f} s of test time, {serial:.0f} s of it holding both cores; by label: {labels}")
    print(f"slowest {a.top}:")
    for secs, build, name, alone in sorted(everything, reverse=True)[:a.top]:
        print(f"  {secs:7.1f} s  {build:8s} {name} {alone}")


if __name__ == "__main__":
    main()
