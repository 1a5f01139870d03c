#!/usr/bin/python3
"""Reduce AWS's Spot Instance Advisor feed to the interruption bands `--revocation-model
aws-advisor` reads (issue 44): one row per (our device type, region) with the band AWS gives the
instance type that carries that device.

AWS publishes, per instance type and region, the "frequency of interruption": "the rate at which
Spot has reclaimed capacity during the trailing month", in five bands (<5%, 5-10%, 10-15%,
15-20%, >20%). It is a monthly frequency, not a lifetime: plan/revocation_bands.cpp states the
model built on it (a constant hazard). There is no internet here: the feed
(https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json) is read from a public
repository that keeps a copy, alexei-led/spotinfo (internal/spot/data/spot-advisor-data.json),
at an exact commit, so the table names where it came from.

  /usr/bin/python3 bench/tables/spot_advisor.py SNAPSHOT [--commit C] [--path P] [--out FILE]

SNAPSHOT: a git directory of the repository (what the `fetch` tool brings:
/work/.mirror/alexei-led+spotinfo/repo).
"""
import argparse
import hashlib
import json
import subprocess
import sys

# Our device types (plan/prices_aws.txt) and the AWS instance whose band stands for them. The
# advisor has no p5.4xlarge (1 H100): the 8-GPU p5.48xlarge, the same GPU pool, stands in.
TYPES = [
    ("t4", "g4dn.xlarge"),
    ("l4", "g6.xlarge"),
    ("a10g", "g5.xlarge"),
    ("v100", "p3.2xlarge"),
    ("a100x8", "p4d.24xlarge"),
    ("h100", "p5.48xlarge"),
    ("ps", "m5.xlarge"),
]
LABELS = ["<5%", "5-10%", "10-15%", "15-20%", ">20%"]


def git(snapshot, *args):
    return subprocess.run(["git", "--git-dir", snapshot] + list(args), capture_output=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--path", default="internal/spot/data/spot-advisor-data.json")
    ap.add_argument("--repo", default="alexei-led/spotinfo", help="the repository's name, for the table's header")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    commit = git(a.snapshot, "rev-parse", a.commit).decode().strip()
    raw = git(a.snapshot, "show", f"{commit}:{a.path}")
    dated = git(a.snapshot, "log", "-1", "--format=%cs", commit, "--", a.path).decode().strip()
    feed = json.loads(raw)
    labels = [r["label"] for r in sorted(feed["ranges"], key=lambda r: r["index"])]
    if labels != LABELS:
        sys.exit(f"spot_advisor.py: the feed's bands are {labels}, expected {LABELS}: its format changed")
    rows, missing = [], []
    for region in sorted(feed["spot_advisor"]):
        linux = feed["spot_advisor"][region].get("Linux", {})
        for ours, instance in TYPES:
            entry = linux.get(instance)
            if entry is None:
                continue
            band = entry["r"]
            if band not in range(len(LABELS)):
                sys.exit(f"spot_advisor.py: {region} {instance}: band {band} is not one of 0..{len(LABELS) - 1}")
            rows.append((ours, instance, region, LABELS[band]))
    for ours, instance in TYPES:
        if not any(r[0] == ours for r in rows):
            missing.append(instance)
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    print(f"# AWS Spot Instance Advisor interruption bands (\"the rate at which Spot has reclaimed capacity during",
          file=out)
    print(f"# the trailing month\"), Linux, per region, from AWS's feed "
          f"https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json", file=out)
    print(f"# as kept by {a.repo} ({a.path}, last changed {dated}), commit {commit},", file=out)
    print(f"# sha256 {hashlib.sha256(raw).hexdigest()}; reduced by bench/tables/spot_advisor.py.", file=out)
    print("# The band is AWS's, the model built on it is ours (plan/revocation_bands.cpp: a constant hazard).", file=out)
    if missing:
        print(f"# Not in the feed: {', '.join(missing)}.", file=out)
    print("# type,instance,region,band", file=out)
    for r in rows:
        print(",".join(r), file=out)
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
