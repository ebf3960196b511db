"""FlashInfer's modules built ahead without a GPU: the names scripts/flashinfer_aot.py builds are those an H200 built
at run time for suites/gpu-check.yaml (reports/NVIDIA-H200-20261204-fijit/cached_ops.txt)."""

from __future__ import annotations

import importlib.util
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reports" / "NVIDIA-H200-20261204-fijit"


def script():
    spec = importlib.util.spec_from_file_location("flashinfer_aot_script", ROOT / "scripts" / "flashinfer_aot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_flashinfer() -> None:
    """Skip without the real flashinfer-python: another test's stand-in `flashinfer` module may sit in sys.modules."""
    try:
        metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")


def h200_modules() -> set[str]:
    """The modules the H200 built (modules.txt: `<time> <bytes> <path of the .so>` a line), each in its own folder of
    cached_ops.txt (`ls -la` of the cache)."""
    built = {Path(line.split()[2]).parent.name for line in (H200 / "modules.txt").read_text().splitlines() if line}
    folders = {line.split()[-1] for line in (H200 / "cached_ops.txt").read_text().splitlines()[1:]}
    assert built <= folders
    return built


def test_gpu_check_modules_are_the_h200s():
    needs_flashinfer()
    found, unmapped = script().modules_for([str(ROOT / "suites" / "gpu-check.yaml")], "9.0a")
    assert set(found) == h200_modules()
    assert len(found) == 5 and unmapped == []


def test_sm100_takes_fa2_and_says_what_it_does_not_map():
    needs_flashinfer()
    found, unmapped = script().modules_for([str(ROOT / "suites" / "gpu-check.yaml")], "10.0a")
    assert found and not any(name.endswith("_sm90") for name in found)
    assert unmapped and all("ragged prefill on SM100" in line for line in unmapped)


def test_bad_arch_is_one_line_and_exit_2(capsys):
    assert script().main(["--arch", "sm90", "--list", "suites/gpu-check.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: 'sm90' is not a CUDA arch like 9.0a"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
