"""What the GPU image's layout and `doctor` rely on, without the image: flash-attn-4 in a directory of its own joins
sys.path only after xformers.ops has probed for `flash_attn`; FlashAttention 2 left out is named as not carried;
and FlashInfer's kernels are looked for where FlashInfer itself would load them from."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import attnbench.backends.flashinfer as fi_adapter
import attnbench.backends.flashinfer_kernels as fi_kernels
from attnbench.backends import layout
from attnbench.backends.flash import IMAGE_FLASH_ATTN_2, FlashAttn2
from attnbench.backends.flashinfer import FlashInferBackend
from attnbench.backends.flashinfer_kernels import kernel_files, nvcc_path
from attnbench.cli import doctor

# A stand-in xformers whose ops module records, at its import, whether `flash_attn` could be found (xformers 0.0.35's
# ops/fmha/flash.py probes with importlib.util.find_spec("flash_attn") at import).
XFORMERS_OPS = "import importlib.util\nFOUND_FLASH_ATTN = importlib.util.find_spec('flash_attn') is not None\n"


def flash_attn_4_dir(root: Path) -> Path:
    """A directory laid out as `pip install --target` leaves flash-attn-4: flash_attn/cute, no
    flash_attn/__init__.py."""
    (root / "flash_attn" / "cute").mkdir(parents=True)
    (root / "flash_attn" / "cute" / "__init__.py").write_text("FLASH_ATTN_4 = True\n")
    return root


@pytest.fixture
def clean_imports(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """sys.path and the stand-in modules are put back after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    names = ("xformers", "xformers.ops", "flash_attn", "flash_attn.cute")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    yield monkeypatch
    for name in names:
        sys.modules.pop(name, None)
    sys.modules.update(saved)


def test_flash_attn_4_joins_sys_path_after_xformers_ops_has_probed(tmp_path: Path, clean_imports) -> None:  # type: ignore[no-untyped-def]
    stand_in = tmp_path / "site"
    (stand_in / "xformers").mkdir(parents=True)
    (stand_in / "xformers" / "__init__.py").write_text("")
    (stand_in / "xformers" / "ops.py").write_text(XFORMERS_OPS)
    sys.path.insert(0, str(stand_in))
    fa4 = flash_attn_4_dir(tmp_path / "flash-attn-4")

    assert layout.add_flash_attn_4_path({}) is None  # unset: nothing to add
    assert layout.add_flash_attn_4_path({layout.FLASH_ATTN_4_PATH: str(tmp_path / "absent")}) is None
    assert layout.add_flash_attn_4_path({layout.FLASH_ATTN_4_PATH: str(fa4)}) == str(fa4)
    assert sys.path[-1] == str(fa4)
    assert sys.modules["xformers.ops"].FOUND_FLASH_ATTN is False, "xformers.ops probed with flash-attn-4 findable"
    import flash_attn.cute  # noqa: F401 - FlashAttention 4 is importable afterwards

    assert sys.modules["flash_attn.cute"].FLASH_ATTN_4 is True
    assert layout.add_flash_attn_4_path({layout.FLASH_ATTN_4_PATH: str(fa4)}) is None  # already there
    assert sys.path.count(str(fa4)) == 1


def test_flash_attn_2_left_out_of_an_image_is_named_as_not_carried(tmp_path: Path, clean_imports) -> None:  # type: ignore[no-untyped-def]
    monkeypatch = clean_imports
    sys.path.append(str(flash_attn_4_dir(tmp_path)))
    reason = FlashAttn2().availability("cuda")
    assert reason is not None and "flash-attn (FlashAttention 2) is not installed" in reason
    assert "namespace package flash-attn-4 installs flash_attn/cute into" in reason and str(tmp_path) in reason
    monkeypatch.setenv(IMAGE_FLASH_ATTN_2, "no")
    assert FlashAttn2().availability("cuda").startswith("not carried by this image (built with FLASH_ATTN_2=no")


def flashinfer_env(monkeypatch: pytest.MonkeyPatch, root: Path, providers: tuple = ()) -> types.SimpleNamespace:
    """A stand-in flashinfer.jit.env with FlashInfer 0.7.2.post1's names, its folders under `root`."""
    env = types.SimpleNamespace(FLASHINFER_AOT_DIR=root / "data" / "aot", FLASHINFER_JIT_DIR=root / "cached_ops",
                                FLASHINFER_CUBIN_DIR=root / "cubins", FLASHINFER_AOT_PROVIDERS=providers)
    env.FLASHINFER_AOT_DIRS = (env.FLASHINFER_AOT_DIR, *(p.jit_cache_dir for p in providers))
    package = types.ModuleType("flashinfer")
    package.__path__ = []  # type: ignore[attr-defined]
    jit = types.ModuleType("flashinfer.jit")
    jit.__path__ = []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", jit)
    monkeypatch.setitem(sys.modules, "flashinfer.jit.env", env)
    return env


def module(folder: Path, name: str) -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / f"{name}.so").write_bytes(b"\x7fELF")


def test_flashinfer_kernels_absent_without_a_precompiled_module_or_nvcc(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    flashinfer_env(monkeypatch, tmp_path)
    monkeypatch.setattr(fi_kernels, "nvcc_path", lambda: None)
    (tmp_path / "cubins" / "fmha").mkdir(parents=True)
    (tmp_path / "cubins" / "fmha" / "k.sm100f.cubin").write_bytes(b"")
    found = kernel_files()
    assert found["state"] == "absent" and found["precompiled"] == 0 and found["nvcc"] is None and found["cubins"] == 1
    assert found["summary"].startswith("no kernels: no precompiled module (no flashinfer-jit-cache installed")
    assert "no nvcc to JIT-compile one" in found["summary"]
    # on a GPU the backend is then missing, with that reason, instead of failing at its first call
    monkeypatch.setattr(fi_adapter, "device_problem", lambda *_: None)
    assert FlashInferBackend().availability("cuda") == "FlashInfer has " + found["summary"]

    module(tmp_path / "cached_ops", "single_prefill_bf16")  # compiled by an earlier run into the cache volume
    assert kernel_files()["state"] == "jit-cache"
    monkeypatch.setattr(fi_kernels, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    assert kernel_files()["state"] == "jit" and FlashInferBackend().availability("cuda") is None


def test_flashinfer_kernels_precompiled_by_a_jit_cache_provider(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    provider = types.SimpleNamespace(distribution="flashinfer-jit-cache-sm90a", version="0.7.2.post1+cu129",
                                     cuda_architectures=frozenset({"sm90a"}), jit_cache_dir=tmp_path / "provider")
    flashinfer_env(monkeypatch, tmp_path, (provider,))
    monkeypatch.setattr(fi_kernels, "nvcc_path", lambda: None)
    module(tmp_path / "provider", "batch_prefill_bf16")
    module(tmp_path / "provider", "batch_decode_bf16")
    found = kernel_files()
    assert found["state"] == "precompiled" and found["precompiled"] == 2
    assert found["summary"] == "2 precompiled modules (flashinfer-jit-cache-sm90a 0.7.2.post1+cu129 (sm90a))"


def test_flashinfer_kernels_unknown_for_a_module_without_flashinfers_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))  # a stand-in: no jit package
    monkeypatch.delitem(sys.modules, "flashinfer.jit.env", raising=False)
    found = kernel_files()
    assert found["state"] == "unknown" and found["summary"].startswith("cannot read flashinfer.jit.env")


def test_nvcc_is_looked_for_where_flashinfers_jit_looks(tmp_path: Path) -> None:
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert nvcc_path({"CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}) == str(nvcc)
    assert nvcc_path({"PATH": str(nvcc.parent)}) == str(nvcc)
    assert nvcc_path({"FLASHINFER_NVCC": str(nvcc), "PATH": ""}) == str(nvcc)
    empty = {"CUDA_HOME": str(tmp_path / "none"), "PATH": ""}
    assert nvcc_path(empty) in (None, "/usr/local/cuda/bin/nvcc")  # the fallback, where this machine has one


def test_doctor_shows_where_flashinfers_kernels_would_come_from() -> None:
    kernels = {"state": "absent", "summary": "no kernels: ..."}
    health = doctor.BackendHealth("flashinfer", "n/a", "flashinfer-python", "0.7.2.post1", "needs CUDA", None, True,
                                  {}, kernels)
    diagnosis = doctor.Diagnosis("cpu", {}, [health])
    assert "kernels      absent: no kernels: ..." in [line.strip() for line in doctor.format_text(diagnosis)]
    assert diagnosis.to_dict()["backends"][0]["kernels"] == kernels


def test_flashinfer_kernels_built_ahead_per_arch_with_what_is_missing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/flashinfer_aot.py's manifest in FlashInfer's AOT folder: doctor counts each arch's libraries."""
    import json

    flashinfer_env(monkeypatch, tmp_path)
    monkeypatch.setattr(fi_kernels, "nvcc_path", lambda: None)
    aot = tmp_path / "data" / "aot"
    archs = {"9.0a": [f"m{i}_sm90" for i in range(4)] + ["decode"], "10.0a": ["decode", "m1", "m2", "m3"]}
    for name in {n for names in archs.values() for n in names}:
        module(aot, name)
    (aot / fi_kernels.MANIFEST).write_text(json.dumps({"archs": archs, "suites": [], "unmapped": {}}))
    found = kernel_files()
    assert found["state"] == "precompiled" and found["precompiled"] == 8
    assert found["summary"] == f"5 for sm90a, 4 for sm100a built ahead in {aot}"
    (aot / "decode" / "decode.so").unlink()
    summary = kernel_files()["summary"]
    assert summary.startswith("4 for sm90a (1 of 5 missing), 3 for sm100a (1 of 4 missing)")
    assert summary.endswith("no nvcc to JIT the missing")
    monkeypatch.setattr(fi_kernels, "nvcc_path", lambda: "/opt/cuda/bin/nvcc")
    assert kernel_files()["summary"].endswith("the missing JIT-compiled at first use by /opt/cuda/bin/nvcc")
