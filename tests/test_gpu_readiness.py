"""What the first GPU reading of attnbench found, held on CPU: roofs, recorded operators, pins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnbench.peaks import peak_for
from attnbench.runner import RunInfo, percent_of_peak
from tests.conftest import make_case


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


def test_sdpa_efficient_says_how_it_computes_fp32_on_cuda_only() -> None:
    from attnbench.backends.sdpa import fp32_math

    assert fp32_math(make_case(device="cuda", dtype="float32"), "cuda", True) == {"fp32_math": "3xTF32"}
    assert fp32_math(make_case(device="cuda", dtype="bfloat16"), "cuda", True) == {}
    assert fp32_math(make_case(dtype="float32"), "cpu", True) == {}


def test_xformers_records_and_pins_its_backward_operator_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.backends.xformers_ops import XformersBackend
    from tests.conftest import measure
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
    record = measure(make_case(dtype="float32", seq_len=40, heads=2, kv_heads=2, head_dim=16, causal=True,
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
