"""What the first GPU reading of attnbench found, held on CPU: roofs, recorded operators, pins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnbench.core.peaks import peak_for
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo, percent_of_peak
from tests.helpers import make_case


@pytest.mark.parametrize(("name", "bandwidth", "label"), [
    ("NVIDIA GH200 480GB", 4000.0, "GH200 96GB HBM3"),
    ("NVIDIA GH200 144G HBM3e", 4900.0, "GH200 144GB HBM3e"),
    ("NVIDIA H200", 4800.0, "H200 SXM"),
    ("NVIDIA H200 NVL", 4800.0, "H200 NVL"),
])
def test_gh200_is_not_judged_as_an_h200(name: str, bandwidth: float, label: str) -> None:
    peak = peak_for(name, "bfloat16")
    assert peak.bandwidth_gbs == bandwidth and peak.bandwidth_source == f"datasheet: {label}"


def test_fp32_on_tensor_cores_is_judged_against_the_tf32_roof() -> None:
    """3xTF32 reaches a third of the dense TF32 rate; the CUDA-core fp32 rate (67) would read 150%+."""
    case = make_case(device="cuda", dtype="float32", seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True)
    info = RunInfo("r", "t", "NVIDIA H200")
    plain, plain_extra = percent_of_peak(case, 100.0, 1.0, info)
    fast, fast_extra = percent_of_peak(case, 100.0, 1.0, info, "3xTF32")
    assert plain == pytest.approx(100 * 100.0 / 67.0) and plain_extra["peak_source"] == "datasheet: H200 SXM"
    assert fast == pytest.approx(100 * 100.0 / (494.5 / 3))
    assert fast_extra["peak_source"] == "datasheet: H200 SXM TF32 / 3 (fp32 as 3xTF32 on tensor cores)"
    assert percent_of_peak(case, 100.0, 1.0, RunInfo("r", "t", "NVIDIA B200"), "3xTF32")[0] is None  # TF32 unknown


def test_a_gpu_builds_the_flex_mask_compiled_only_when_the_eager_one_would_crowd_it() -> None:
    from attnbench.backends.flex import mask_is_compiled

    h200_free = 140 << 30
    assert not mask_is_compiled(make_case(seq_len=16384), "cuda", h200_free)  # 2.9 GB eagerly
    assert not mask_is_compiled(make_case(seq_len=32768), "cuda", h200_free)  # 11.8 GB
    assert mask_is_compiled(make_case(seq_len=65536), "cuda", h200_free)  # 47 GB: a third of the GPU
    assert mask_is_compiled(make_case(seq_len=32768), "cuda", 24 << 30)  # on a 24 GB card
    assert mask_is_compiled(make_case(seq_len=8192), "cpu") and not mask_is_compiled(make_case(seq_len=4096), "cpu")


def test_sdpa_efficient_says_how_it_computes_fp32_on_cuda_only() -> None:
    from attnbench.backends.sdpa import fp32_math

    assert fp32_math(make_case(device="cuda", dtype="float32"), "cuda", True) == {"fp32_math": "3xTF32"}
    assert fp32_math(make_case(device="cuda", dtype="bfloat16"), "cuda", True) == {}
    assert fp32_math(make_case(dtype="float32"), "cpu", True) == {}


def test_xformers_records_and_pins_its_backward_operator_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.backends.xformers_ops import XformersBackend
    from tests.helpers import measure_one
    from tests.test_xformers import _standin_module

    class StandinBwOp:
        NAME = "standinB"

    ops = _standin_module()
    seen: list[object] = []
    plain = ops.memory_efficient_attention

    def recording(*args: object, op: object = None, **kwargs: object) -> object:
        seen.append(op)
        return plain(*args, op=op, **kwargs)

    ops.memory_efficient_attention = recording
    ops.fmha._dispatch_bw = lambda inp, varlen_lse_packed: StandinBwOp
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    record = measure_one(make_case(dtype="float32", seq_len=40, heads=2, kv_heads=2, head_dim=16, causal=True,
                               mode="fwd_bwd"), XformersBackend())
    assert record.status == "ok", record.reason
    assert "fw op standinF, bw op standinB" in record.kernel
    assert seen and all(op[1] is StandinBwOp for op in seen)


def test_the_flash_extra_installs_with_xformers() -> None:
    """xformers 0.0.35 takes flash-attn only in [2.7.1, 2.8.4] (ops/fmha/flash.py), else calls itself not installed."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.version import Version

    extras = tomllib.loads(Path(__file__).parents[1].joinpath("pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    flash = next(Requirement(r) for r in extras["flash"] if Requirement(r).name == "flash-attn")
    assert not flash.specifier.contains(Version("2.7.0")) and not flash.specifier.contains(Version("2.8.5"))
    assert flash.specifier.contains(Version("2.7.1")) and flash.specifier.contains(Version("2.8.3"))
    xformers = next(Requirement(r) for r in extras["xformers"] if Requirement(r).name == "xformers")
    assert xformers.specifier.contains(Version("0.0.35"))


@pytest.mark.parametrize(("visible", "index", "physical"), [
    (None, 1, "1"), ("", 0, "0"), ("4,5,6,7", 0, "4"), ("4,5,6,7", 3, "7"), (" 2, 3", 1, "3"),
    ("GPU-a9a60faf-a839-1b91-a0fb-4017ebbc5d83,GPU-b1", 1, "GPU-b1"), ("MIG-3f2e", 0, "MIG-3f2e"),
])
def test_devices_map_through_the_visible_gpus(visible: str | None, index: int, physical: str) -> None:
    """--devices 0 under CUDA_VISIBLE_DEVICES=4,5,6,7 is physical GPU 4, never someone else's GPU 0."""
    from attnbench.run.devices import worker_env

    assert worker_env(index, visible) == {"CUDA_VISIBLE_DEVICES": physical}


def test_a_device_index_beyond_the_visible_list_is_one_clear_error() -> None:
    from attnbench.core.errors import AttnbenchError
    from attnbench.run.devices import physical_gpu

    with pytest.raises(AttnbenchError, match=r"CUDA_VISIBLE_DEVICES=4,5 makes 2 visible \(0..1\)"):
        physical_gpu(2, "4,5")


def test_a_sticky_cuda_error_is_recorded_and_the_rest_say_why_they_did_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """After an illegal memory access, releasing memory raises again: it must not escape, and with
    --no-isolate the later measurements are `skipped` naming the broken context instead of erroring."""
    import attnbench.run.measure as runner_mod
    from attnbench.backends.registry import default_registry
    from attnbench.backends.testing import Raising
    from attnbench.run.measure import InProcess
    from attnbench.run.recording import RunInfo
    from tests.helpers import ONE_SAMPLE

    def sticky(device: str, collect: bool = False) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(runner_mod, "release_memory", sticky)
    monkeypatch.setattr(runner_mod, "cuda_is_broken", lambda device: True)
    from attnbench.timing.timers import ClockTimer

    measurer = InProcess(ClockTimer(), Settings(RunInfo("r", "t"), ONE_SAMPLE))
    case = make_case()
    first = measurer.measure(case, Raising())
    assert first.status == "error"
    assert "while releasing memory: CUDA error: an illegal memory access" in first.reason
    second = measurer.measure(make_case(seq_len=32), default_registry().get("naive"))
    assert second.status == "skipped" and "broke this process's CUDA context" in second.reason


# ---- on a GPU (scripts/gpu-check.sh): what the first H200 run got wrong ---------------------------
def _cuda_case(**overrides: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = dict(device="cuda", dtype="bfloat16", seq_len=1024, heads=8, kv_heads=8, head_dim=128,
                                     causal=True, window=None, mode="fwd")
    fields.update(overrides)
    return make_case(**fields)


@pytest.mark.gpu
def test_flex_forward_backward_runs_on_cuda() -> None:
    from attnbench.backends.registry import default_registry
    from tests.helpers import measure_one

    record = measure_one(_cuda_case(window=256, kv_heads=2, mode="fwd_bwd"), default_registry().get("flex"))
    assert record.status == "ok", record.reason
    assert record.grad_checked and record.extra["mask_build"] == "eager"  # 4 MiB of mask: far below a GPU's share


@pytest.mark.gpu
def test_sliding_window_bf16_backward_passes_at_window_1024_on_cuda() -> None:
    from attnbench.backends.registry import default_registry
    from tests.helpers import measure_one

    record = measure_one(_cuda_case(seq_len=4096, heads=16, kv_heads=4, window=1024, mode="fwd_bwd"),
                     default_registry().get("sliding-window"))
    assert record.status == "ok", record.reason


@pytest.mark.gpu
def test_sdpa_flash_names_its_implementation_and_its_own_refusal_on_cuda() -> None:
    from attnbench.backends.registry import default_registry
    from tests.helpers import measure_one

    flash = default_registry().get("sdpa-flash")
    ok = measure_one(_cuda_case(), flash)
    assert ok.status == "ok" and "FLASH_ATTENTION via FA2 (built into PyTorch)" in ok.kernel
    refused = measure_one(_cuda_case(window=64), flash)
    assert refused.status == "skipped"
    assert refused.reason.startswith("PyTorch refused FLASH_ATTENTION: Flash Attention does not support non-null")
    assert "Triggered internally" not in refused.reason and "runtime disabled" not in refused.reason


@pytest.mark.gpu
def test_sdpa_efficient_fp32_is_judged_against_a_roof_it_can_reach() -> None:
    import torch

    from attnbench.backends.registry import default_registry
    from attnbench.run.recording import RunInfo
    from attnbench.timing.timers import CudaEventTimer
    from attnbench.verify.inputs import CaseData
    from tests.helpers import ONE_SAMPLE

    record = measure(CaseData(_cuda_case(dtype="float32", seq_len=4096)), default_registry().get("sdpa-efficient"),
                     CudaEventTimer(), Settings(RunInfo("r", "t", torch.cuda.get_device_name(0)), ONE_SAMPLE))
    assert record.status == "ok", record.reason
    assert record.extra["fp32_math"] == "3xTF32"
    if record.percent_of_peak is not None:
        assert record.percent_of_peak <= 100 and "TF32 / 3" in record.extra["peak_source"]


def test_gpu_check_on_a_bare_machine_names_every_missing_package(tmp_path: Path) -> None:
    """A GPU box with only Python: the script says which packages to carry (pytest too), and stops."""
    import os
    import subprocess

    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # no site-packages: nothing installed
    bare.chmod(0o755)
    root = Path(__file__).parents[1]
    env = {**os.environ, "PYTHON": str(bare), "WHEELS": str(tmp_path / "no-wheels"), "PYTHONPATH": ""}
    result = subprocess.run(["bash", str(root / "scripts" / "gpu-check.sh"), str(tmp_path / "out")], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "missing Python packages: pydantic typer rich yaml pandas torch pytest matplotlib jinja2" in result.stderr
    assert not (tmp_path / "out").exists()
