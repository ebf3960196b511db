"""The quantized verdict pinned from both sides, and its two errors kept apart (docs/results.md "Accuracy of quantized
kernels"): err(kernel) <= 2·err(emulation of its numerics) + floor(out dtype), the kernel error measured against the
float64 reference on the dequantized inputs, the quantization error against the one on the original inputs.

A backend here computes the exact answer (float64 attention on the inputs it is handed, dequantized with the descale
factors it is handed, rounded once to bf16) and plants an error of a chosen size, 5% under or over the bound this
test computes itself from the emulation; each way of quantizing, and a kernel that quantizes internally, is a part.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from attnbench.backends.base import Backend, Capabilities, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import quant, workload
from attnbench.core.case import Case
from attnbench.core.quant import Numerics
from attnbench.verify.emulate import metrics
from attnbench.verify.inputs import naive_attention
from attnbench.verify.quant_data import QuantCaseData, case_data, emulation
from tests.helpers import make_case, measure_one

FLOOR_BF16 = 1e-3
EVERY = frozenset({f"{k}:{f}" for k in ("qkv", "kv") for f in ("float8_e4m3fn", "float8_e5m2")}
                  | {"scale:tensor", "scale:head", "scale:block"})
# An FP8 flash kernel's declared numerics (FlashAttention 3's: P·2^8 rounded to e4m3) and SageAttention 1.0.6's.
P_E4M3 = Numerics(source="a P-in-e4m3 kernel", p_format="float8_e4m3fn", p_scale=256.0)
SAGE = Numerics(source="an INT8 Q·Kᵀ kernel", p_format="float16", accumulate="float16", pv_block=64,
                inputs="sage-int8")


def exact(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    g = case.group_size
    return naive_attention(q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1),
                           workload.mask(case, device=q.device))


class Planted(Backend):
    """The exact answer on the inputs as handed over (FP8 dequantized with the handed factors), with `size` added to
    the smallest-magnitude element of a middle row before the one rounding to bf16."""

    name = "planted"
    capabilities = Capabilities(quantized=EVERY)

    def __init__(self, numerics: Numerics | None, size: float = 0.0) -> None:
        self._numerics, self.size = numerics, size

    def numerics(self, case: Case) -> Numerics | None:
        return self._numerics

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scales: quant.Scales | None = None) -> Prepared:
        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if scales is not None:
                q = q.double() if scales.q is None else q.double() * scales.per_row("q").double()
                k, v = k.double() * scales.per_row("k").double(), v.double() * scales.per_row("v").double()
            out = exact(case, q, k, v)
            if self.size:
                middle = out.shape[2] // 2
                col = int(out[0, 0, middle].abs().argmin())
                out[0, 0, middle, col] += self.size
            return out.to(torch.bfloat16)

        return Prepared((q, k, v), call, kernel="planted")


def bound_of(data: Any, numerics: Numerics) -> float:
    """2·max|emulation − reference| + the bf16 floor, from the emulation and the reference as the test reads them."""
    low, ref = emulation(data, numerics).out, data.reference.out
    return 2 * float((low.double() - ref).abs().max()) + FLOOR_BF16


def fp8(**overrides: Any) -> Case:
    fields: dict[str, Any] = dict(dtype="float8_e4m3fn", causal=True, heads=4, kv_heads=2, seq_len=64, batch=2)
    fields.update(overrides)
    return make_case(**fields)


PARTS = {
    "tensor": (fp8(), None),
    "head": (fp8(quant="head"), None),
    "block": (fp8(quant="block", quant_block=16), None),
    "kv-cache": (make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", batch=2, seq_len=1, kv_seq_len=96,
                           causal=True, heads=4, kv_heads=1), None),
    "p-in-e4m3": (fp8(quant="head"), P_E4M3),
    "internal-int8": (make_case(dtype="bfloat16", causal=True, heads=4, kv_heads=2, seq_len=256, head_dim=64), SAGE),
}


@pytest.mark.parametrize("part", list(PARTS))
def test_a_planted_kernel_error_flips_the_verdict_at_the_bound(part: str) -> None:
    c, numerics = PARTS[part]
    data = case_data(c)
    bound = bound_of(data, numerics or quant.plain_numerics(c))
    under = measure_one(c, Planted(numerics, 0.95 * bound), data)
    over = measure_one(c, Planted(numerics, 1.05 * bound), data)
    assert under.status == "ok", under.reason
    assert over.status == "mismatch" and over.reason.startswith("out max |error|")
    for record in (under, over):
        assert math.isclose(record.error_bound, bound, rel_tol=1e-12)  # the rule's value, computed here
        assert record.max_abs_error == record.extra["kernel_error"]["max_abs"]
        assert record.extra["bound_source"] == (numerics or quant.plain_numerics(c)).describe()
    assert 0.9 * bound < under.max_abs_error < bound < over.max_abs_error < 1.1 * bound


def test_the_emulated_numerics_widen_the_bound_only_as_far_as_they_lose() -> None:
    """P rounded to e4m3 loses more than the plain float32 emulation, SageAttention's INT8 more than naive bf16."""
    data = case_data(PARTS["p-in-e4m3"][0])
    assert bound_of(data, P_E4M3) > bound_of(data, quant.plain_numerics(data.case))
    sage_case = PARTS["internal-int8"][0]
    plain = case_data(sage_case)
    naive_bound = 2 * float((plain.naive.out.double() - plain.reference.out).abs().max()) + FLOOR_BF16
    assert bound_of(plain, SAGE) > naive_bound


def test_an_internally_quantizing_kernel_is_judged_by_its_scheme_and_says_so() -> None:
    c, numerics = PARTS["internal-int8"]
    record = measure_one(c, Planted(numerics), case_data(c))
    assert record.status == "ok"
    assert record.extra["bound_source"].startswith("emulation of an INT8 Q·Kᵀ kernel: Q and mean-subtracted K "
                                                   "quantized to INT8 per block (128 Q / 64 K tokens)")
    assert "quant_error" not in record.extra  # attnbench did not quantize: the kernel's error is all its own


# ---- the two errors, kept apart -----------------------------------------------------------------------------------
def independent_quant_error(data: QuantCaseData) -> dict[str, float]:
    """The quantization error from the stored tensors and factors, dequantized and referenced here."""
    s, qz, c = data.quantized.scales, data.quantized, data.case
    q = qz.q.double() if s.q is None else qz.q.double() * s.per_row("q").double()
    k, v = qz.k.double() * s.per_row("k").double(), qz.v.double() * s.per_row("v").double()
    o = data.originals
    return metrics(exact(c, q, k, v), exact(c, o.q.double(), o.k.double(), o.v.double()))


@pytest.mark.parametrize("part", ["tensor", "head", "block", "kv-cache"])
def test_the_quantization_error_is_the_formats_and_every_backend_carries_the_same(part: str) -> None:
    c = PARTS[part][0]
    data = case_data(c)
    records = [measure_one(c, backend, data) for backend in (default_registry().get("naive-fp8"), Planted(None),
                                                              Planted(None, 0.5))]
    expected = independent_quant_error(data)
    for record in records:
        got = record.extra["quant_error"]
        assert got == records[0].extra["quant_error"]
        for name in ("max_abs", "rel_l2", "cosine"):
            assert math.isclose(got[name], expected[name], rel_tol=1e-9, abs_tol=1e-12), name
    # the exact kernel adds only its bf16 rounding; the planted one its 0.5, which lands in the kernel error alone
    assert records[1].extra["kernel_error"]["max_abs"] < 0.01 < expected["max_abs"]
    assert math.isclose(records[2].extra["kernel_error"]["max_abs"], 0.5, rel_tol=0.01)


def test_a_worse_quantizer_costs_the_format_not_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A quantizer whose factors are 2^16 too large, so that every value lands among e4m3's subnormals (a handful of
    levels): the quantization error grows, the exact kernel's error (against the reference on what it was given)
    does not, and it stays ok."""
    c = PARTS["head"][0]
    good = measure_one(c, Planted(None), case_data(c))
    real = quant.descale_of
    monkeypatch.setattr(quant, "descale_of", lambda *a: real(*a) * 2 ** 16)
    coarse = measure_one(c, Planted(None), case_data(c))
    assert coarse.status == "ok"
    assert coarse.extra["quant_error"]["rel_l2"] > 3 * good.extra["quant_error"]["rel_l2"]
    assert coarse.extra["kernel_error"]["rel_l2"] < 2 * good.extra["kernel_error"]["rel_l2"] + 1e-3
    # against the originals the kernel carries both
    assert coarse.extra["error_vs_original"]["rel_l2"] > 3 * good.extra["error_vs_original"]["rel_l2"]


def test_metrics_by_hand() -> None:
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    got = metrics(torch.tensor([3.0, 4.5]), ref)
    assert got["max_abs"] == 0.5 and math.isclose(got["rel_l2"], 0.1)
    assert math.isclose(got["cosine"], (9 + 18) / (5 * math.hypot(3, 4.5)))
    assert metrics(torch.tensor([math.nan, 0.0]), ref) == {"max_abs": math.inf, "rel_l2": math.inf, "cosine": 0.0}
