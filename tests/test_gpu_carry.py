"""Carrying wheels to the lent GPU machine in batches (scripts/gpu_wheels.py cuts, scripts/gpu-carry.sh joins and
installs), run here on small wheels made for the test: each call sees only its own batch, a wheel larger than a
batch comes back byte for byte, and wheels that share a top-level folder (cutlass-dsl's -libs-base and -libs-cu13
share `nvidia_cutlass_dsl/`) are installed together, none of their files lost."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def make_wheel(folder: Path, name: str, files: dict[str, bytes], requires: tuple[str, ...] = (),
               requires_python: str | None = None) -> Path:
    """A pure-Python wheel holding `files` (paths inside site-packages)."""
    dist = f"{name.replace('-', '_')}-1.0"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    meta += [f"Requires-Python: {requires_python}"] if requires_python else []
    wheel = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = {**files, f"{dist}.dist-info/METADATA": "\n".join(meta).encode() + b"\n",
               f"{dist}.dist-info/WHEEL": wheel}
    record = "".join(f"{path},,\n" for path in entries) + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for inner, data in {**entries, f"{dist}.dist-info/RECORD": record.encode()}.items():
            z.writestr(inner, data)
    return path


def cut(out: Path, batch_mib: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_wheels.py"), str(out), "0", batch_mib],
                          capture_output=True, text=True, timeout=120)


def carry(n: int, out: Path, machine: Path) -> subprocess.CompletedProcess[str]:
    """scripts/gpu-carry.sh N as a device call sees it: a fresh checkout holding batch N alone."""
    wheels = machine / "checkout-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.copytree(out / f"batch{n}", wheels / f"batch{n}")
    env = {**os.environ, "WHEELS": str(wheels), "GPU_CARRY_STAGE": str(machine / "stage"),
           "GPU_CHECK_SITE": str(machine / "site"), "PYTHON": sys.executable, "PIP_NO_INDEX": "1"}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-carry.sh"), str(n)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    out = tmp_path / "whl"
    (out / "download").mkdir(parents=True)
    # ~60 KB each: no 0.1 MiB batch holds both, so the two halves of `alpha/` arrive in different calls
    make_wheel(out / "download", "alpha-libs-base", {"alpha/__init__.py": b"", "alpha/base.bin": os.urandom(60_000)})
    make_wheel(out / "download", "alpha-libs-cu13", {"alpha/cu13.bin": os.urandom(60_000)},
               requires=("alpha-libs-base",))
    big = os.urandom(300_000)  # incompressible: the wheel stays ~300 KB, three 0.1 MiB batches' worth
    make_wheel(out / "download", "big-kernels", {"big_kernels/__init__.py": b"", "big_kernels/blob.bin": big},
               requires=("torch>=2.10", "numpy"))
    return out


@pytest.mark.slow
def test_batches_join_and_install_every_wheel(wheels: Path, tmp_path: Path) -> None:
    result = cut(wheels, "0.1")
    assert result.returncode == 0, result.stderr
    batches = sorted(wheels.glob("batch*"))
    assert len(batches) >= 3
    limit = int(0.1 * (1 << 20))
    for batch in batches:  # each under the limit, and no batch holds two parts of one wheel
        payload = [p for p in batch.iterdir() if p.name != "manifest.tsv"]
        assert sum(p.stat().st_size for p in payload) <= limit
        owners = [p.name.split(".whl.part")[0] for p in payload if ".whl.part" in p.name]
        assert len(owners) == len(set(owners))
    alpha = [b.name for b in batches for p in b.iterdir() if p.name.startswith("alpha_libs")]
    assert len(alpha) == 2 and alpha[0] != alpha[1]  # the shared folder's two wheels in two batches
    big = next((wheels / "download").glob("big_kernels-*.whl"))
    assert "travels in 3 parts" in result.stdout and big.name in result.stdout
    machine = tmp_path / "machine"
    for n in range(1, len(batches) + 1):
        done = carry(n, wheels, machine)
        assert done.returncode == 0, done.stderr
        if n < len(batches):
            assert "still missing" in done.stdout and not (machine / "site").exists()  # nothing installed yet
    assert f"installed 3 wheels into {machine / 'site'}" in done.stdout
    assert (machine / "stage" / big.name).read_bytes() == big.read_bytes()  # re-joined byte for byte
    site = machine / "site"
    assert (site / "alpha" / "base.bin").is_file() and (site / "alpha" / "cu13.bin").is_file()  # both wheels' files
    assert (site / "big_kernels" / "blob.bin").stat().st_size == 300_000


def test_a_part_that_changed_on_the_way_is_refused(wheels: Path, tmp_path: Path) -> None:
    assert cut(wheels, "0.1").returncode == 0
    batches = sorted(wheels.glob("batch*"))
    part = next(p for p in batches[0].iterdir() if ".whl.part" in p.name)
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    machine = tmp_path / "machine"
    results = [carry(n, wheels, machine) for n in range(1, len(batches) + 1)]
    assert results[-1].returncode == 1
    assert "does not match the manifest" in results[-1].stderr
    assert not (machine / "site").exists()


@pytest.mark.parametrize("requires, requires_python, words", [
    (("torch<2.11",), None, "requires torch<2.11, but torch 2.11.0 is what it gets"),
    (("not-on-the-machine>=1",), None, "requires not-on-the-machine>=1, which is neither carried nor on the machine"),
    ((), "<3.12", "Requires-Python <3.12 excludes 3.12"),
])
def test_a_wheel_that_does_not_fit_the_machine_is_named(wheels: Path, requires: tuple[str, ...],
                                                        requires_python: str | None, words: str) -> None:
    make_wheel(wheels / "download", "misfit", {"misfit/__init__.py": b""}, requires, requires_python)
    result = cut(wheels, "0.1")
    assert result.returncode != 0 and words in result.stderr, result.stderr


def test_a_marker_for_another_python_is_not_a_requirement(wheels: Path) -> None:
    make_wheel(wheels / "download", "old-python-shim", {"shim/__init__.py": b""},
               ('backports.strenum; python_version < "3.11"',))
    result = cut(wheels, "0.1")
    assert result.returncode == 0, result.stderr


def test_the_manifest_names_each_wheels_digest(wheels: Path) -> None:
    assert cut(wheels, "0.1").returncode == 0
    rows = [line.split("\t") for line in (wheels / "manifest.tsv").read_text().splitlines()[1:]]
    for name, digest, size, _parts in rows:
        wheel = wheels / "download" / name
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == digest and int(size) == wheel.stat().st_size
    assert {int(parts) for *_, parts in rows} == {0, 3}
