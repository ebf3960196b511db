"""Check the wheels scripts/gpu-wheels.sh fetched against the H200 and cut them into carry batches.

    python3 scripts/gpu_wheels.py OUT TREE_BYTES [BATCH_MIB]

Reads OUT/download/*.whl; writes OUT/manifest.tsv (each wheel's name, sha256, size and how many parts it was cut
into) and OUT/batch1 ... OUT/batchN (each with a copy of the manifest), every batch under BATCH_MIB (default: what
a 64 MiB carry leaves beside a working tree of TREE_BYTES, less 2 MiB, at most 60 MiB). A wheel larger than a batch
is cut with `split -b` into equal parts that travel in different batches; scripts/gpu-carry.sh joins them.
Exits non-zero, naming the requirement, when a wheel's Requires-Python or Requires-Dist does not fit the machine.
"""
import hashlib
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

out, tree_bytes = Path(sys.argv[1]), int(sys.argv[2])
batch_mib = sys.argv[3] if len(sys.argv) > 3 else ""
MIB = 1 << 20
limit = int(float(batch_mib) * MIB) if batch_mib else min(60 * MIB, 64 * MIB - tree_bytes - 2 * MIB)

# On the machine, with their version where it is known (cuda-bindings: at least that): torch 2.11.0's own requirements
# (its PyPI metadata: cuda-bindings >=13.0.3,<14, nvidia-cudnn-cu13 9.19.0.56, triton 3.6.0, typing-extensions
# >=4.10 ...) and the image's packages.
MACHINE = {"torch": "2.11.0", "triton": "3.6.0", "cuda-bindings": "13.0.3", "nvidia-cudnn-cu13": "9.19.0.56"}
IMAGE = {"numpy", "einops", "ninja", "click", "requests", "tqdm", "tabulate", "packaging", "protobuf", "nvidia-ml-py",
         "typing-extensions", "cuda-pathfinder", "cuda-core", "filelock", "jinja2", "fsspec", "sympy", "networkx",
         "setuptools", "pyyaml"}
# Required by a wheel's metadata, deliberately not carried (pip installs --no-deps).
NOT_CARRIED = {
    "nvidia-cutlass-dsl-libs-cu12": "the CUDA 12 build; the machine is CUDA 13 and carries -libs-cu13 ([cu13])",
    "cuda-python": "a meta package over cuda-bindings, which torch 2.11 installs; the modules are cuda-bindings'",
    "cuda-tile": "flashinfer's cuTile kernels (not its attention paths)",
    "nccl4py": "flashinfer's communication kernels (not its attention paths)",
    "nccl-extensions": "flashinfer's communication kernels (not its attention paths)",
}
env = default_environment()
env.update(python_version="3.12", python_full_version="3.12.1", implementation_name="cpython",
           platform_python_implementation="CPython", sys_platform="linux", platform_system="Linux",
           platform_machine="x86_64", os_name="posix", extra="")

for old in [*out.glob("batch*"), *(out / "download").glob("*.whl.part*")]:  # a previous cut
    shutil.rmtree(old) if old.is_dir() else old.unlink()
wheels = sorted((out / "download").glob("*.whl"))
meta = {}
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(name).decode())
    meta[canonicalize_name(msg["Name"])] = (wheel, msg)
versions = {n: msg["Version"] for n, (_, msg) in meta.items()}
problems, notes = [], []
for name, (wheel, msg) in sorted(meta.items()):
    needs_python = msg.get("Requires-Python")
    if needs_python and not SpecifierSet(needs_python).contains("3.12"):
        problems.append(f"{wheel.name}: Requires-Python {needs_python} excludes 3.12")
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        dep = canonicalize_name(req.name)
        have = versions.get(dep) or MACHINE.get(dep)
        if have is not None:
            if not req.specifier.contains(Version(have), prereleases=True):
                problems.append(f"{name} {versions[name]} requires {req}, but {dep} {have} is what it gets")
        elif dep in IMAGE:
            if str(req.specifier):
                notes.append(f"{name} requires {req}: the image's {dep}, version not known here")
        elif dep in NOT_CARRIED:
            notes.append(f"{name} requires {req}: not carried ({NOT_CARRIED[dep]})")
        else:
            problems.append(f"{name} {versions[name]} requires {req}, which is neither carried nor on the machine")
for note in sorted(set(notes)):
    print(f"note: {note}")
if problems:
    sys.exit("gpu-wheels: the set does not fit the machine:\n  " + "\n  ".join(problems))

# Pieces: whole wheels, and parts of those over the batch size (each part a batch of its own).
pieces = []  # (size, path in download/, wheel it belongs to)
manifest = []
for wheel in wheels:
    size = wheel.stat().st_size
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if size <= limit:
        pieces.append((size, wheel, wheel.name))
        manifest.append((wheel.name, digest, size, 0))
        continue
    part_bytes = -(-size // -(-size // limit))  # as many parts as needed, of equal size
    subprocess.run(["split", "-b", str(part_bytes), "-d", "-a", "2", str(wheel), f"{wheel}.part"], check=True)
    parts = sorted(wheel.parent.glob(f"{wheel.name}.part*"))
    pieces += [(p.stat().st_size, p, wheel.name) for p in parts]
    manifest.append((wheel.name, digest, size, len(parts)))
# First fit decreasing, two parts of one wheel never in one batch (each would overflow it anyway).
batches = []  # [bytes, [paths], {wheels}]
for size, path, owner in sorted(pieces, key=lambda p: -p[0]):
    for batch in batches:
        if batch[0] + size <= limit and (owner == path.name or owner not in batch[2]):
            break
    else:
        batch = [0, [], set()]
        batches.append(batch)
    batch[0] += size
    batch[1].append(path)
    batch[2].add(owner)
lines = ["# wheel\tsha256\tbytes\tparts (0: whole)"] + [f"{n}\t{d}\t{s}\t{p}" for n, d, s, p in manifest]
(out / "manifest.tsv").write_text("\n".join(lines) + "\n")
print(f"{len(wheels)} wheels, {sum(s for _, _, s, _ in manifest) / MIB:.1f} MiB; the working tree that travels is "
      f"{tree_bytes / MIB:.1f} MiB, so a batch holds at most {limit / MIB:.1f} MiB")
for index, (size, paths, _) in enumerate(batches, 1):
    folder = out / f"batch{index}"
    folder.mkdir()
    for path in paths:
        shutil.copy2(path, folder / path.name)
    shutil.copy2(out / "manifest.tsv", folder / "manifest.tsv")
    print(f"batch{index}: {size / MIB:5.1f} MiB  " + ", ".join(sorted(p.name for p in paths)))
for name, _, size, parts in manifest:
    if parts:
        print(f"{name} ({size / MIB:.1f} MiB) travels in {parts} parts")
n = len(batches)
print("on the device machine, back to back:")
for index in range(1, n + 1):
    tail = " && scripts/gpu-check.sh" if index == n else ""
    print(f'  run(carry=["{out}/batch{index}"], command="scripts/gpu-carry.sh {index}{tail}")')
