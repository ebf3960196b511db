"""The sage adapter against a stand-in `sageattention` written from SageAttention 1.0.6's kernels, not from
attnbench.verify.emulate: sageattn asserts what core.py asserts (CUDA aside), subtracts K's mean in place, quantizes
Q·sm_scale·1.44269504 and K to INT8 per block of 128 / 64 tokens (quant_per_block.py: amax/127, x/s + 0.5·sign,
truncated), and runs the kernels' online softmax block by block of 64 keys: exp2 against the running max, P and V in
float16, each block's P·V rounded to float16 (tl.dot out_dtype), rescaled and summed in float32; the causal mask is
top-left within the diagonal block (qo_len == kv_len asserted), and the non-causal kernel scores the zero-filled keys
past kv_len as 0. The output is in the inputs' dtype."""

from __future__ import annotations

import dataclasses
import math
import sys
import types
from typing import Any

import pytest
import torch

from attnbench.backends.base import refusal
from attnbench.backends.conformance import check_backend
from attnbench.backends.sage import SageBackend
from attnbench.core.case import Case
from attnbench.verify.inputs import make_inputs
from attnbench.verify.quant_data import case_data
from tests.helpers import Measured, Standin, make_case, measure_one, on_cpu_too

BLKQ, BLKK = 128, 64


def per_block_int8(x: torch.Tensor, block: int, sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, H, S, D) → INT8 values and (B, H, blocks) factors, as quant_per_block_int8_kernel computes them."""
    b, h, s, d = x.shape
    blocks = -(-s // block)
    values = torch.zeros(b, h, s, d)
    factors = torch.zeros(b, h, blocks)
    for i in range(blocks):
        part = x[:, :, i * block:(i + 1) * block].float() * sm_scale
        scale = part.abs().amax(dim=(-1, -2)) / 127.0
        q = part / scale[..., None, None]
        q = q + 0.5 * torch.where(q >= 0, 1.0, -1.0)
        values[:, :, i * block:(i + 1) * block] = q.trunc()
        factors[:, :, i] = scale
    return values, factors


def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True, **kwargs):  # type: ignore[no-untyped-def]
    dtype = q.dtype
    assert dtype in [torch.float16, torch.bfloat16, torch.float32], "Input tensors must be in dtype of torch.float16..."
    assert q.dtype == k.dtype == v.dtype, "All tensors must have the same dtype."
    assert q.size(-1) in [64, 96, 128], "headdim should be in [64, 96, 128]."
    if tensor_layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = sageattn(q, k, v, "HND", is_causal, sm_scale, smooth_k)
        return out.transpose(1, 2)
    if smooth_k:
        km = k.mean(dim=2, keepdim=True)
        k -= km  # in place, on the caller's tensor, as core.py does
    b, hq, sq, d = q.shape
    _, hk, sk, _ = k.shape
    sm_scale = d ** -0.5 if sm_scale is None else sm_scale
    qi, qs = per_block_int8(q, BLKQ, sm_scale * 1.44269504)
    ki, ks = per_block_int8(k, BLKK, 1.0)
    v16 = v.to(torch.float16)
    if is_causal:
        assert sq == sk, "qo_len and kv_len must be equal for causal attention"
    g = hq // hk
    pad = (-sk) % BLKK  # the last block's keys past kv_len load as zeros, their scores unmasked (non-causal kernel)
    ki = torch.nn.functional.pad(ki, (0, 0, 0, pad))
    v16 = torch.nn.functional.pad(v16, (0, 0, 0, pad))
    out = torch.zeros(b, hq, sq, v.shape[-1])
    for h in range(hq):
        kh = h // g
        qrow_scale = qs[:, h].repeat_interleave(BLKQ, dim=1)[:, :sq, None]  # (B, Sq, 1)
        m = torch.full((b, sq, 1), -math.inf)
        lsum = torch.zeros(b, sq, 1)
        acc = torch.zeros(b, sq, v.shape[-1])
        for blk, start in enumerate(range(0, sk + pad, BLKK)):
            kb = ki[:, kh, start:start + BLKK]
            qk = (qi[:, h] @ kb.transpose(-1, -2)) * qrow_scale * ks[:, kh, blk][:, None, None]
            if is_causal:
                i = torch.arange(sq)[:, None]
                j = torch.arange(start, start + BLKK)[None, :]
                qk = qk + torch.where(i >= j, 0.0, -1.0e6)
            m_new = torch.maximum(m, qk.amax(-1, keepdim=True))
            p = torch.exp2(qk - m_new)
            alpha = torch.exp2(m - m_new)
            lsum = lsum * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha
            block = (p.to(torch.float16).float() @ v16[:, kh, start:start + BLKK].float()).to(torch.float16)
            acc = acc + block.float()
            m = m_new
        out[:, h] = acc / lsum
    return out.to(dtype)


def install(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The stand-in `sageattention` in place, and the adapter allowed onto the CPU."""
    module = types.ModuleType("sageattention")
    module.sageattn = sageattn
    monkeypatch.setitem(sys.modules, "sageattention", module)
    on_cpu_too(monkeypatch, SageBackend)
    return module


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    return install(monkeypatch)


def case(**overrides: Any) -> Case:
    fields: dict[str, Any] = dict(dtype="bfloat16", causal=True, heads=4, kv_heads=2, head_dim=64, seq_len=256)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "causal-gqa": case(),
    "full-fp16": case(causal=False, dtype="float16", heads=2, kv_heads=2),
    "full-prefill-with-cache": case(causal=False, seq_len=96, kv_seq_len=192),
    "decode-over-a-cache": case(seq_len=1, kv_seq_len=256, batch=3),
    "head-dim-128-short": case(head_dim=128, seq_len=100),
}


def check(measured: Measured) -> None:
    """An ok record says sage quantized internally, by its own scheme, and names the call."""
    record = measured.record
    extra = record.extra
    assert extra["quantized"] == "internal" and extra["quant_scheme"]["k"].startswith("INT8 per block of 64 tokens")
    assert extra["bound_source"].startswith("emulation of SageAttention 1.0.6")
    assert "quant_error" not in extra  # attnbench quantized nothing: the kernel's error is all its own
    assert record.kernel.startswith("sageattention ") and "sageattn(tensor_layout=HND" in record.kernel


def test_its_error_is_more_than_bf16s_yet_within_its_own_bound(standin: types.ModuleType) -> None:
    """The INT8 scheme costs accuracy: sage would fail docs/conventions.md's bf16 bound that naive sets, and passes its
    own."""
    c = CASES["causal-gqa"]
    data = case_data(c)
    record = measure_one(c, SageBackend(), data)
    naive_bound = 2 * data.naive_errors["out"] + 1e-3
    assert record.status == "ok" and record.error_bound > naive_bound
    assert record.max_abs_error > data.naive_errors["out"]


def test_the_callers_k_is_never_changed(standin: types.ModuleType) -> None:
    """sageattn subtracts K's mean in place; the adapter hands it a copy, so the case's inputs stay as drawn."""
    c = CASES["full-prefill-with-cache"]
    data = case_data(c)
    assert measure_one(c, SageBackend(), data).status == "ok"
    assert torch.equal(data.inputs.k, make_inputs(c).k)


def test_phantom_keys_past_a_partial_block_are_a_mismatch(standin: types.ModuleType) -> None:
    """The 1.0.6 non-causal kernel scores the zero-filled keys of a partial last block as 0 (it masks them only
    when loading): attnbench runs it and the verdict says so."""
    record = measure_one(case(causal=False, seq_len=64, kv_seq_len=100), SageBackend())
    assert record.status == "mismatch"


@pytest.mark.parametrize("c,words", [
    (case(window=16), "no sliding window"),
    (case(seq_len=32, kv_seq_len=64), "needs qo_len == kv_len"),
    (case(head_dim=32), "head_dim 64, 96 or 128"),
    (case(dtype="float32"), "float32 is not mapped"),
    (make_case(dtype="float8_e4m3fn", head_dim=64), "SageAttention quantizes bf16/fp16 inputs itself"),
    (case(mode="fwd_bwd"), "forward-only"),
    (case(documents=4), "attnbench does not map documents onto sage"),
])
def test_what_sage_does_not_take_is_skipped_by_name(c: Case, words: str) -> None:
    assert words in refusal(SageBackend(), c)


def test_sage_is_said_to_need_a_gpu_where_it_is_installed(standin: types.ModuleType,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Installed (the stand-in, here without the CPU it is given to run on), on a CPU: the reason names the device.
    monkeypatch.setattr(SageBackend, "capabilities", dataclasses.replace(SageBackend.capabilities, devices=("cuda",)))
    assert SageBackend().availability("cpu") == "needs CUDA (SageAttention's kernels are Triton's, for a GPU)"


def _kwargs(change):  # type: ignore[no-untyped-def]
    def sabotage(mp: pytest.MonkeyPatch) -> None:
        module = sys.modules["sageattention"]
        real = module.sageattn
        mp.setattr(module, "sageattn", lambda q, k, v, **kw: real(q, k, v, **change(kw)))
    return sabotage


SABOTAGES = {
    "causal-dropped": (_kwargs(lambda kw: {**kw, "is_causal": False}), CASES["causal-gqa"]),
    "layout-nhd": (_kwargs(lambda kw: {**kw, "tensor_layout": "NHD"}), case(causal=False, heads=2, kv_heads=2,
                                                                             seq_len=128)),
    "scale-without-sqrt": (_kwargs(lambda kw: {**kw, "sm_scale": kw["sm_scale"] ** 2}), CASES["full-fp16"]),
}

STANDIN = Standin(name="sage", install=install, backends=(SageBackend,), cases=CASES, sabotages=SABOTAGES, check=check,
                  sabotage_marks=(pytest.mark.slow,))  # each sabotage measures through sage's emulation twice: seconds


def test_calls_match_sageattention_1_0_6(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "sageattention", importlib.import_module("tests.signatures.sageattention_1_0_6"))
    conformance = check_backend(SageBackend())
    assert conformance.state == "ok", conformance.summary
