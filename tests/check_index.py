#!/usr/bin/env python3
"""tests/README.md is a complete index of tests/: every file tracked under tests/ is named there
(in backticks, as `name`, or under a folder row such as `golden/` or `fuzz/fuzz_*.cpp`), and every
test file the index names exists. Exit 1 with the list of what is missing either way.

  tests/check_index.py [ROOT]
"""
import fnmatch
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
tests = root / "tests"
readme = (tests / "README.md").read_text(encoding="utf-8")
named = set(re.findall(r"`([^`\s]+)`", readme))
try:
    files = subprocess.run(["git", "-C", str(root), "ls-files", "tests"], check=True, capture_output=True,
                           text=True).stdout.split()
except (OSError, subprocess.CalledProcessError):  # not a git checkout (a source tarball): what is there
    files = [str(p.relative_to(root)) for p in tests.rglob("*") if p.is_file()]
bad = []
for f in sorted(files):
    rel = f[len("tests/"):]
    if rel == "README.md":
        continue  # the index itself
    folders = [n for n in named if n.endswith("/") and rel.startswith(n)]
    patterns = [n for n in named if "*" in n and fnmatch.fnmatch(rel, n)]
    if rel in named or folders or patterns:
        continue
    bad.append(f"tests/{rel}: not named in tests/README.md")
for n in sorted(named):
    if re.fullmatch(r"(test_|check_)[\w.]+\.(cpp|hpp|sh|py)", n) and not (tests / n).exists():
        bad.append(f"tests/README.md names {n}, which is not in tests/")
for b in bad:
    print(b)
print(f"tests_index: {len(files)} files, {len(bad)} missing")
sys.exit(1 if bad else 0)
