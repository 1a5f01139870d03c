#!/usr/bin/env python3
"""The include rules between mpi_trainer's folders (docs/architecture.md, "Layers").

Reads every direct `#include "..."` of the project's own headers under mpi_trainer/ and ckpt/
and checks it against the rules below: each folder may include its own files, the folders listed
as below it, and the listed exceptions, each with its reason. Prints every violation (file, line,
include, the rule it breaks) and exits 1 when there is one; an exception that no file needs any
more is reported too (a rule that excuses nothing hides the next real violation).

  tests/check_layers.py [ROOT]      (ROOT: the repository, default: this file's parent's parent)
"""
import pathlib
import re
import sys

# Folders, bottom up. A folder may include every folder listed in its `below` (not transitively:
# each is named), and its own files. Paths are relative to mpi_trainer/ (ckpt/ is the repo's).
BASE = {"core"}
LAYERS = {
    "core": set(),
    "backend": BASE,
    "nn": BASE | {"backend"},
    "optim": BASE | {"nn", "backend"},
    "data": BASE,
    "ckpt": BASE,
    # The planner's revocation models are data and their parsers (library mt_revocation).
    "plan/revocation": BASE,
    # The parameter-server runtime, one folder per layer (mpi_trainer/ps/README.md).
    "ps/wire": BASE | {"nn", "backend"},
    "ps/inject": BASE | {"ps/wire"},
    "ps/exchange": BASE | {"nn", "optim", "data", "backend", "ps/wire", "ps/inject", "ps"},
    "ps/elastic": BASE | {"ps/wire", "ps/exchange", "ps"},
    "ps/resilience": BASE | {"nn", "optim", "data", "backend", "ps/wire", "ps/inject", "ps/exchange",
                             "ps/elastic", "ps"},
    # ps/ps.hpp, the face: what it declares needs these.
    "ps": BASE | {"nn", "optim", "data", "ps/wire", "ps/inject", "ps/elastic", "ps/exchange",
                  "ps/resilience"},
    "plan": BASE | {"nn", "optim", "backend", "ps", "plan/revocation"},
    "app": BASE | {"backend", "nn", "optim", "data", "ckpt", "ps", "plan", "plan/revocation"},
    "report": set(),
}

# Includes across the rules above, each with why. (including folder, included file): reason.
EXCEPTIONS = {
    ("ps/exchange", "ps/resilience/standbys.hpp"):
        "a Shard owns its Standbys (--ps-standby) and calls it after each step; what a replica means "
        "is decided there, not in the shard",
    ("ps/exchange", "ps/resilience/push_journal.hpp"):
        "a Shard's interface names PartState and StartLog, the types a takeover starts it from",
    ("ps/exchange", "ps/elastic/joins.hpp"):
        "shard 0 owns the JoinListener (--max-workers) and takes the joins it accepted between pushes",
    ("ps/exchange", "ps/elastic/replacements.hpp"):
        "shard 0 owns the WorkerSpawner (--replace-workers) and takes the replacements it started between pushes",
    ("ps/elastic", "ps/resilience/notices.hpp"):
        "a joiner that gets a notice (SIGTERM, SIGUSR1) while it waits to connect leaves before joining",
    ("ps/inject", "ps/resilience/notices.hpp"):
        "a timed revocation may send a notice signal instead of SIGKILL (rank=R@30s:TERM)",
    ("ps/inject", "plan/revocation_model.hpp"):
        "--revocation-model draws each worker's lifetime from the planner's revocation models",
    ("plan", "app/emulation.hpp"):
        "the simulator and calibration use the app's device profiles (--emulate-device, mpi_trainer devices)",
    ("plan", "app/device.hpp"):
        "mpi_trainer calibrate opens the device it measures as the trainer does",
    ("plan", "app/run_setup.hpp"):
        "mpi_trainer calibrate builds the model and optimizer as the trainer does",
    ("plan", "app/metrics.hpp"):
        "the simulator writes the same metrics events as a real run (virtual-clock runs)",
}

# What app/ and plan/ may include of ps/ besides ps/ps.hpp, and why (docs/architecture.md).
PS_FACE = "ps/ps.hpp"
PS_OUTSIDE = {
    "ps/wire/mpi_env.hpp": "main, cli.cpp and train_dist.cpp own the MPI session (MpiSession)",
    "ps/exchange/update_policy.hpp": "the virtual simulator, calibrate and the report use the very "
                                     "formulas the shards apply (UpdatePolicy, GapPenalty)",
    "ps/wire/partition.hpp": "the simulator and plan size each shard's part of a push as the shards do",
    "ps/resilience/replica_pacing.hpp": "the simulator and plan pace the standby replicas' slices as the shards do",
    "ps/wire/ulfm.hpp": "train_dist.cpp ends the hung processes a takeover reported, once this "
                        "process is done, and --version names the failure detection",
    "ps/resilience/notices.hpp": "every rank and the single process install the same notice handlers "
                                 "(SIGTERM, SIGUSR1, Ctrl-C) and name signals in their messages",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    """The rule folder of a path relative to mpi_trainer/ (or 'ckpt/...')."""
    parts = rel.split("/")
    if parts[0] == "plan" and parts[-1].startswith("revocation_"):
        return "plan/revocation"
    if parts[0] == "ps" and len(parts) > 2:
        return "ps/" + parts[1]
    return parts[0]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = root / "mpi_trainer"
    files = [p for p in src.rglob("*") if p.suffix in {".hpp", ".cpp", ".cu", ".in"}]
    files += [p for p in (root / "ckpt").glob("*") if p.suffix in {".hpp", ".cpp"}]
    bad, used = [], set()
    checked = 0
    for path in sorted(files):
        rel = str(path.relative_to(src if path.is_relative_to(src) else root))
        here = folder_of(rel)
        if here not in LAYERS:
            bad.append(f"{rel}: folder '{here}' has no rule in tests/check_layers.py")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if "/" not in inc:
                continue  # a file beside it (tests' helpers, generated headers of its own folder)
            there = folder_of(inc)
            if there not in LAYERS:
                continue  # a system or third-party header spelled with quotes
            checked += 1
            if here.startswith("ps/") and rel.endswith(".hpp") and inc == PS_FACE:
                bad.append(f"{rel}:{n}: includes {inc}: an internal header includes ps/options.hpp or "
                           f"ps/events.hpp, not the app's face")
                continue
            if here in ("app", "plan") and there.startswith("ps") and inc != PS_FACE:
                if inc in PS_OUTSIDE:
                    used.add(inc)
                    continue
                bad.append(f"{rel}:{n}: includes {inc}: app/ and plan/ reach ps/ through {PS_FACE} "
                           f"and the headers listed in PS_OUTSIDE only")
                continue
            if there == here or there in LAYERS[here]:
                continue
            if (here, inc) in EXCEPTIONS:
                used.add((here, inc))
                continue
            bad.append(f"{rel}:{n}: includes {inc}: {here}/ may include {', '.join(sorted(LAYERS[here])) or 'nothing'}"
                       f" (and the exceptions listed with their reasons)")
    for key in EXCEPTIONS:
        if key not in used:
            bad.append(f"exception {key} excuses no include any more: remove it from tests/check_layers.py")
    for key in PS_OUTSIDE:
        if key not in used:
            bad.append(f"PS_OUTSIDE entry {key} is included by no file of app/ or plan/: remove it")
    for b in bad:
        print(b)
    print(f"check_layers: {checked} includes across folders in {len(files)} files, {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
