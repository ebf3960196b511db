"""Carrying attnbench's libraries to the lent GPU machine (scripts/gpu_wheels.py installs the wheels into a site for
that machine, packs and cuts it; scripts/gpu-carry.sh joins, checks and unpacks it; scripts/gpu-site makes it a site
directory), run here on small wheels made for the test: each call sees only its own batch, the site is whole only
after the last one, wheels that share a top-level folder (cutlass-dsl's -libs-base and -libs-cu13 share
`nvidia_cutlass_dsl/`) keep every file, and a package reached only through a .pth file imports."""

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
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_wheels.py"), "cut", str(out), "0", batch_mib],
                          capture_output=True, text=True, timeout=300)


def carry(n: int, out: Path, machine: Path) -> subprocess.CompletedProcess[str]:
    """scripts/gpu-carry.sh N as a device call sees it: a fresh checkout holding batch N alone."""
    wheels = machine / "checkout-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.copytree(out / f"batch{n}", wheels / f"batch{n}")
    env = {**os.environ, "WHEELS": str(wheels), "GPU_CARRY_STAGE": str(machine / "stage"),
           "GPU_CHECK_SITE": str(machine / "site"), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-carry.sh"), str(n)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    out = tmp_path / "whl"
    (out / "download").mkdir(parents=True)
    # both install into alpha/; the -libs-base wheel reaches alpha_dsl only through its .pth file, as cutlass-dsl does
    make_wheel(out / "download", "alpha-libs-base", {
        "alpha/__init__.py": b"", "alpha/base.bin": os.urandom(60_000),
        "alpha/dsl_packages/alpha_dsl/__init__.py": b"NAME = 'reached through the .pth file'\n",
        "alpha_dsl_packages.pth": b"import sys, os, alpha; sys.path.insert(0, os.path.join(alpha.__path__[0], "
                                  b"'dsl_packages'))\n"})
    make_wheel(out / "download", "alpha-libs-cu13", {"alpha/cu13.bin": os.urandom(60_000)},
               requires=("alpha-libs-base",))
    big = os.urandom(300_000)  # incompressible: the archive stays ~420 KB, four to five 0.1 MiB batches' worth
    make_wheel(out / "download", "big-kernels", {"big_kernels/__init__.py": b"", "big_kernels/blob.bin": big},
               requires=("torch>=2.10", "numpy"))
    return out


@pytest.mark.slow
def test_the_site_arrives_whole_after_the_last_batch_and_its_pth_files_are_read(wheels: Path, tmp_path: Path) -> None:
    result = cut(wheels, "0.1")
    assert result.returncode == 0, result.stderr
    batches = sorted(wheels.glob("batch*"))
    assert len(batches) >= 4
    for batch in batches:  # one part each, under the limit
        (part,) = [p for p in batch.iterdir() if p.name != "manifest.tsv"]
        assert part.stat().st_size <= int(0.1 * (1 << 20))
    machine = tmp_path / "machine"
    for n in range(1, len(batches) + 1):
        done = carry(n, wheels, machine)
        assert done.returncode == 0, done.stderr
        if n < len(batches):
            assert f"{n} of {len(batches)} parts" in done.stdout and not (machine / "site").exists()
    assert f"3 distributions) into {machine / 'site'}" in done.stdout
    site = machine / "site"
    assert (site / "alpha" / "base.bin").is_file() and (site / "alpha" / "cu13.bin").is_file()  # both wheels' files
    blob = next((wheels / "site").rglob("blob.bin")).read_bytes()
    assert (site / "big_kernels" / "blob.bin").read_bytes() == blob and len(blob) == 300_000
    probe = "import alpha_dsl; print(alpha_dsl.NAME)"
    bare = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(site)})
    assert bare.returncode != 0 and "No module named 'alpha_dsl'" in bare.stderr  # a PYTHONPATH folder: no .pth read
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'scripts' / 'gpu-site'}:{site}", "GPU_CHECK_SITE": str(site)}
    read = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert read.stdout.strip() == "reached through the .pth file", read.stderr


def test_a_part_that_changed_on_the_way_is_refused(wheels: Path, tmp_path: Path) -> None:
    assert cut(wheels, "0.1").returncode == 0
    batches = sorted(wheels.glob("batch*"))
    part = next(p for p in batches[0].iterdir() if ".part" in p.name)
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
    needs = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_wheels.py"), "needs", str(wheels)],
                           capture_output=True, text=True, timeout=60)
    assert needs.returncode == 0 and needs.stdout.strip() == "", needs.stdout


def test_what_is_fetched_is_the_test_extra_and_dependencies_the_machine_lacks() -> None:
    """From pyproject.toml, not a hand list: jsonschema (recommend's schema tests) and pydantic are fetched; pytest,
    hypothesis and jax are the machine's; xformers and the lint and docs tools are not carried, each with a reason."""
    wanted = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_wheels.py"), "want"], capture_output=True,
                            text=True, timeout=60).stdout.split()
    names = {w.split("=")[0].split(">")[0].split("<")[0] for w in wanted}
    assert {"jsonschema", "pydantic", "flash-attn-4", "flashinfer-python"} <= names
    assert not names & {"pytest", "hypothesis", "jax", "xformers", "ruff", "mkdocs", "torch"}


def test_the_manifest_names_the_archives_digest(wheels: Path) -> None:
    assert cut(wheels, "0.1").returncode == 0
    (row,) = [line.split("\t") for line in (wheels / "manifest.tsv").read_text().splitlines()[1:]]
    name, digest, size, parts = row
    archive = wheels / name
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == digest and int(size) == archive.stat().st_size
    assert int(parts) == len(list(wheels.glob("batch*")))
