"""sdpa-fp8: PyTorch's quantized SDPA entry point, found by its signature. On this CPU torch it exists, takes the
descales, and has no CPU kernel (skipped, saying so); against a stand-in with the entry point's documented semantics
(BHSD, (batch, kv_heads) float32 descales, FA3's numerics: tests/test_flash_fp8_standin.py) the mapping is checked."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

import attnbench.backends.sdpa_fp8 as sdpa_fp8
from attnbench.backends.base import refusal
from attnbench.backends.conformance import check_backend
from attnbench.backends.sdpa_fp8 import SdpaFp8Backend
from tests.fp8_inputs import distinct_scales
from tests.helpers import assert_sabotage_caught, make_case, measure_one
from tests.test_flash_fp8_standin import attend


def test_this_torch_has_the_entry_point_but_no_cpu_kernel() -> None:
    assert check_backend(SdpaFp8Backend()).state == "ok"  # torch 2.13's signature takes what the adapter passes
    reason = SdpaFp8Backend().availability("cpu")
    assert reason.startswith("needs CUDA (aten::_scaled_dot_product_flash_attention.quantized has no CPU kernel")
    record = measure_one(make_case(dtype="float8_e4m3fn"), SdpaFp8Backend())
    assert record.status == "skipped" and record.reason == reason


def test_a_torch_without_it_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdpa_fp8, "FUNCTION", "_not_there")
    assert "has no quantized SDPA entry point" in SdpaFp8Backend().availability("cuda")


def standin_entry(query, key, value, is_causal=False, scale=None, q_descale=None, k_descale=None,  # type: ignore[no-untyped-def]
                  v_descale=None, **kw):
    for t in (q_descale, k_descale, v_descale):
        if t is None or t.dtype != torch.float32 or tuple(t.shape) != (query.shape[0], key.shape[1]):
            raise ValueError("q_descale must be a 2D tensor with shape (batch_size, num_kv_heads)")
    descales = (q_descale, k_descale, v_descale)
    rows = [attend(query[b].transpose(0, 1), key[b].transpose(0, 1), value[b].transpose(0, 1), descales, b, scale,
                   is_causal, (-1, -1)) for b in range(query.shape[0])]
    return torch.stack(rows).transpose(1, 2)  # (B, H, Sq, D)


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdpa_fp8, "entry_point", lambda: standin_entry)
    monkeypatch.setattr(SdpaFp8Backend, "availability", lambda self, device: None)
    monkeypatch.setattr(sdpa_fp8, "flash_pinned", lambda impl, pinned: contextlib.nullcontext())
    distinct_scales(monkeypatch)


CASES = {"tensor-causal": make_case(dtype="float8_e4m3fn", causal=True, batch=2, heads=4, kv_heads=2, head_dim=16),
         "head-full": make_case(dtype="float8_e4m3fn", quant="head", batch=2, heads=4, kv_heads=2, head_dim=16)}


@pytest.mark.parametrize("name", list(CASES))
def test_the_mapping_through_a_standin(standin: None, name: str) -> None:
    record = measure_one(CASES[name], SdpaFp8Backend())
    assert record.status == "ok", record.reason
    assert record.extra["bound_source"].startswith("emulation of PyTorch's quantized SDPA on FlashAttention 3's")


@pytest.mark.parametrize("change", ["swap-k-v", "transpose-heads"])
def test_a_wrong_descale_is_caught(standin: None, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    real = sdpa_fp8.fp8.per_batch_kv_head

    def wrong(scales: Any, name: str, c: Any) -> torch.Tensor:
        if change == "swap-k-v":
            return real(scales, {"k": "v", "v": "k"}.get(name, name), c)
        return real(scales, name, c).flip(1).contiguous()

    assert_sabotage_caught(CASES["head-full"], SdpaFp8Backend,
                           lambda mp: mp.setattr(sdpa_fp8.fp8, "per_batch_kv_head", wrong), monkeypatch)


@pytest.mark.parametrize("c,words", [
    (make_case(dtype="float8_e5m2"), "float8_e4m3fn only"),
    (make_case(dtype="float8_e4m3fn", quant="block", quant_block=16), "per (batch, KV head) only"),
    (make_case(dtype="float8_e4m3fn", causal=True, window=4), "has no window"),
    (make_case(dtype="float8_e4m3fn", causal=True, seq_len=16, kv_seq_len=64), "is_causal is top-left"),
    (make_case(dtype="bfloat16"), "runs FP8 cases only"),
])
def test_what_it_does_not_take_is_skipped_by_name(c: Any, words: str) -> None:
    assert words in refusal(SdpaFp8Backend(), c)
