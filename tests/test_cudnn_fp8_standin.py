"""The cudnn-fp8 adapter against the stand-in `cudnn` module (tests/test_cudnn_standin.py), whose `sdpa_fp8` is written
from the frontend's FP8 test reference (test/python/sdpa/fp8_ref.py) and the 1.32 binding's signature: the graph's
FP8 Q, K, V and six (1, 1, 1, 1) factors, P·scale_s rounded to the input's FP8 type, `left_bound` / `right_bound`."""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

import pytest

import attnbench.backends.cudnn_fp8 as cudnn_fp8
import attnbench.backends.cudnn_graph as cudnn_graph
import attnbench.backends.cudnn_layout as cudnn_layout
from attnbench.backends.base import refusal
from attnbench.backends.cudnn_fp8 import FP8_KEYWORDS, CudnnFp8Backend
from attnbench.backends.cudnn_layout import route
from attnbench.core.case import Case
from tests.fp8_inputs import distinct_scales
from tests.helpers import Measured, Sabotage, Standin, make_case, measure_one, on_cpu_too
from tests.test_cudnn_standin import StandinState, make_cudnn


def install(monkeypatch: pytest.MonkeyPatch) -> StandinState:
    """The stand-in `cudnn` in place, the adapter allowed onto the CPU and a distinct scale for each tensor; returns
    what the stand-in saw. Both graph caches are empty ones of this test's (monkeypatch puts the real ones back)."""
    state = StandinState()
    monkeypatch.setitem(sys.modules, "cudnn", make_cudnn(state))
    on_cpu_too(monkeypatch, CudnnFp8Backend)
    distinct_scales(monkeypatch)
    monkeypatch.setattr(cudnn_graph, "_CACHE", OrderedDict())
    monkeypatch.setattr(cudnn_fp8, "_CACHE", OrderedDict())
    return state


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> StandinState:
    return install(monkeypatch)


def case(**overrides: Any) -> Case:
    fields: dict[str, Any] = dict(dtype="float8_e4m3fn", causal=True, heads=4, kv_heads=4, head_dim=16, seq_len=48,
                                  batch=2)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "dense-causal": (case(), "dense"),
    "e5m2-full-gqa": (case(dtype="float8_e5m2", causal=False, kv_heads=2), "dense"),
    "window-prefill-with-cache": (case(window=6, seq_len=20, kv_seq_len=64, heads=6, kv_heads=2), "dense"),
    "two-sided-window": (case(causal=False, window=5, seq_len=30, kv_seq_len=45), "dense"),
    "decode-window": (case(window=3, seq_len=1, kv_seq_len=64, heads=8, kv_heads=2), "dense"),
    "documents": (case(documents=3, doc_lengths="random", batch=1), "ragged"),
    "ragged-kv": (case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", kv_heads=1), "padded"),
    "paged-decode": (case(batch=3, seq_len=1, kv_seq_len=70, kv_lengths="random", page_size=8, heads=8, kv_heads=2),
                     "paged"),
    "alibi": (case(alibi=True, heads=6, kv_heads=3), "dense"),
}


def check(measured: Measured) -> None:
    """The case takes the route its table names; attnbench quantized, cuDNN answered in fp16 through its backend's
    plan, and the bound and the kernel name P's scale for the case's FP8 type."""
    c, record = measured.case, measured.record
    assert route(c) == CASES[measured.name][1]
    assert record.extra["out_dtype"] == "float16" and record.extra["quantized"] == "attnbench"
    scale = {"float8_e4m3fn": "64", "float8_e5m2": "8192"}[c.dtype]
    assert record.extra["bound_source"].startswith(f"emulation of cuDNN's FP8 SDPA (P·{scale} to {c.dtype}")
    assert {what for what, _ in measured.recorded.log if what.startswith("execute:")} == {"execute:eng7_k2=1_k3=0"}
    assert record.kernel.startswith(f"cudnn-frontend 1.32.0 / cuDNN 9.19.0 sdpa_fp8 ({c.dtype}, per-tensor "
                                    f"descales, scale_s {scale}, float16 out, ")


def test_the_keywords_are_sdpa_fp8s_own(standin: StandinState) -> None:
    """sdpa_fp8 names its window bounds left_bound / right_bound (the stand-in, like the binding, refuses sdpa's
    diagonal_band_* names); every keyword passed is declared."""
    for c, _ in CASES.values():
        measure_one(c, CudnnFp8Backend())
    passed = standin.keywords["sdpa_fp8"]
    assert passed <= set(FP8_KEYWORDS) - {"name"}
    assert {"left_bound", "right_bound", "paged_attention_k_table", "use_padding_mask"} <= passed
    assert not any(key.startswith("diagonal_band") for key in passed)


@pytest.mark.parametrize("c,words", [
    (case(quant="head"), "cuDNN's sdpa_fp8 takes one descale per tensor"),
    (case(quant="block", quant_block=16), "cuDNN's sdpa_fp8 takes one descale per tensor"),
    (make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", seq_len=1, kv_seq_len=64), "Q, K and V in one FP8 type"),
    (make_case(dtype="bfloat16"), "cudnn-fp8 runs FP8 cases only"),
])
def test_what_cudnn_fp8_does_not_take_is_skipped_by_name(c: Case, words: str) -> None:
    assert words in refusal(CudnnFp8Backend(), c)


def _factors(change):  # type: ignore[no-untyped-def]
    real = cudnn_fp8.factor_values

    def wrong(scales, fmt):  # type: ignore[no-untyped-def]
        return change(real(scales, fmt))
    return lambda mp: mp.setattr(cudnn_fp8, "factor_values", wrong)


def _left_bound_exclusive_as_inclusive(real):  # type: ignore[no-untyped-def]
    def wrong(c):  # type: ignore[no-untyped-def]
        args = real(c)
        if "diagonal_band_left_bound" in args:
            args["diagonal_band_left_bound"] -= 1
        return args
    return wrong


WRONG_MAPPINGS = {
    "q-descale-for-k": (_factors(lambda f: {**f, "descale_k": f["descale_q"]}), "dense-causal"),
    "k-and-v-descales-swapped": (_factors(lambda f: {**f, "descale_k": f["descale_v"], "descale_v": f["descale_k"]}),
                                 "e5m2-full-gqa"),
    "descale-applied-twice": (_factors(lambda f: {**f, "descale_q": f["descale_q"] ** 2}), "documents"),
    "p-descale-not-inverted": (_factors(lambda f: {**f, "descale_s": f["scale_s"]}), "ragged-kv"),
    "output-scaled": (_factors(lambda f: {**f, "scale_o": 2.0}), "paged-decode"),
    "window-left-bound-off-by-one": (
        lambda mp: mp.setattr(cudnn_layout, "mask_arguments", _left_bound_exclusive_as_inclusive(
            cudnn_layout.mask_arguments)), "window-prefill-with-cache"),
}



def _fresh(sabotage: Sabotage) -> Sabotage:
    """The sabotage, then the FP8 graphs built so far forgotten: the case's graph is rebuilt with it in place."""
    def fresh(mp: pytest.MonkeyPatch) -> None:
        sabotage(mp)
        cudnn_fp8.clear_cache()
    return fresh


SABOTAGES = {name: (_fresh(sabotage), CASES[which][0]) for name, (sabotage, which) in WRONG_MAPPINGS.items()}
STANDIN = Standin(name="cudnn-fp8", install=install, backends=(CudnnFp8Backend,),
                  cases={name: c for name, (c, _) in CASES.items()}, sabotages=SABOTAGES, check=check)


def test_calls_match_cudnn_frontend_1_32_0s_sdpa_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FP8 graph's calls against the real 1.32.0 wheel's recorded signatures (tests/signatures): sdpa_fp8's
    binding takes the six factors by position and left_bound / right_bound, and a binding that renamed one is named."""
    from attnbench.backends.conformance import check_backend
    from tests.test_cudnn_standin import install_fixture

    fixture = install_fixture(monkeypatch)
    conformance = check_backend(CudnnFp8Backend())
    assert conformance.state == "ok", conformance.summary
    by_name = {v.function: v for v in conformance.verdicts}
    assert by_name["cudnn._compiled_module.backend_graph.sdpa_fp8"].state == "ok"
    renamed = fixture.SDPA_FP8_DOC.replace("left_bound:", "diagonal_band_left_bound:")
    monkeypatch.setattr(fixture.backend_graph, "sdpa_fp8", fixture._Binding("sdpa_fp8", renamed))
    conformance = check_backend(CudnnFp8Backend())
    assert conformance.state == "mismatch" and conformance.problem.parameter == "left_bound"
