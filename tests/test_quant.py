"""attnbench.core.quant: the suite's quantized axis, how attnbench quantizes a case's inputs, and what a backend that
does not take them is told; naive-fp8 on every format (docs/results.md "Accuracy of quantized kernels")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends.registry import default_registry
from attnbench.cli.main import app
from attnbench.core import quant
from attnbench.sweep.suite import load_suite
from attnbench.verify.inputs import make_inputs
from attnbench.verify.quant_data import QuantCaseData, case_data
from tests.helpers import make_case, measure_one


def fp8_case(**overrides: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = dict(dtype="float8_e4m3fn", causal=True, heads=4, kv_heads=2, seq_len=64, batch=2)
    fields.update(overrides)
    return make_case(**fields)


# ---- the case ------------------------------------------------------------------------------------------------
def test_existing_case_ids_do_not_change() -> None:
    """New id parts appear only when set: a dense bf16 case is named as before the axis existed."""
    c = make_case(dtype="bfloat16", causal=True, window=8, heads=8, kv_heads=2, seq_len=64, kv_seq_len=128)
    assert c.case_id == "cpu-bf16-b1-s64-kv128-h8-kv2-d32-causal-w8-fwd"
    assert c.quant is None and not c.quantized


def test_a_quantized_case_names_its_format_and_scales() -> None:
    assert fp8_case().case_id == "cpu-fp8e4m3-b2-s64-h4-kv2-d32-causal-qtensor-fwd"
    assert fp8_case(quant="block").case_id.endswith("-qblock128-fwd")  # the default block
    assert fp8_case(dtype="float8_e5m2", quant="head", quant_scale=0.5).case_id.endswith("-qhead-scale0.5-fwd")
    kv = make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", seq_len=1, kv_seq_len=64)
    assert kv.case_id == "cpu-bf16-b1-s1-kv64-h4-kv4-d32-full-kvfp8e4m3-qtensor-fwd"


def test_the_originals_are_the_bf16_twins_inputs() -> None:
    """An FP8 case quantizes exactly the tensors its bf16 twin measures, so the frontier compares formats on one
    draw; an FP8 K/V cache keeps the twin's queries as they are."""
    c = fp8_case(quant="head")
    twin = make_inputs(c.unquantized)
    data = case_data(c)
    assert isinstance(data, QuantCaseData) and c.unquantized.dtype == "bfloat16"
    assert torch.equal(data.originals.q, twin.q) and torch.equal(data.originals.v, twin.v)
    kv = make_case(dtype="float16", kv_dtype="float8_e5m2", seq_len=1, kv_seq_len=64, causal=True)
    kv_data = case_data(kv)
    assert kv_data.inputs.q.dtype == torch.float16 and torch.equal(kv_data.inputs.q, make_inputs(kv.unquantized).q)
    assert kv_data.inputs.k.dtype == torch.float8_e5m2 and kv_data.quantized.scales.q is None


# ---- quantizing ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("granularity,shape", [("tensor", (1, 1, 1, 1)), ("head", (2, 2, 1, 1)),
                                               ("block", (2, 4, 4, 1))])
def test_each_granule_maps_its_amax_to_the_formats_largest_value(granularity: str, shape: tuple) -> None:
    c = fp8_case(quant=granularity, quant_block=16 if granularity == "block" else None)
    data = case_data(c)
    q = data.originals.q.float()
    stored, factors = data.quantized.q, data.quantized.scales.q
    assert factors.shape == shape and factors.dtype == torch.float32
    per_row = data.quantized.scales.per_row("q")
    # each granule's largest |value| is stored as ±448 and comes back as that amax
    granule = {"tensor": lambda t: t.abs().amax().reshape(1, 1, 1, 1),
               "head": lambda t: t.abs().reshape(2, 2, -1).amax(-1)[..., None, None],
               "block": lambda t: t.abs().reshape(2, 4, 4, -1).amax(-1, keepdim=True)}[granularity]
    assert torch.allclose(factors * 448.0, granule(q), rtol=1e-6)
    assert float(stored.float().abs().amax()) == 448.0
    assert torch.allclose(stored.double() * per_row.double(), q.double(), rtol=2 ** -4, atol=float(factors.max()) / 2)


def test_per_head_factors_are_shared_by_a_kv_heads_query_heads() -> None:
    """FlashAttention 3's (batch, kv_heads) layout: query heads 0-1 read KV head 0 and share its Q factor."""
    scales = case_data(fp8_case(quant="head")).quantized.scales
    rows = scales.per_row("q")
    assert rows.shape == (2, 4, 1, 1)
    assert torch.equal(rows[:, 0], rows[:, 1]) and torch.equal(rows[:, 2], rows[:, 3])
    assert not torch.equal(rows[:, 1], rows[:, 2])


def test_a_fixed_scale_divides() -> None:
    data = case_data(fp8_case(quant_scale=0.25))
    assert float(data.quantized.scales.k.reshape(())) == 0.25
    assert torch.equal(data.quantized.k.float(), (data.originals.k.float() / 0.25).to(torch.float8_e4m3fn).float())


@pytest.mark.parametrize("fmt, largest", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_values_past_the_formats_range_saturate_to_its_largest_finite_value(fmt: str, largest: float) -> None:
    """A scale small enough that most of K lies past the range: each such value is stored as ±the largest finite
    value of the format (OCP FP8: 448 for E4M3, 57344 for E5M2), never inf or NaN. torch's own cast turns an E5M2
    value from 61440 up into inf, so this holds only because attnbench saturates first."""
    data = case_data(fp8_case(dtype=fmt, quant_scale=1e-5))
    original = data.originals.k.double() / 1e-5
    stored = data.quantized.k.double()
    beyond = original.abs() >= 61440.0  # past the range by more than half a step: rounding cannot bring it back
    assert beyond.float().mean() > 0.5  # the case truly saturates
    assert torch.isfinite(stored).all()
    assert torch.equal(stored[beyond], torch.where(original[beyond] > 0, largest, -largest))
    inside = original.abs() <= largest / 2
    assert torch.equal(stored[inside], original[inside].to(getattr(torch, fmt)).double())


def test_shared_kv_stays_shared_when_quantized() -> None:
    c = fp8_case(head_dim=64, head_dim_v=32, kv_shared=True, heads=4, kv_heads=1)
    data = case_data(c)
    assert torch.equal(data.quantized.v.float(), data.quantized.k[..., :32].float())


# ---- who takes what ------------------------------------------------------------------------------------------
def test_a_backend_without_fp8_is_skipped_by_name_never_run_in_bf16() -> None:
    registry = default_registry()
    c = fp8_case()
    for name in ("naive", "sdpa", "sdpa-math"):
        record = measure_one(c, registry.get(name), case_data(c))
        assert record.status == "skipped"
        assert record.reason.startswith(f"{name} takes no quantized inputs (FP8 Q, K and V in float8_e4m3fn)")
    plain = make_case(dtype="bfloat16")
    record = measure_one(plain, registry.get("naive-fp8"))
    assert record.status == "skipped" and "runs quantized cases only" in record.reason


def test_a_missing_granularity_is_named() -> None:
    takes = frozenset({"qkv:float8_e4m3fn", "scale:tensor"})
    assert quant.refusal("k", takes, fp8_case(quant="head")) == (
        "k does not take per-(batch, KV head) descale factors")
    assert quant.refusal("k", takes, fp8_case(dtype="float8_e5m2")) == (
        "k does not take FP8 Q, K and V in float8_e5m2")
    assert quant.refusal("k", takes, fp8_case()) is None


CASES = {
    "tensor": fp8_case(),
    "head-e5m2": fp8_case(dtype="float8_e5m2", quant="head"),
    "block-window": fp8_case(quant="block", quant_block=16, window=9),
    "fixed-scale": fp8_case(quant_scale=0.03),
    "kv-decode-paged": make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", batch=3, seq_len=1, kv_seq_len=80,
                                 kv_lengths="random", page_size=16, causal=True, heads=4, kv_heads=1),
    "kv-block-softcap-alibi": make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", seq_len=32, kv_seq_len=64,
                                        causal=True, quant="block", quant_block=32, softcap=20.0, alibi=True),
    "documents": fp8_case(documents=3, batch=1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_naive_fp8_runs_every_format_on_a_cpu(name: str) -> None:
    c = CASES[name]
    record = measure_one(c, default_registry().get("naive-fp8"), case_data(c))
    assert record.status == "ok", record.reason
    extra = record.extra
    assert extra["quantized"] == "attnbench" and extra["out_dtype"] == "bfloat16"
    for part in ("quant_error", "kernel_error", "error_vs_original"):
        assert set(extra[part]) == {"max_abs", "rel_l2", "cosine"}
    # naive-fp8 adds only float32 arithmetic and the bf16 output to what the format costs
    assert extra["kernel_error"]["rel_l2"] < 0.01 < extra["quant_error"]["rel_l2"] < 0.2
    assert 0.99 < extra["quant_error"]["cosine"] <= 1.0
    assert extra["bound_source"].startswith("emulation of dequantized inputs in float32 (naive-fp8)")
    assert record.max_abs_error == extra["kernel_error"]["max_abs"]


def test_bytes_count_fp8_tensors_at_one_byte() -> None:
    from attnbench.core.counting import tensor_bytes

    fp8, bf16 = tensor_bytes(fp8_case()), tensor_bytes(fp8_case().unquantized)
    assert fp8 == {"q": bf16["q"] // 2, "k": bf16["k"] // 2, "v": bf16["v"] // 2, "o": bf16["o"]}
    kv = make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", seq_len=1, kv_seq_len=64)
    assert tensor_bytes(kv)["q"] == tensor_bytes(kv.unquantized)["q"]
    assert tensor_bytes(kv)["k"] == tensor_bytes(kv.unquantized)["k"] // 2


# ---- bad input: one line, exit 2, nothing written ------------------------------------------------------------
SUITE = """\
name: q
device: cpu
backends: [naive-fp8]
timing: {{warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}}
sweep:
  seq_len: [64]
  heads: [4]
  head_dim: [16]
  {axes}
"""
BAD = {
    "zero scale": ("dtype: float8_e4m3fn\n  quant: {scale: 0}", "sweep.quant[0].scale: 0 is out of range"),
    "negative scale": ("dtype: float8_e4m3fn\n  quant: {scale: -2.5}", "sweep.quant[0].scale: -2.5 is out of range"),
    "infinite scale": ("dtype: float8_e4m3fn\n  quant: {scale: .inf}", "sweep.quant[0].scale: inf is out of range"),
    "NaN scale": ("dtype: float8_e4m3fn\n  quant: {scale: .nan}", "sweep.quant[0].scale: nan is out of range"),
    "block not dividing": ("dtype: float8_e4m3fn\n  quant: {granularity: block, block: 48}",
                           "sweep.quant.block: 48 does not divide kv_seq_len 64"),
    "block not dividing the queries": ("dtype: float8_e4m3fn\n  kv_seq_len: [96]\n  quant: {granularity: block, "
                                       "block: 48}", "sweep.quant.block: 48 does not divide seq_len 64"),
    "block with head": ("dtype: float8_e4m3fn\n  quant: {granularity: head, block: 32}",
                        "block 32 is given with granularity head"),
    "unknown format": ("dtype: float8_e4m3", "sweep.dtype[0]: 'float8_e4m3' is not allowed (did you mean"),
    "backward": ("dtype: float8_e4m3fn\n  mode: fwd_bwd", "quantizes inputs for forward measurements only"),
    "quant without fp8": ("quant: {granularity: head}", "sweep.quant: scales need quantized inputs"),
    "kv_dtype under another fp8": ("dtype: float8_e4m3fn\n  kv_dtype: float8_e5m2",
                                   "sweep.kv_dtype: float8_e5m2 under dtype float8_e4m3fn"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_quantization_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    axes, message = BAD[name]
    (tmp_path / "s.yaml").write_text(SUITE.format(axes=axes))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "out").exists(), "nothing written"


def test_quant_crossed_with_bf16_is_the_plain_case_once(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SUITE.format(
        axes="dtype: [bfloat16, float8_e4m3fn]\n  quant: [{granularity: tensor}, {granularity: head}]"))
    ids = [c.case_id for c in load_suite(tmp_path / "s.yaml").cases("cpu")]
    assert ids == ["cpu-bf16-b1-s64-h4-kv4-d16-full-fwd", "cpu-fp8e4m3-b1-s64-h4-kv4-d16-full-qtensor-fwd",
                   "cpu-fp8e4m3-b1-s64-h4-kv4-d16-full-qhead-fwd"]


# ---- naive-fp8's own mapping of the factors, caught when wrong -------------------------------------------------
def _sabotage(kind: str):  # type: ignore[no-untyped-def]
    from attnbench.backends import naive_fp8

    real = naive_fp8.row_factors

    def wrong(scales, name, c):  # type: ignore[no-untyped-def]
        if kind == "wrong-block-size":  # the block factors expanded over twice the block's tokens
            rows = c.seq_len if name == "q" else c.kv_seq_len
            factor = getattr(scales, name).repeat_interleave(2 * scales.block, dim=2)[:, :, :rows]
            return factor if name == "q" else factor.repeat_interleave(c.group_size, dim=1)
        if kind == "k-and-v-swapped":
            return real(scales, {"k": "v", "v": "k"}.get(name, name), c)
        if kind == "q-factor-applied-twice":
            return real(scales, name, c) ** (2 if name == "q" else 1)
        return real(scales, name, c).flip(1) if kind == "heads-reversed" else real(scales, name, c)
    return lambda mp: mp.setattr(naive_fp8, "row_factors", wrong)


@pytest.mark.parametrize("kind,c", [
    ("wrong-block-size", fp8_case(quant="block", quant_block=16)),
    ("k-and-v-swapped", fp8_case()),
    ("q-factor-applied-twice", fp8_case(quant="head")),
    ("heads-reversed", fp8_case(quant="head")),
])
def test_naive_fp8_catches_its_own_wrong_factor_mapping(monkeypatch: pytest.MonkeyPatch, kind: str, c) -> None:  # type: ignore[no-untyped-def]
    from tests.fp8_inputs import distinct_scales
    from tests.helpers import assert_sabotage_caught

    distinct_scales(monkeypatch, block=c.quant_block)
    assert_sabotage_caught(c, lambda: default_registry().get("naive-fp8"), _sabotage(kind), monkeypatch)


def test_fp8_cases_are_judged_against_the_fp8_roof() -> None:
    from attnbench.core.peaks import peak_for

    assert peak_for("NVIDIA H200", "float8_e4m3fn").tflops == 1979.0  # H200 SXM: 3,958 sparse, halved
    assert peak_for("NVIDIA H200", "bfloat16").tflops == 989.0  # an FP8 K/V cache under bf16 queries computes in bf16
    assert peak_for("NVIDIA A100-SXM4-80GB", "float8_e5m2").tflops is None  # no FP8 tensor cores


def test_flex_says_why_it_takes_no_fp8() -> None:
    from attnbench.backends.base import refusal

    assert refusal(default_registry().get("flex"), fp8_case()).startswith("attnbench maps no FP8 inputs onto flex")
