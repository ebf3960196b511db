"""The input distributions (attnbench.verify.distributions, docs/conventions.md "Input distributions"): randn's
tensors are those of every earlier run; each other distribution transforms the same draws as it says, seeded."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnbench.core import axes
from attnbench.verify import distributions as dist
from attnbench.verify.inputs import CaseData, make_inputs
from tests.helpers import make_case


def _old_randn(case) -> tuple[torch.Tensor, ...]:  # type: ignore[no-untyped-def]
    """Inputs as attnbench drew them before the `inputs:` axis: q, k, v, dO in turn from the case's seed."""
    gen = torch.Generator().manual_seed(case.seed)
    dtype = getattr(torch, case.dtype)
    sizes = [(case.heads, case.seq_len, case.head_dim), (case.kv_heads, case.kv_seq_len, case.head_dim),
             (case.kv_heads, case.kv_seq_len, case.v_dim), (case.heads, case.seq_len, case.v_dim)]
    return tuple(torch.randn((case.batch, *s), generator=gen, dtype=torch.float32).to(dtype) for s in sizes)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_randn_inputs_and_ids_are_those_of_every_earlier_run(dtype: str) -> None:
    case = make_case(dtype=dtype, mode="fwd_bwd", kv_heads=2, causal=True)
    assert case.case_id == f"cpu-{axes.DTYPE_SHORT[dtype]}-b1-s64-h4-kv2-d32-causal-fwd_bwd"
    got = make_inputs(case)
    assert all(torch.equal(a, b) for a, b in zip((got.q, got.k, got.v, got.dout), _old_randn(case), strict=False))
    assert got.params == {}


def _pair(kind: str, **over: object) -> tuple:  # type: ignore[type-arg]
    case = make_case(inputs=kind, **over)
    return make_inputs(dataclasses.replace(case, inputs=None)), make_inputs(case)


def test_each_distribution_is_seeded_and_reproducible() -> None:
    for kind in axes.INPUTS[1:]:
        a, b = make_inputs(make_case(inputs=kind)), make_inputs(make_case(inputs=kind))
        assert all(torch.equal(x, y) for x, y in zip((a.q, a.k, a.v), (b.q, b.k, b.v), strict=False)), kind
        assert a.params == b.params and a.params, kind


def test_outliers_scale_a_few_key_channels_only() -> None:
    plain, out = _pair("outliers", head_dim=64)
    channels = out.params["channels"]
    assert len(channels) == 64 // dist.OUTLIER_EVERY and out.params["factor"] == 16.0
    assert torch.equal(out.k[..., channels], plain.k[..., channels] * 16)
    rest = [c for c in range(64) if c not in channels]
    assert torch.equal(out.k[..., rest], plain.k[..., rest]) and torch.equal(out.q, plain.q)
    assert torch.equal(out.v, plain.v)


def test_a_sink_takes_most_of_most_rows() -> None:
    data = CaseData(make_case(inputs="sink", seq_len=256, head_dim=64))
    q, k = data.inputs.q.double(), data.inputs.k.double()
    probs = ((q @ k.transpose(-2, -1)) / 8).softmax(-1)
    assert float((probs[..., 0] > 0.5).double().mean()) > 0.75  # key 0 holds over half of most rows' probability


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_large_logits_bring_the_largest_product_to_half_of_fp16s_range(dtype: str) -> None:
    case = make_case(inputs="large_logits", dtype=dtype, kv_heads=2)
    got = make_inputs(case)
    largest = dist.max_qk(case, got.q.double(), got.k.double())
    assert largest == pytest.approx(dist.LARGE_QK, rel=0.02) and largest < 65504
    plain, _ = _pair("large_logits", dtype=dtype, kv_heads=2)
    assert torch.allclose(got.q.float(), plain.q.float() * got.params["factor"], rtol=1e-2)


def test_shifted_keys_move_every_key_by_one_vector() -> None:
    plain, out = _pair("shifted_keys")
    shift = out.k - plain.k  # in float32: k + 8 rounds, so the difference is 8 within its spacing
    assert torch.allclose(shift.abs(), torch.full_like(shift, dist.KEY_MEAN), atol=1e-5)
    assert torch.equal(shift.sign(), shift[..., :1, :].sign().expand_as(shift))  # one vector for every key
    assert 0 < int((shift[0, 0, 0] > 0).sum()) < 32


def test_near_constant_rows_differ_by_a_thousandth() -> None:
    _, out = _pair("near_constant", seq_len=128)
    for t in (out.k, out.v):
        spread = (t - t[..., :1, :]).abs().max() / t[..., :1, :].abs().max()
        assert 0 < float(spread) < 0.01


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_denormal_queries_and_keys_are_mostly_subnormal_and_values_untouched(dtype: str) -> None:
    plain, out = _pair("denormal", dtype=dtype)
    tiny = torch.finfo(getattr(torch, dtype)).tiny
    for t in (out.q, out.k):
        nonzero = t[t != 0].float().abs()
        assert float((nonzero < tiny).double().mean()) > 0.9 and math.isfinite(float(nonzero.max()))
    assert torch.equal(out.v, plain.v)


def test_a_quantized_case_records_the_parameters_of_its_originals() -> None:
    from attnbench.verify.quant_data import case_data

    data = case_data(make_case(dtype="float8_e4m3fn", inputs="outliers", quant="tensor"))
    assert data.originals.params["factor"] == dist.OUTLIER_FACTOR
    assert data.case.seed == make_case(dtype="bfloat16").seed
