#!/usr/bin/python3
"""Checks the cloud cluster configurations in cloud-hpc/ without deploying anything.

Parses the Cluster Toolkit blueprints (cloud-hpc/gcp/*.yaml) and the ParallelCluster configs
(cloud-hpc/aws/*.yaml), checks their structure (modules, partitions, queues, storage, spot
settings, GPU machines) and cross-checks them against the sbatch templates: every partition an
`#SBATCH --partition`/`-p` line of slurm/*.sbatch names must exist in every config, the one
slurm/train.sbatch uses must be a spot partition, and the on-demand partition for the parameter
server must exist. The node setup (cloud-hpc/node-setup.sh): every partition/queue runs it, the
GPU ones with --gpu (the CUDA 13 runtime, cuBLAS, cuDNN 9), the CPU one without, and no compute
node installs -dev packages; the script passes bash -n and shellcheck (when installed), its
--dry-run lists the packages, and a run against fake apt-get/dpkg/ldconfig/nvidia-smi in a
scratch root checks its steps, timing log, idempotence and failure exit. One line per check; the
last line is "N passed, M failed".

Usage: /usr/bin/python3 tests/test_cloud_hpc.py REPO_ROOT
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # pragma: no cover - the message is the point
    print("FAIL: python3-yaml is missing (apt-get install python3-yaml)")
    print("0 passed, 1 failed")
    sys.exit(1)

GCP_FILES = ("cloud-hpc/gcp/minimal.yaml", "cloud-hpc/gcp/full.yaml")
AWS_FILES = ("cloud-hpc/aws/minimal.yaml", "cloud-hpc/aws/full.yaml")
ONDEMAND, SPOT = "ondemand", "spot"
GCP_GPU_MACHINE = re.compile(r"^(a2|a3|a4|g2|g4)-")
AWS_GPU_INSTANCE = re.compile(r"^(g|p)\d[a-z]*\.")
AWS_OSES = {"alinux2", "alinux2023", "ubuntu2004", "ubuntu2204", "ubuntu2404",
            "rhel8", "rocky8", "rhel9", "rocky9"}
AWS_STORAGE = {"Ebs", "Efs", "FsxLustre", "FsxOpenZfs", "FsxOntap", "FileCache"}
AWS_ALLOCATION = {"lowest-price", "capacity-optimized", "price-capacity-optimized"}
NODE_SETUP = "cloud-hpc/node-setup.sh"
GPU_PACKAGES = ("cuda-cudart-13-0", "libcublas-13-0", "libcudnn9-cuda-13")
# A -dev package on an apt-get line of a compute node's inline script (the node setup installs
# run-time libraries only; mpi_trainer is built on the login/head node).
DEV_PACKAGE = re.compile(r"apt-get[^\n]*(\\\n[^\n]*)*\b[a-z0-9.+-]+-dev\b")


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS: {what}")
        else:
            self.failed += 1
            print(f"FAIL: {what}" + (f": {detail}" if detail else ""))
        return bool(ok)


def load_yaml(repo, rel, c):
    path = os.path.join(repo, rel)
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        c.check(False, f"{rel}: readable", str(e))
        return None
    except yaml.YAMLError as e:
        c.check(False, f"{rel}: valid YAML", " ".join(str(e).split()))
        return None
    if not c.check(isinstance(doc, dict), f"{rel}: parses to a mapping", f"got {type(doc).__name__}"):
        return None
    return doc


def sbatch_partitions(path):
    """Partitions named by the #SBATCH lines of one script (sbatch stops reading them at the
    first line that is neither a comment nor blank)."""
    parts = []
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines[1:] if lines and lines[0].startswith("#!") else lines:
        s = line.strip()
        if s and not s.startswith("#"):
            break
        if not s.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(s[len("#SBATCH"):], comments=True)
        except ValueError:
            words = s[len("#SBATCH"):].split()
        for i, w in enumerate(words):
            value = None
            if w.startswith("--partition="):
                value = w.split("=", 1)[1]
            elif w in ("--partition", "-p") and i + 1 < len(words):
                value = words[i + 1]
            elif w.startswith("-p") and len(w) > 2 and not w.startswith("--"):
                value = w[2:]
            if value:
                parts += [p for p in value.split(",") if p]
    return parts


def as_list(x):
    return x if isinstance(x, list) else []


def as_dict(x):
    return x if isinstance(x, dict) else {}


# ----------------------------------------------------------------------------------------------
# Google Cloud: Cluster Toolkit blueprints

def check_gcp(rel, bp, c):
    """Returns {partition name: is spot} for the cross-checks."""
    c.check(isinstance(bp.get("blueprint_name"), str) and bp["blueprint_name"],
            f"{rel}: blueprint_name set")
    vars_ = as_dict(bp.get("vars"))
    missing = [v for v in ("project_id", "region", "zone", "deployment_name") if v not in vars_]
    c.check(not missing, f"{rel}: vars project_id, region, zone, deployment_name", f"missing {missing}")
    groups = bp.get("deployment_groups")
    if not c.check(isinstance(groups, list) and groups, f"{rel}: deployment_groups is a non-empty list"):
        return {}, {}
    modules = []
    bad = []
    for g in groups:
        if not isinstance(g, dict) or "group" not in g or not isinstance(g.get("modules"), list):
            bad.append(str(g)[:60])
            continue
        for m in g["modules"]:
            if isinstance(m, dict) and isinstance(m.get("id"), str) and isinstance(m.get("source"), str):
                modules.append(m)
            else:
                bad.append(str(m)[:60])
    c.check(not bad, f"{rel}: every group has group+modules, every module id+source", f"bad: {bad}")
    ids = [m["id"] for m in modules]
    c.check(len(ids) == len(set(ids)), f"{rel}: module ids are unique", f"{ids}")
    by_id = {m["id"]: m for m in modules}
    dangling = [(m["id"], u) for m in modules for u in as_list(m.get("use")) if u not in by_id]
    c.check(not dangling, f"{rel}: every `use` names a module of the blueprint", f"{dangling}")

    def with_source(part):
        return [m for m in modules if part in m["source"]]

    settings = lambda m: as_dict(m.get("settings"))
    c.check(any(m["source"].endswith("network/vpc") for m in modules), f"{rel}: a vpc network module")
    nodesets = with_source("schedmd-slurm-gcp-v6-nodeset")
    partitions = with_source("schedmd-slurm-gcp-v6-partition")
    controllers = with_source("schedmd-slurm-gcp-v6-controller")
    logins = with_source("schedmd-slurm-gcp-v6-login")
    filesystems = [m for m in modules if "/file-system/" in m["source"]]
    c.check(len(controllers) == 1, f"{rel}: one schedmd-slurm-gcp-v6-controller", f"{len(controllers)}")
    c.check(len(logins) >= 1, f"{rel}: a schedmd-slurm-gcp-v6-login")
    c.check(len(nodesets) >= 2 and len(partitions) >= 2, f"{rel}: v6 nodesets and partitions")
    names = {settings(p).get("partition_name"): p for p in partitions}
    c.check(set(names) == {ONDEMAND, SPOT}, f"{rel}: partitions are exactly '{ONDEMAND}' and '{SPOT}'",
            f"got {sorted(map(str, names))}")
    c.check(all(re.fullmatch(r"[a-z][a-z0-9]*", str(n)) for n in names),
            f"{rel}: partition names match slurm-gcp's ^[a-z][a-z0-9]*$")

    spot_of = {}
    for name, part in names.items():
        used = [by_id[u] for u in as_list(part.get("use")) if u in by_id]
        sets = [m for m in used if m in nodesets]
        if not c.check(sets, f"{rel}: partition '{name}' uses a nodeset"):
            continue
        spot = [bool(settings(m).get("enable_spot_vm")) or bool(settings(m).get("preemptible")) for m in sets]
        spot_of[name] = all(spot)
        if name == SPOT:
            c.check(all(settings(m).get("enable_spot_vm") is True for m in sets),
                    f"{rel}: the '{SPOT}' nodesets have enable_spot_vm: true")
            gpu = [bool(as_list(settings(m).get("guest_accelerator")))
                   or bool(GCP_GPU_MACHINE.match(str(settings(m).get("machine_type", "")))) for m in sets]
            c.check(all(gpu), f"{rel}: the '{SPOT}' nodesets are GPU machines (guest_accelerator or a2/a3/g2...)",
                    f"machine types {[settings(m).get('machine_type') for m in sets]}")
            for m in sets:
                action = as_dict(settings(m).get("spot_instance_config")).get("termination_action")
                if action is not None:
                    c.check(action in ("STOP", "DELETE"), f"{rel}: {m['id']} termination_action is STOP or DELETE",
                            f"{action}")
        elif name == ONDEMAND:
            c.check(not any(spot), f"{rel}: the '{ONDEMAND}' nodesets are not spot/preemptible")

    ctrl = controllers[0] if len(controllers) == 1 else {}
    cuse = set(as_list(ctrl.get("use")))
    c.check({p["id"] for p in partitions} <= cuse, f"{rel}: the controller uses both partitions")
    c.check(any(m["id"] in cuse for m in logins), f"{rel}: the controller uses the login module")
    shared = [m for m in filesystems if m["id"] in cuse or all(m["id"] in as_list(n.get("use")) for n in nodesets)]
    c.check(shared, f"{rel}: a shared filesystem module used by the controller (so by every node)",
            f"filesystems {[m['id'] for m in filesystems]}")
    mounts = [settings(m).get("local_mount") for m in shared]
    c.check(all(isinstance(p, str) and p.startswith("/") for p in mounts),
            f"{rel}: the shared filesystems have a local_mount", f"{mounts}")

    # Startup scripts: no blueprint expressions or Terraform templates hidden in bash.
    for m in modules:
        for key, val in settings(m).items():
            if key.endswith("startup_script") and isinstance(val, str):
                c.check("$(" not in val and "${" not in val and "%{" not in val,
                        f"{rel}: {m['id']}.{key} has no $( ${{ %{{ (Cluster Toolkit/Terraform would expand them)")
        for i, r in enumerate(gcp_runners(m)):
            if isinstance(r.get("content"), str):
                val = r["content"]
                c.check("$(" not in val and "${" not in val and "%{" not in val,
                        f"{rel}: {m['id']} runner {i} content has no $( ${{ %{{ (Cluster Toolkit/Terraform would expand them)")

    # The node setup of each partition: the startup-script modules its nodesets use (runners whose
    # source is node-setup.sh, with their args) or an inline startup_script that calls it.
    blueprint_dir = os.path.dirname(rel)
    setups = {}
    for name, part in names.items():
        calls, inline = [], []
        for ns in [by_id[u] for u in as_list(part.get("use")) if u in by_id and by_id[u] in nodesets]:
            inline.append(str(settings(ns).get("startup_script", "")))
            for u in as_list(ns.get("use")):
                for r in gcp_runners(by_id.get(u, {})):
                    src = str(r.get("source", ""))
                    staged = re.fullmatch(r'\$\(ghpc_stage\("([^"]+)"\)\)', src)
                    path = os.path.normpath(os.path.join(blueprint_dir, staged.group(1))) if staged else src
                    if path.endswith("node-setup.sh"):
                        calls.append((path, shlex.split(str(r.get("args", "")))))
                    if isinstance(r.get("content"), str):
                        inline.append(r["content"])
            for script in inline:
                for line in script.splitlines():
                    if "node-setup.sh" in line and not line.lstrip().startswith("#"):
                        words = shlex.split(line, comments=True)
                        at = [i for i, w in enumerate(words) if w.endswith("node-setup.sh")]
                        if at:
                            calls.append((words[at[0]], words[at[0] + 1:]))
        setups[name] = (calls, inline)
    return spot_of, setups


def gcp_runners(module):
    """The runners of a startup-script module (empty for other modules)."""
    if "modules/scripts/startup-script" not in str(as_dict(module).get("source", "")):
        return []
    return [r for r in as_list(as_dict(as_dict(module).get("settings")).get("runners")) if isinstance(r, dict)]


# ----------------------------------------------------------------------------------------------
# AWS: ParallelCluster 3 configurations

def aws_instance_types(cr):
    if "InstanceType" in cr:
        return [cr["InstanceType"]]
    return [as_dict(i).get("InstanceType") for i in as_list(cr.get("Instances"))]


def aws_scripts(actions):
    """Script URLs of a CustomActions mapping (single script or Sequence)."""
    out = []
    for key in ("OnNodeStart", "OnNodeConfigured", "OnNodeUpdated"):
        a = as_dict(as_dict(actions).get(key))
        items = as_list(a.get("Sequence")) if "Sequence" in a else ([a] if a else [])
        out += [(key, as_dict(i).get("Script"), as_list(as_dict(i).get("Args"))) for i in items]
    return out


def check_aws(rel, cfg, c):
    c.check(as_dict(cfg.get("Image")).get("Os") in AWS_OSES, f"{rel}: Image.Os is a ParallelCluster OS",
            f"{as_dict(cfg.get('Image')).get('Os')}")
    head = as_dict(cfg.get("HeadNode"))
    c.check(head.get("InstanceType"), f"{rel}: HeadNode.InstanceType")
    c.check(str(as_dict(head.get("Networking")).get("SubnetId", "")).startswith("subnet-"),
            f"{rel}: HeadNode.Networking.SubnetId")
    c.check(as_dict(head.get("Ssh")).get("KeyName"), f"{rel}: HeadNode.Ssh.KeyName")
    sched = as_dict(cfg.get("Scheduling"))
    c.check(sched.get("Scheduler") == "slurm", f"{rel}: Scheduling.Scheduler is slurm", f"{sched.get('Scheduler')}")
    queues = [q for q in as_list(sched.get("SlurmQueues")) if isinstance(q, dict)]
    names = {q.get("Name"): q for q in queues}
    c.check(set(names) == {ONDEMAND, SPOT}, f"{rel}: queues are exactly '{ONDEMAND}' and '{SPOT}'",
            f"got {sorted(map(str, names))}")
    c.check(all(re.fullmatch(r"[a-z][a-z0-9-]{0,24}", str(n)) for n in names),
            f"{rel}: queue names are valid Slurm/ParallelCluster names")
    spot_of = {}
    setups = {}
    for name, q in names.items():
        cap = q.get("CapacityType", "ONDEMAND")
        spot_of[name] = cap == "SPOT"
        want = "SPOT" if name == SPOT else "ONDEMAND" if name == ONDEMAND else None
        if want:
            c.check(cap == want, f"{rel}: queue '{name}' has CapacityType {want}", f"{cap}")
        subnets = as_list(as_dict(q.get("Networking")).get("SubnetIds"))
        c.check(subnets and all(str(s).startswith("subnet-") for s in subnets), f"{rel}: queue '{name}' has SubnetIds")
        crs = [r for r in as_list(q.get("ComputeResources")) if isinstance(r, dict)]
        if not c.check(crs, f"{rel}: queue '{name}' has ComputeResources"):
            continue
        ok = all(r.get("Name") and (("InstanceType" in r) != ("Instances" in r)) and all(aws_instance_types(r))
                 for r in crs)
        c.check(ok, f"{rel}: queue '{name}': every compute resource has a Name and InstanceType or Instances")
        counts = all(int(r.get("MinCount", 0)) <= int(r.get("MaxCount", 10)) for r in crs)
        c.check(counts, f"{rel}: queue '{name}': MinCount <= MaxCount")
        if "AllocationStrategy" in q:
            strat = q["AllocationStrategy"]
            c.check(strat in AWS_ALLOCATION and (cap == "SPOT" or strat == "lowest-price"),
                    f"{rel}: queue '{name}' AllocationStrategy valid for {cap}", f"{strat}")
        if name == SPOT:
            types = [t for r in crs for t in aws_instance_types(r)]
            c.check(types and all(AWS_GPU_INSTANCE.match(str(t)) for t in types),
                    f"{rel}: the '{SPOT}' queue has GPU instances (g*/p*)", f"{types}")
        for key, script, _ in aws_scripts(q.get("CustomActions")):
            c.check(re.match(r"^(s3|https)://", str(script)), f"{rel}: queue '{name}' {key} script is s3:// or https://",
                    f"{script}")
        setups[name] = ([(NODE_SETUP, [str(a) for a in args]) for key, script, args in aws_scripts(q.get("CustomActions"))
                         if key == "OnNodeConfigured" and str(script).endswith("/node-setup.sh")], [])
    storage = [s for s in as_list(cfg.get("SharedStorage")) if isinstance(s, dict)]
    if c.check(storage, f"{rel}: SharedStorage present"):
        c.check(all(str(s.get("MountDir", "")).startswith("/") and s.get("Name") and s.get("StorageType") in AWS_STORAGE
                    for s in storage), f"{rel}: every SharedStorage has Name, StorageType and a MountDir",
                f"{storage}")
    return spot_of, setups


# ----------------------------------------------------------------------------------------------
# The node setup: which partitions run it and how, and the script itself

def check_node_setup_calls(rel, spot_of, setups, c):
    """Every partition/queue runs cloud-hpc/node-setup.sh once: the spot (GPU) ones with --gpu, the
    on-demand (CPU) one without; no compute node's inline script installs -dev packages."""
    for name in sorted(setups):
        calls, inline = setups[name]
        if not c.check(len(calls) == 1, f"{rel}: partition '{name}' runs {NODE_SETUP} once on each new node",
                       f"calls {calls}"):
            continue
        path, args = calls[0]
        c.check(path == NODE_SETUP, f"{rel}: partition '{name}' node setup is {NODE_SETUP}", f"{path}")
        if spot_of.get(name):
            c.check("--gpu" in args, f"{rel}: GPU partition '{name}' runs the node setup with --gpu "
                    "(CUDA 13 runtime, cuBLAS, cuDNN 9)", f"args {args}")
        else:
            c.check("--gpu" not in args, f"{rel}: CPU partition '{name}' runs the node setup without --gpu",
                    f"args {args}")
        dev = [m.group(0)[-60:] for script in inline for m in [DEV_PACKAGE.search(script)] if m]
        c.check(not dev, f"{rel}: partition '{name}' installs no -dev packages at boot", f"{dev}")


STUB = r"""#!/bin/bash
# Fake apt-get, dpkg, dpkg-query, curl, ldconfig, logger, nvidia-smi for node-setup.sh.
name=$(basename "$0"); state=${STUB_STATE:?}; echo "$name $*" >>"$state/calls"
case $name in
  apt-get) [[ -n ${STUB_APT_FAIL:-} ]] && { echo "E: fake failure" >&2; exit 100; }
           if [[ " $* " == *" install "* ]]; then
             for a in "$@"; do case $a in -*|install|*=*) ;; *) echo "$a" >>"$state/installed" ;; esac; done
           fi ;;
  dpkg) [[ $1 == -i ]] && echo cuda-keyring >>"$state/installed" ;;
  dpkg-query) grep -qx "${!#}" "$state/installed" 2>/dev/null && printf 'install ok installed' || exit 1 ;;
  curl) while (($#)); do [[ $1 == -o ]] && : >"$2"; shift; done ;;
  ldconfig) if [[ " $* " == *" -p "* ]]; then
              for l in libdnnl.so.2 libmpi.so.40 libhdf5_serial.so.103 libcrypto.so.3 libcudart.so.13 \
                       libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
                printf '\t%s (libc6,x86-64) => /usr/lib/%s\n' "$l" "$l"
              done
            fi ;;
  nvidia-smi) echo "${STUB_DRIVER:-580.65.06}" ;;
esac
exit 0
"""


def check_node_setup_script(repo, c):
    script = os.path.join(repo, NODE_SETUP)
    if not c.check(os.access(script, os.X_OK), f"{NODE_SETUP} exists and is executable"):
        return
    r = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    c.check(r.returncode == 0, f"{NODE_SETUP}: bash -n", r.stderr.strip())
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", script], capture_output=True, text=True)
        c.check(r.returncode == 0, f"{NODE_SETUP}: shellcheck", (r.stdout + r.stderr).strip()[-800:])
    else:
        print(f"info: shellcheck not installed: {NODE_SETUP} not linted (apt-get install shellcheck)")
    with open(script) as f:
        text = f.read()
    c.check(text.startswith("#!") and ("set -Eeuo pipefail" in text or "set -euo pipefail" in text),
            f"{NODE_SETUP}: set -euo pipefail")

    with tempfile.TemporaryDirectory(prefix="mt-node-setup.") as tmp:
        releases = {}
        for distro, body in (("debian12", 'ID=debian\nVERSION_ID="12"\n'),
                             ("ubuntu2204", 'ID=ubuntu\nVERSION_ID="22.04"\n'),
                             ("rocky8", 'ID="rocky"\nVERSION_ID="8.10"\n')):
            releases[distro] = os.path.join(tmp, f"os-release.{distro}")
            with open(releases[distro], "w") as f:
                f.write(body.replace("\\n", "\n"))

        def dry(*args):
            return subprocess.run([script, "--dry-run", *args], capture_output=True, text=True, timeout=30)

        # --dry-run: the packages, per role and distribution.
        for distro in ("debian12", "ubuntu2204"):
            r = dry("--gpu", "--os-release", releases[distro], "--driver-version", "580.65.06")
            out = r.stdout
            pkgs = " ".join(l for l in out.splitlines() if l.startswith("packages"))
            c.check(r.returncode == 0 and all(p in pkgs.split() for p in GPU_PACKAGES),
                    f"{NODE_SETUP} --dry-run --gpu ({distro}) lists the CUDA 13 runtime, cuBLAS and cuDNN 9 packages",
                    f"rc {r.returncode}: {pkgs or r.stderr[-300:]}")
            c.check(f"/compute/cuda/repos/{distro}/x86_64/cuda-keyring_1.1-1_all.deb" in out,
                    f"{NODE_SETUP} --dry-run --gpu ({distro}) sets up NVIDIA's {distro} repository with cuda-keyring")
            c.check("cuda-compat-13-0" not in pkgs, f"{NODE_SETUP} --dry-run --gpu ({distro}): no cuda-compat with an R580 driver")
        r = dry("--os-release", releases["debian12"])
        pkgs = " ".join(l for l in r.stdout.splitlines() if l.startswith("packages")).split()
        c.check(r.returncode == 0 and "libdnnl2" in pkgs and "libopenmpi3" in pkgs
                and not any(p in pkgs for p in GPU_PACKAGES) and "cuda-keyring" not in r.stdout,
                f"{NODE_SETUP} --dry-run (CPU) lists the run-time libraries and nothing of CUDA", f"{pkgs}")
        all_pkgs = [w for l in r.stdout.splitlines() if l.startswith("+ ") and " install " in l for w in l.split()]
        c.check(all_pkgs and not [p for p in all_pkgs if p.endswith("-dev")],
                f"{NODE_SETUP} installs no -dev package", f"{all_pkgs}")
        r = dry("--gpu", "--os-release", releases["debian12"], "--driver-version", "550.90.12")
        c.check(r.returncode == 0 and "cuda-compat-13-0" in r.stdout and "/usr/local/cuda-13.0/compat" in r.stdout,
                f"{NODE_SETUP} --dry-run --gpu with a R550 driver adds cuda-compat-13-0 and its loader path")
        r = dry("--gpu", "--os-release", releases["rocky8"])
        c.check(r.returncode != 0 and "ERROR" in r.stderr and "not supported" in r.stderr,
                f"{NODE_SETUP} fails with a message on an unsupported distribution", f"rc {r.returncode}")

        # A real run in a scratch root against fake commands: steps, timing log, idempotence, failure.
        bindir, state, root = (os.path.join(tmp, d) for d in ("bin", "state", "root"))
        for d in (bindir, state, os.path.join(root, "etc")):
            os.makedirs(d)
        shutil.copy(releases["debian12"], os.path.join(root, "etc", "os-release"))
        stub = os.path.join(bindir, "stub")
        with open(stub, "w") as f:
            f.write(STUB)
        os.chmod(stub, 0o755)
        for n in ("apt-get", "dpkg", "dpkg-query", "curl", "ldconfig", "logger", "nvidia-smi"):
            os.symlink("stub", os.path.join(bindir, n))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), STUB_STATE=state,
                   STUB_DRIVER="550.90.12", TMPDIR=tmp)
        calls_file = os.path.join(state, "calls")

        def real(**extra):
            if os.path.exists(calls_file):
                os.unlink(calls_file)
            r = subprocess.run([script, "--gpu", "--root", root], capture_output=True, text=True, timeout=30,
                               env=dict(env, **extra))
            calls = open(calls_file).read() if os.path.exists(calls_file) else ""
            return r, calls

        r, calls = real()
        installs = [l for l in calls.splitlines() if l.startswith("apt-get") and " install " in l]
        c.check(r.returncode == 0, f"{NODE_SETUP} --gpu (fake apt, R550 driver) succeeds", r.stderr[-500:])
        c.check(any(all(p in l.split() for p in GPU_PACKAGES + ("cuda-compat-13-0",)) for l in installs),
                f"{NODE_SETUP} --gpu installs cuDNN 9, cuBLAS, the CUDA runtime (and cuda-compat) with apt-get",
                f"{installs}")
        c.check("dpkg -i " in calls and "cuda-keyring" in calls, f"{NODE_SETUP} --gpu installs cuda-keyring")
        conf = os.path.join(root, "etc", "ld.so.conf.d", "00-mpi_trainer-cuda.conf")
        lines = open(conf).read().split() if os.path.exists(conf) else []
        c.check(lines == ["/usr/local/cuda-13.0/compat", "/usr/local/cuda-13.0/targets/x86_64-linux/lib"],
                f"{NODE_SETUP} --gpu puts the compat libcuda first, then CUDA 13's libraries, on the loader path",
                f"{lines}")
        logf = os.path.join(root, "var", "log", "mpi_trainer-node-setup.log")
        log = open(logf).read() if os.path.exists(logf) else ""
        steps = re.findall(r"step (\S+): done in [0-9.]+ s", log)
        c.check(steps == ["detect", "runtime", "nvidia-repo", "cuda", "ldpath", "verify"]
                and re.search(r"node ready: total [0-9.]+ s", log),
                f"{NODE_SETUP} logs each step's seconds and the total to its log file", f"steps {steps}")
        c.check("logger -t mpi_trainer-node-setup" in calls, f"{NODE_SETUP} logs to the journal (logger)")
        r, calls = real()
        c.check(r.returncode == 0 and " install " not in calls and "dpkg -i" not in calls,
                f"{NODE_SETUP} is idempotent: a second run installs nothing",
                f"rc {r.returncode}: {[l for l in calls.splitlines() if 'install' in l or 'dpkg -i' in l]}")
        shutil.rmtree(state)
        os.makedirs(state)
        r, _ = real(STUB_APT_FAIL="1")
        c.check(r.returncode != 0 and re.search(r"ERROR: step 'runtime' failed .* total [0-9.]+ s", r.stderr),
                f"{NODE_SETUP} exits non-zero naming the failed step when apt-get fails", r.stderr[-300:])


CHECKS = Checks()


def main():
    if len(sys.argv) != 2:
        print("usage: test_cloud_hpc.py REPO_ROOT")
        return 2
    repo = sys.argv[1]
    c = CHECKS

    sbatches = sorted(glob.glob(os.path.join(repo, "slurm", "*.sbatch")))
    used = {}
    for path in sbatches:
        for p in sbatch_partitions(path):
            used.setdefault(p, []).append(os.path.relpath(path, repo))
    train = os.path.join(repo, "slurm", "train.sbatch")
    train_parts = sbatch_partitions(train) if os.path.exists(train) else []
    c.check(train_parts, "slurm/train.sbatch names its partition (#SBATCH --partition)", "none found")
    print(f"info: partitions in slurm/*.sbatch: {dict(sorted(used.items()))}")

    configs = [(rel, "gcp") for rel in GCP_FILES] + [(rel, "aws") for rel in AWS_FILES]
    for rel, kind in configs:
        doc = load_yaml(repo, rel, c)
        if doc is None:
            continue
        spot_of, setups = check_gcp(rel, doc, c) if kind == "gcp" else check_aws(rel, doc, c)
        check_node_setup_calls(rel, spot_of, setups, c)
        for p, files in sorted(used.items()):
            c.check(p in spot_of, f"{rel}: partition '{p}' (used by {', '.join(files)}) exists",
                    f"has {sorted(spot_of)}")
        for p in train_parts:
            c.check(spot_of.get(p) is True, f"{rel}: train.sbatch's partition '{p}' is a spot partition")
        c.check(spot_of.get(ONDEMAND) is False, f"{rel}: the on-demand partition '{ONDEMAND}' exists for the parameter server")

    # The watcher the full configs install is there and the configs call it the way it expects.
    watch = os.path.join(repo, "cloud-hpc", "preemption-watch.sh")
    c.check(os.access(watch, os.X_OK), "cloud-hpc/preemption-watch.sh exists and is executable")
    gfull = load_yaml_quiet(repo, GCP_FILES[1])
    if gfull is not None:
        mods = {as_dict(m).get("id"): as_dict(m) for g in as_list(gfull.get("deployment_groups"))
                for m in as_list(as_dict(g).get("modules"))}
        spot_sets = [m for m in mods.values()
                     if "nodeset" in str(m.get("source")) and as_dict(m.get("settings")).get("enable_spot_vm")]
        # Each spot nodeset's startup scripts: its inline startup_script and its startup-script modules' runners.
        scripts = [" ".join([str(as_dict(m.get("settings")).get("startup_script", ""))]
                            + [str(r.get("content", "")) for u in as_list(m.get("use")) for r in gcp_runners(mods.get(u))])
                   for m in spot_sets]
        c.check(scripts and all("/preemption-watch.sh" in str(s) and "--install --provider gce" in str(s)
                                for s in scripts),
                f"{GCP_FILES[1]}: the spot nodesets' startup script installs the watcher for gce")

    check_node_setup_script(repo, c)
    afull = load_yaml_quiet(repo, AWS_FILES[1])
    if afull is not None:
        spotq = [q for q in as_list(as_dict(afull.get("Scheduling")).get("SlurmQueues"))
                 if as_dict(q).get("Name") == SPOT]
        calls = [(s, a) for q in spotq for _, s, a in aws_scripts(as_dict(q).get("CustomActions"))
                 if str(s).endswith("/preemption-watch.sh")]
        c.check(calls and all(a[:3] == ["--install", "--provider", "ec2"] for _, a in calls),
                f"{AWS_FILES[1]}: the spot queue runs preemption-watch.sh --install --provider ec2 on each node")

    print(f"{c.passed} passed, {c.failed} failed")
    return 0 if c.failed == 0 else 1


def load_yaml_quiet(repo, rel):
    try:
        with open(os.path.join(repo, rel)) as f:
            doc = yaml.safe_load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, yaml.YAMLError):
        return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a broken file must give a message, not a traceback
        CHECKS.check(False, "the checks ran to the end", f"{type(e).__name__}: {e}")
        print(f"{CHECKS.passed} passed, {CHECKS.failed} failed")
        sys.exit(1)
