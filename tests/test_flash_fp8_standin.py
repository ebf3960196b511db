"""FlashAttention 3's FP8 forward through the flash-attn-3 adapter, against a stand-in `flash_attn_interface`.

The stand-in is written from flash-attention's hopper/ sources, not from attnbench.core.quant: Q, K and V float8_e4m3fn
in (batch, seqlen, heads, head_dim); q_descale, k_descale, v_descale float32 of shape (batch_size, num_heads_k) — the
varlen batch being the packed sequences (flash_api.cpp CHECK_SHAPE(q_descale, batch_size, num_heads_k)) — read at
[b, h // (H / H_k)]; the scores are Q·Kᵀ · softmax_scale · q_descale · k_descale; P = exp(s − max) · 2^8 rounded to
e4m3 (softmax.h Max_offset 8) times V, times v_descale over the row sum of the unrounded P · 2^8; the output bf16
("FP8 inputs produce BF16 outputs"). Masks, varlen and the paged cache are FlashAttention's (tests/test_flash_standin).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

import attnbench.backends.flash as flash
from attnbench.backends.base import refusal
from attnbench.backends.flash import FlashAttn3, FlashAttn4
from attnbench.core.case import Case
from tests.fp8_inputs import distinct_scales
from tests.helpers import Measured, Standin, make_case, measure_one, on_cpu_too

E4M3 = torch.float8_e4m3fn


def attend(q, k, v, descales, row, softmax_scale, causal, window_size):  # type: ignore[no-untyped-def]
    """One sequence: q (Sq, H, D), k/v (Sk, H_k, D) in e4m3 → (Sq, H, Dv) bf16, with descale row `row`."""
    if q.dtype != E4M3 or k.dtype != E4M3 or v.dtype != E4M3:
        raise RuntimeError("FlashAttention only supports fp16, bf16 and fp8_e4m3 data type, all inputs the same")
    sq, heads, d = q.shape
    sk, kv_heads, _ = k.shape
    g = heads // kv_heads
    qd, kd, vd = (t[row].repeat_interleave(g)[:, None, None].double() for t in descales)  # (H, 1, 1)
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    qh = q.double().transpose(0, 1)
    kh = k.double().repeat_interleave(g, dim=1).transpose(0, 1)
    vh = v.double().repeat_interleave(g, dim=1).transpose(0, 1)
    s = (qh @ kh.transpose(-1, -2)) * (softmax_scale * qd * kd)
    s = s.masked_fill(~keep, float("-inf"))
    top = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    p = torch.exp(s - top) * 256.0
    p8 = p.float().to(E4M3).double()
    out = (p8 @ vh) * vd / p.sum(-1, keepdim=True)
    return torch.nan_to_num(out, nan=0.0).transpose(0, 1).to(torch.bfloat16)


def checked(q, descales, batch: int, kv_heads: int) -> tuple:  # type: ignore[no-untyped-def]
    if q.dtype == E4M3:
        if any(t is None for t in descales):
            raise AssertionError("the adapter must pass all three descales for FP8 inputs")
        for t in descales:
            if t.dtype != torch.float32 or tuple(t.shape) != (batch, kv_heads):
                raise RuntimeError(f"q_descale must have shape ({batch}, {kv_heads}) and dtype float32, got "
                                   f"{tuple(t.shape)} {t.dtype}")
    return descales


def make_fa3() -> types.ModuleType:
    module = types.ModuleType("flash_attn_interface")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                        v_descale=None, window_size=(-1, -1), **kw):  # type: ignore[no-untyped-def]
        d = checked(q, (q_descale, k_descale, v_descale), q.shape[0], k.shape[2])
        scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
        return torch.stack([attend(q[b], k[b], v[b], d, b, scale, causal, window_size) for b in range(q.shape[0])])

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None,
                               window_size=(-1, -1), **kw):  # type: ignore[no-untyped-def]
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        d = checked(q, (q_descale, k_descale, v_descale), len(cq) - 1, k.shape[1])
        return torch.cat([attend(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], d, i, softmax_scale,
                                 causal, window_size) for i in range(len(cq) - 1)])

    def flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, softmax_scale=None,
                                causal=False, q_descale=None, k_descale=None, v_descale=None, window_size=(-1, -1),
                                **kw):  # type: ignore[no-untyped-def]
        d = checked(q, (q_descale, k_descale, v_descale), q.shape[0], k_cache.shape[2])
        page = k_cache.shape[1]
        outs = []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            pages = page_table[b, : -(-n // page)].tolist()
            kb, vb = (torch.cat([t[p] for p in pages])[:n] for t in (k_cache, v_cache))
            outs.append(attend(q[b], kb, vb, d, b, softmax_scale, causal, window_size))
        return torch.stack(outs)

    module.flash_attn_func = flash_attn_func
    module.flash_attn_varlen_func = flash_attn_varlen_func
    module.flash_attn_with_kvcache = flash_attn_with_kvcache
    return module


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """FA3's stand-in in place, the adapters allowed onto the CPU, and a distinct scale for each tensor."""
    monkeypatch.setitem(sys.modules, "flash_attn_interface", make_fa3())
    on_cpu_too(monkeypatch, flash.FlashAttn2, flash.FlashAttn3, flash.FlashAttn4)
    distinct_scales(monkeypatch)


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch)


def case(**overrides: Any) -> Case:
    fields: dict[str, Any] = dict(dtype="float8_e4m3fn", causal=True, heads=4, kv_heads=2, head_dim=16, seq_len=48,
                                  batch=2)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "tensor-causal": case(),
    "head-full-mha": case(quant="head", causal=False, heads=2, kv_heads=2),
    "head-window-prefill-with-cache": case(quant="head", window=7, seq_len=20, kv_seq_len=60),
    "head-decode-gqa": case(quant="head", seq_len=1, kv_seq_len=64, heads=8, kv_heads=2),
    "documents-head": case(quant="head", documents=3, doc_lengths="random"),
    "ragged-kv-head": case(quant="head", seq_len=4, kv_seq_len=70, kv_lengths="random", batch=3),
    "paged-head": case(quant="head", seq_len=1, kv_seq_len=70, kv_lengths="random", page_size=16, batch=3),
}


def check(measured: Measured) -> None:
    """attnbench quantized the inputs, FA3 answered in bf16, and the bound and the kernel name its FP8 call."""
    record = measured.record
    assert record.extra["out_dtype"] == "bfloat16" and record.extra["quantized"] == "attnbench"
    assert record.extra["bound_source"].startswith("emulation of FlashAttention 3's FP8 forward")
    assert "float8_e4m3fn, q/k/v_descale" in record.kernel


@pytest.mark.parametrize("c,words", [
    (case(dtype="float8_e5m2"), "FlashAttention 3 takes FP8 as float8_e4m3fn only"),
    (case(quant="block", quant_block=16), "FlashAttention 3 takes one descale per (batch, KV head)"),
    (make_case(dtype="bfloat16", kv_dtype="float8_e4m3fn", seq_len=1, kv_seq_len=64), "Q, K and V in one dtype"),
])
def test_fa3_skips_what_it_does_not_take_by_name(standin: None, c: Case, words: str) -> None:
    record = measure_one(c, FlashAttn3())
    assert record.status == "skipped" and words in record.reason


def test_fa4_takes_no_fp8() -> None:
    assert "FlashAttention 4's FP8 forward runs on SM100 only" in refusal(FlashAttn4(), case())


def _descales(change):  # type: ignore[no-untyped-def]
    """A sabotage: FA3 gets `change` of the descales the adapter passes it."""
    def sabotage(mp: pytest.MonkeyPatch) -> None:
        real = flash.descale_arguments
        mp.setattr(flash, "descale_arguments", lambda c, scales: change(real(c, scales)))
    return sabotage


SABOTAGES = {
    "q-descale-for-k": (_descales(lambda d: {**d, "k_descale": d["q_descale"]}), CASES["tensor-causal"]),
    "k-and-v-descales-swapped": (_descales(lambda d: {**d, "k_descale": d["v_descale"], "v_descale": d["k_descale"]}),
                                 CASES["tensor-causal"]),
    "descale-applied-twice": (_descales(lambda d: {**d, "q_descale": d["q_descale"] ** 2,
                                                   "k_descale": d["k_descale"] ** 2}), CASES["tensor-causal"]),
    "scale-not-descale": (_descales(lambda d: {name: 1 / f for name, f in d.items()}), CASES["head-full-mha"]),
    "per-head-factors-swapped": (_descales(lambda d: {name: f.flip(1).contiguous() for name, f in d.items()}),
                                 CASES["head-full-mha"]),
    "batch-rows-swapped": (_descales(lambda d: {name: f.flip(0).contiguous() for name, f in d.items()}),
                           CASES["head-decode-gqa"]),
    "documents-read-the-wrong-row": (_descales(lambda d: {name: f.roll(1, 0).contiguous() for name, f in d.items()}),
                                     CASES["documents-head"]),
}
STANDIN = Standin(name="flash-fp8", install=install, backends=(FlashAttn3,), cases=CASES, sabotages=SABOTAGES,
                  check=check)
