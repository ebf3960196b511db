"""sdpa-flash-fa4 through stand-ins of torch's FA4 route and flash-attn-4, at the shapes of the H200 run's libraries.

torch 2.11.0's route (torch/nn/attention/_fa4.py, recorded in tests/signatures/torch_2_11_fa4.py) hands SDPA's flash
call to flash-attn-4's `_flash_attn_fwd` in (batch, seqlen, heads, head_dim) with these keywords and unpacks
`out, lse` from it (line 206). flash-attn-4 4.0.0b36's `_flash_attn_fwd` returns five values (interface.py lines 906
and 1966: `out, lse, p, row_max, o_lo`); 4.0.0b18 and earlier returned `out, lse`. On the H200 every sdpa-flash-fa4
case errored with the ValueError that unpacking gives; attnbench now reads both sides before the call and skips.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.nn import attention

import attnbench.backends.conformance as conformance
from attnbench.backends.conformance import Unpack, unpacks_of
from attnbench.backends.sdpa import FA4_ROUTE_CALLS, SdpaFlashFa4, flash_impl_problem
from attnbench.records.results import stored_lines
from tests.helpers import make_case, measure_one, on_cpu_too
from tests.test_conformance import Spy

H200_FA4 = Path(__file__).parent.parent / "reports" / "NVIDIA-H200-20261204-c671d98" / "fa4"
FA4_MODULE = "flash_attn.cute.interface"
VERSIONS = {"torch.nn.attention._fa4": "torch 2.11.0+cu130", FA4_MODULE: "flash-attn-4 4.0.0b36"}


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None,
           causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention's forward in its own layout (B, S, H, D), K/V heads shared by consecutive query heads, causal
    from the bottom-right corner; (out, lse of shape (B, H, Sq))."""
    group = q.shape[2] // k.shape[2]
    k, v = (t.repeat_interleave(group, dim=2).float() for t in (k, v))
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k) * (scale or q.shape[-1] ** -0.5)
    if causal:
        sq, sk = scores.shape[-2:]
        keep = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = scores.logsumexp(-1)
    out = torch.einsum("bhqk,bkhd->bqhd", (scores - lse[..., None]).exp(), v)
    return out.to(q.dtype), lse


def fa4_module(returns: int) -> types.ModuleType:
    """flash-attn-4's interface with `_flash_attn_fwd` returning (out, lse) as 4.0.0b18 does (`returns=2`), or
    (out, lse, p, row_max, o_lo) as 4.0.0b36 does (`returns=5`)."""
    calls: list[int] = []

    def fwd_b18(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, softmax_scale=None, causal=False,
                window_size_left=None, window_size_right=None, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        calls.append(1)
        o, lse = attend(q, k, v, softmax_scale, causal)
        if out is not None:
            o = out.copy_(o)
        return o, lse

    def fwd_b36(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, softmax_scale=None, causal=False,
                window_size_left=None, window_size_right=None, return_lse=False, out=None):  # type: ignore[no-untyped-def]
        calls.append(1)
        o, lse = attend(q, k, v, softmax_scale, causal)
        if out is not None:
            o = out.copy_(o)
        p = row_max = o_lo = None  # filled only for its gathered backward
        return o, lse, p, row_max, o_lo

    def bwd(q, k, v, out, dout, lse, softmax_scale=None, causal=False, cu_seqlens_q=None, cu_seqlens_k=None,
            deterministic=False, learnable_sink=None):  # type: ignore[no-untyped-def]
        raise AssertionError("the stand-in route's backward runs through autograd")
        return (dq, dk, dv) if learnable_sink is None else (dq, dk, dv, dsink)  # noqa: F821 - its shape, as 4.0.0b36's

    module = types.ModuleType(FA4_MODULE)
    module._flash_attn_fwd = {2: fwd_b18, 5: fwd_b36}[returns]  # type: ignore[attr-defined]
    module._flash_attn_bwd = bwd  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def route_forward(query, key, value, cu_seq_q, cu_seq_k, scale, is_causal, window_size_left, window_size_right,
                  seqused_k, out=None):  # type: ignore[no-untyped-def]
    """torch 2.11.0's `_fa4_run_forward` as it behaves: the keywords it passes and its two-name unpacking."""
    module = importlib.import_module(FA4_MODULE)
    kwargs = {"softmax_scale": scale, "causal": is_causal, "window_size_left": window_size_left,
              "window_size_right": window_size_right, "return_lse": True, "cu_seqlens_q": cu_seq_q,
              "cu_seqlens_k": cu_seq_k, "seqused_k": seqused_k, "out": out}
    out, lse = module._flash_attn_fwd(query, key, value, **kwargs)
    return out, lse.contiguous()


def routed_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):  # type: ignore[no-untyped-def]
    """SDPA's flash call with FA4 active, as torch 2.11's `_fa4_scaled_dot_product_flash_attention_forward_impl`
    makes it: (B, H, S, D) seen as (B, S, H, D), the output written into a tensor laid out like the query."""
    assert attention.current_flash_attention_impl() == "FA4" and attn_mask is None
    out = torch.empty_like(query)
    q, k, v, out_bshd = (t.transpose(1, 2) for t in (query, key, value, out))
    sys.modules["torch.nn.attention._fa4"]._fa4_run_forward(q, k, v, None, None, scale, is_causal, None, None, None,
                                                            out_bshd)
    return out


@pytest.fixture
def route(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str | None]]:
    """torch's FA4 route on a CPU: its registry (list, activate, restore), its `_fa4_run_forward` and SDPA's flash call
    stood in; sdpa-flash-fa4 allowed on CPU."""
    import torch.nn.attention._fa4 as route_module
    import torch.nn.functional as F

    active: dict[str, str | None] = {"impl": None}
    monkeypatch.setattr(attention, "list_flash_attention_impls", lambda: ["FA3", "FA4"])
    monkeypatch.setattr(attention, "activate_flash_attention_impl", lambda impl: active.update(impl=impl))
    monkeypatch.setattr(attention, "restore_flash_attention_impl", lambda _raise_warn=True: active.update(impl=None))
    monkeypatch.setattr(attention, "current_flash_attention_impl", lambda: active["impl"])
    monkeypatch.setattr(route_module, "_fa4_run_forward", route_forward)
    monkeypatch.setattr(F, "scaled_dot_product_attention", routed_sdpa)
    on_cpu_too(monkeypatch, SdpaFlashFa4)
    monkeypatch.setattr(SdpaFlashFa4, "availability", lambda self, device: flash_impl_problem("FA4"))
    flash_impl_problem.cache_clear()
    yield active
    flash_impl_problem.cache_clear()


H200_CASE = dict(dtype="bfloat16", causal=True, heads=16, kv_heads=4, head_dim=32, seq_len=64)  # its GQA 16/4


def h200_reasons() -> set[str]:
    records = stored_lines(H200_FA4)
    return {r["reason"] for r in records if r["backend"] == "sdpa-flash-fa4"}


def test_the_stand_in_route_unpacks_as_torch_2_11_does() -> None:
    recorded = importlib.import_module("tests.signatures.torch_2_11_fa4")
    assert unpacks_of(route_forward, "_flash_attn_fwd") == unpacks_of(recorded._fa4_run_forward, "_flash_attn_fwd")
    assert unpacks_of(route_forward, "_flash_attn_fwd") == [Unpack(2)]


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_before_the_check_4_0_0b36_errors_as_on_the_h200(route: dict, monkeypatch: pytest.MonkeyPatch,
                                                         mode: str) -> None:
    """Without the return check (the adapter as it ran on the H200), the route's unpacking raises the H200's error."""
    fa4 = fa4_module(returns=5)
    monkeypatch.setitem(sys.modules, FA4_MODULE, fa4)
    monkeypatch.setattr(SdpaFlashFa4, "route_calls", ())
    record = measure_one(make_case(**H200_CASE, mode=mode), SdpaFlashFa4())
    assert (record.status, {record.reason}) == ("error", h200_reasons())
    assert h200_reasons() == {"ValueError: too many values to unpack (expected 2)"}
    assert fa4.calls and route["impl"] is None  # it was called, and FA2 was restored


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_4_0_0b36_is_skipped_before_the_call_naming_both_libraries(route: dict, monkeypatch: pytest.MonkeyPatch,
                                                                   mode: str) -> None:
    fa4 = fa4_module(returns=5)
    monkeypatch.setitem(sys.modules, FA4_MODULE, fa4)
    monkeypatch.setattr(conformance, "installed_as", VERSIONS.get)
    record = measure_one(make_case(**H200_CASE, mode=mode), SdpaFlashFa4())
    assert record.status == "skipped"
    assert record.reason == (
        "the installed libraries do not fit each other: torch 2.11.0+cu130's torch.nn.attention._fa4._fa4_run_forward "
        "unpacks 2 values from flash_attn.cute.interface._flash_attn_fwd, which returns 5 in flash-attn-4 4.0.0b36 "
        "(return (o, lse, p, row_max, o_lo)); install versions that agree")
    assert fa4.calls == [] and route["impl"] is None  # judged before FA4 was activated or called


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_an_fa4_returning_out_and_lse_is_measured_and_called_as_declared(route: dict,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         mode: str) -> None:
    fa4 = fa4_module(returns=2)
    spy = Spy(fa4._flash_attn_fwd)
    spy.__wrapped__ = fa4._flash_attn_fwd  # conformance reads the function behind the spy
    fa4._flash_attn_fwd = spy
    monkeypatch.setitem(sys.modules, FA4_MODULE, fa4)
    record = measure_one(make_case(**H200_CASE, mode=mode), SdpaFlashFa4())
    assert record.status == "ok", record.reason
    assert record.max_abs_error is not None and record.max_abs_error <= record.error_bound
    spy.assert_declared(FA4_ROUTE_CALLS[0])
