"""The FlashAttention adapters against stand-in modules that implement FlashAttention's documented semantics.

The stand-in is written from FlashAttention's docstrings, not from attnbench's Case: layout
(batch, seqlen, nheads, headdim); K/V with fewer heads, query heads 0..g-1 reading KV head 0 and so on;
query i keeps keys in [i + Sk - Sq - left, i + Sk - Sq + right]; causal forces right = 0; an unbounded side
is -1 (FA2/FA3) or None (FA4, where -1 would be a bound); fully masked rows output zero; fp16/bf16 only;
softcap > 0 makes the scaled score softcap·tanh(s/softcap); alibi_slopes (fp32, one per query head) then adds
-slope·|i + Sk - Sq - j|. flash_attn_varlen_func runs each sequence cu_seqlens_q[i]:cu_seqlens_q[i+1] (queries) /
cu_seqlens_k[i]:cu_seqlens_k[i+1] (keys) of packed (tokens, heads, head_dim) as its own batch of one;
flash_attn_with_kvcache reads request b's first cache_seqlens[b] keys from the pages block_table[b] (FA2) or
page_table[b] (FA3) of a (pages, page_size, heads, head_dim) cache, its Sq queries the last of them.
FA3's and FA4's `qv` (absorbed MLA): the scores become (q·k + qv·v)·softmax_scale, its default
(headdim + headdim_v)^-1/2 (hopper/test_util.py attention_ref); FA3 refuses it unless headdim <= 64 and
headdim_v >= 256 (flash_api.cpp: RuntimeError "q_v is only supported for ..."), FA4 asserts headdim 64, headdim_v 512
and no local window (interface.py, the head sizes without a message); FA2 has no qv.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import types

import pytest
import torch

import attnbench.backends.flash as flash
import attnbench.backends.packing as packing
from attnbench.backends.flash import FlashAttn2, FlashAttn3, FlashAttn4
from attnbench.core.case import Case
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import (
    Measured,
    Phases,
    PhaseTimer,
    Standin,
    band_keep,
    make_case,
    measure_one,
    on_cpu_too,
)


def check_qv(rule: str | None, d: int, dv: int, window_size: tuple) -> None:  # type: ignore[type-arg]
    """The library's own refusals of a qv call: FA3's RuntimeErrors, FA4's asserts; FA2 has no such parameter."""
    if rule is None:
        raise TypeError("flash_attn_func() got an unexpected keyword argument 'qv'")  # our bug, never a refusal
    if rule == "fa3" and d > 64:
        raise RuntimeError("q_v is only supported for head_size <= 64")
    if rule == "fa3" and dv < 256:
        raise RuntimeError("q_v is only supported for hdim_v >= 256.")
    if rule == "fa4":
        assert dv == 512 and d == 64  # interface.py asserts these without a message
        assert window_size == (None, None), "local not yet supported with qv"


def refuse_flash_inputs(q, k, v, qv, qv_rule: str | None, window_size) -> None:  # type: ignore[no-untyped-def]
    """The library's refusals before any arithmetic: dtype, head grouping, and a qv call's own rules."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
    if q.shape[2] % k.shape[2]:
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")
    if qv is not None:
        check_qv(qv_rule, q.shape[3], v.shape[-1], tuple(window_size))
        if qv.shape != (*q.shape[:-1], v.shape[-1]):
            raise RuntimeError("qv must have shape (batch_size, seqlen, nheads, headdim_v)")


def standin_flash_attn_func(none_is_unbounded: bool, returns_lse: bool, calls: list[int] | None = None,
                            qv_rule: str | None = None):
    """A flash_attn_func with the library's documented semantics, computed with explicit masks on CPU."""

    def bound(x: int | None) -> int | None:
        """The library's unbounded side (None for FA3/FA4, negative for FA2) as None."""
        return None if (x is None if none_is_unbounded else x < 0) else x

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, qv=None, **kw):
        if calls is not None:
            calls.append(1)
        refuse_flash_inputs(q, k, v, qv, qv_rule, window_size)
        batch, sq, heads, d = q.shape
        sk, kv_heads = k.shape[1], k.shape[2]
        left, right = window_size
        keep, i, j = band_keep(sq, sk, bound(left), 0 if causal else bound(right))
        scale = (d + (0 if qv is None else qv.shape[-1])) ** -0.5 if softmax_scale is None else softmax_scale
        qh = q.float().permute(0, 2, 1, 3)  # (B, H, Sq, D)
        kh = k.float().repeat_interleave(heads // kv_heads, dim=2).permute(0, 2, 1, 3)
        vh = v.float().repeat_interleave(heads // kv_heads, dim=2).permute(0, 2, 1, 3)
        scores = qh @ kh.transpose(-1, -2) * scale
        if qv is not None:  # absorbed MLA: the latent query against V, which is K's latent part
            scores = scores + qv.float().permute(0, 2, 1, 3) @ vh.transpose(-1, -2) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        if alibi_slopes is not None:
            if alibi_slopes.dtype != torch.float32 or alibi_slopes.shape != (heads,):
                raise RuntimeError("ALiBi slopes must have dtype fp32 and shape (nheads,)")
            scores = scores - alibi_slopes[None, :, None, None] * (i - j).abs().float()
        scores = scores.masked_fill(~keep, float("-inf"))
        probs = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # a fully masked row outputs zero
        out = (probs @ vh).permute(0, 2, 1, 3).to(q.dtype)
        lse = torch.logsumexp(scores, -1)
        return (out, lse) if returns_lse else out

    return flash_attn_func


def need_int32(*tensors) -> None:  # type: ignore[no-untyped-def]
    for t in tensors:
        if t.dtype != torch.int32:
            raise TypeError(f"cu_seqlens / tables must be int32, got {t.dtype}")  # our bug, not a refusal


def standin_varlen_func(none_is_unbounded: bool, returns_lse: bool, calls: list[str] | None = None,  # type: ignore[no-untyped-def]
                        qv_rule: str | None = None):
    """flash_attn_varlen_func: each packed sequence through the dense stand-in as a batch of one."""
    dense = standin_flash_attn_func(none_is_unbounded, False, qv_rule=qv_rule)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_k=None, page_table=None, qv=None, **kw):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append("varlen")
        if page_table is not None:  # FA4: dense (B, Sq, H, D) queries over a (pages, page_size, H, D) pool
            assert cu_seqlens_k is None, "page_table is not supported with cu_seqlens_k"
            need_int32(page_table, seqused_k)
            page = v.shape[1]
            outs = []
            for b in range(q.shape[0]):
                n = int(seqused_k[b])
                pages = page_table[b, : -(-n // page)].tolist()
                kb, vb = (torch.cat([t[p] for p in pages] or [t[0, :0]])[:n] for t in (k, v))  # n = 0: no key
                latent = {} if qv is None else {"qv": qv[b:b + 1]}
                outs.append(dense(q[b:b + 1], kb[None], vb[None], **latent, **kw))
            out = torch.cat(outs)
            return (out, None) if returns_lse else out
        need_int32(cu_seqlens_q, cu_seqlens_k)
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        outs = []
        for i in range(len(cq) - 1):
            if cq[i + 1] - cq[i] > max_seqlen_q or ck[i + 1] - ck[i] > max_seqlen_k:
                raise AssertionError("a sequence longer than max_seqlen: the kernel would skip its rows")
            latent = {} if qv is None else {"qv": qv[None, cq[i]:cq[i + 1]]}
            outs.append(dense(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]], v[None, ck[i]:ck[i + 1]], **latent,
                              **kw)[0])
        out = torch.cat(outs)
        return (out, None) if returns_lse else out

    return flash_attn_varlen_func


def standin_kvcache_func(table_keyword: str, page_multiple: int, calls: list[str] | None = None,  # type: ignore[no-untyped-def]
                         qv_rule: str | None = None):
    """flash_attn_with_kvcache over a paged cache: request b's keys gathered from its pages, then the dense stand-in."""
    dense = standin_flash_attn_func(False, False, qv_rule=qv_rule)

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, qv=None, **kw):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append("kvcache")
        table = kw.pop(table_keyword)
        need_int32(cache_seqlens, table)
        page = k_cache.shape[1]
        if page % page_multiple:
            raise RuntimeError(f"Paged KV cache block size must be divisible by {page_multiple}")
        outs = []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            pages = table[b, : -(-n // page)].tolist()
            kb = torch.cat([k_cache[p] for p in pages] or [k_cache[0, :0]])[:n]  # a cache of 0 keys: none
            vb = torch.cat([v_cache[p] for p in pages] or [v_cache[0, :0]])[:n]
            latent = {} if qv is None else {"qv": qv[b:b + 1]}
            outs.append(dense(q[b:b + 1], kb[None], vb[None], **latent, **kw))
        return torch.cat(outs)

    return flash_attn_with_kvcache


def install(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Install flash_attn, flash_attn_interface and flash_attn.cute stand-ins; let the adapters run on CPU. Returns
    each library's calls: 1 for flash_attn_func, "varlen" and "kvcache" for the others."""
    calls: dict[str, list[int]] = {"fa2": [], "fa3": [], "fa4": []}
    fa2 = types.ModuleType("flash_attn")
    fa2.flash_attn_func = standin_flash_attn_func(False, False, calls["fa2"])
    fa2.flash_attn_varlen_func = standin_varlen_func(False, False, calls["fa2"])
    fa2.flash_attn_with_kvcache = standin_kvcache_func("block_table", 256, calls["fa2"])
    fa3 = types.ModuleType("flash_attn_interface")
    fa3.flash_attn_func = standin_flash_attn_func(False, False, calls["fa3"], qv_rule="fa3")
    fa3.flash_attn_varlen_func = standin_varlen_func(False, False, calls["fa3"], qv_rule="fa3")
    fa3.flash_attn_with_kvcache = standin_kvcache_func("page_table", 1, calls["fa3"], qv_rule="fa3")
    fa4 = types.ModuleType("flash_attn.cute")
    fa4.flash_attn_func = standin_flash_attn_func(True, True, calls["fa4"], qv_rule="fa4")
    fa4.flash_attn_varlen_func = standin_varlen_func(True, True, calls["fa4"], qv_rule="fa4")
    fa2.cute = fa4
    monkeypatch.setitem(sys.modules, "flash_attn", fa2)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa3)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", fa4)
    on_cpu_too(monkeypatch, flash.FlashAttn2, flash.FlashAttn3, flash.FlashAttn4)
    return calls


@pytest.fixture
def standins(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    return install(monkeypatch)


def case(dtype="bfloat16", sq=48, sk=None, heads=4, kv_heads=4, causal=True, window=None, mode="fwd", d=16) -> Case:
    """A small case; sk defaults to sq."""
    return make_case(device="cpu", dtype=dtype, batch=1, seq_len=sq, kv_seq_len=sk, heads=heads,
                     kv_heads=kv_heads, head_dim=d, causal=causal, window=window, mode=mode)


CASES = {
    "full": case(causal=False),
    "causal": case(causal=True),
    "causal-mqa-prefill-with-cache-fwd-bwd": case(causal=True, sq=20, sk=70, heads=4, kv_heads=1, mode="fwd_bwd"),
    "window-gqa-fp16": case(causal=True, window=5, sq=40, heads=6, kv_heads=2, dtype="float16"),
    "window-0-prefill-with-cache-fwd-bwd": case(causal=True, window=0, sq=30, sk=50, mode="fwd_bwd"),
    "two-sided-window-gqa-fwd-bwd": case(causal=False, window=6, sq=30, sk=45, heads=4, kv_heads=2, mode="fwd_bwd"),
    "decode-window-gqa": case(causal=True, window=3, sq=1, sk=64, heads=8, kv_heads=2),
}
ADAPTERS = [FlashAttn2, FlashAttn3, FlashAttn4]


def check(measured: Measured) -> None:
    assert measured.record.kv_expanded is False  # native GQA: K/V go in with their own heads


def test_kernel_field_names_the_call_and_its_window(standins) -> None:
    record = measure_one(case(causal=True, window=5), FlashAttn2())
    assert "flash_attn.flash_attn_func(causal=True, window_size=(5, 0)" in record.kernel
    record = measure_one(case(causal=False, window=5), FlashAttn4())
    assert "flash_attn.cute.flash_attn_func(causal=False, window_size=(5, 5)" in record.kernel


COMPILE_S = 0.05  # the stand-in's "compile": a sleep at a kernel's first call, as FA4's JIT costs at its first


def compiling_fa4(phases: Phases, compiles: list[tuple[str, str]], calls: list[str]):  # type: ignore[no-untyped-def]
    """FA4's flash_attn_func that compiles a forward and a backward kernel at their first use per signature.

    Each compile is noted as (kernel, phase it happened in), each forward call as its phase.
    """
    inner = standin_flash_attn_func(True, True)
    built: set[tuple] = set()

    def compile_once(key: tuple) -> None:
        if key not in built:
            built.add(key)
            compiles.append((key[0], phases.phase))
            time.sleep(COMPILE_S)

    def flash_attn_func(q, k, v, **kw):  # type: ignore[no-untyped-def]
        signature = (tuple(q.shape), tuple(k.shape), q.dtype, kw.get("causal"), kw.get("window_size"))
        compile_once(("fwd", *signature))
        calls.append(phases.phase)
        out, lse = inner(q, k, v, **kw)
        if out.requires_grad:
            out.register_hook(lambda grad: compile_once(("bwd", *signature)))
        return out, lse

    return flash_attn_func


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd", "bwd"])
def test_fa4_compiles_in_prepare_never_while_timed(standins, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    phases, compiles, calls = Phases(), [], []
    monkeypatch.setattr(sys.modules["flash_attn.cute"], "flash_attn_func", compiling_fa4(phases, compiles, calls))
    monkeypatch.setattr(FlashAttn4, "prepare", phases.during_prepare(FlashAttn4.prepare))
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)
    c = case(causal=True, window=4, mode=mode)
    record = measure(CaseData(c), FlashAttn4(), PhaseTimer(phases), Settings(RunInfo("f", "t"), settings))
    assert record.status == "ok", record.reason
    kernels = ["fwd"] if mode == "fwd" else ["fwd", "bwd"]
    assert compiles == [(kernel, "prepare") for kernel in kernels]  # built in prepare, and only there
    assert COMPILE_S * len(kernels) <= record.extra["compile_s"] < 60  # the compile's time is recorded, not timed
    assert calls.count("prepare") == 1  # the one warm call
    if mode != "bwd":  # bwd times the backward alone
        # three samples and the warm-up calls the sampler threw away, none of them compiling (a forward's checked
        # call is its warm-up, and one of the samples when it agreed with them)
        sampled_check = int(record.extra.get("check_sampled", False))
        assert record.samples == 3 and calls.count("timed") == 3 - sampled_check + record.extra["warmup_calls"]


def _shifted_window(real):
    def wrong(c, unbounded):
        args = real(c, unbounded)
        left, right = args["window_size"]
        return {**args, "window_size": (left - 1 if left not in (None, -1) else left, right)}
    return wrong


def _one_sided(real):
    def wrong(c, unbounded):
        args = real(c, unbounded)
        left, _ = args["window_size"]
        return {**args, "window_size": (left, 0)}
    return wrong


SABOTAGES = {
    # window one key short: (W - 1, 0) instead of (W, 0)
    "window-off-by-one": (lambda mp: mp.setattr(flash, "flash_window_args", _shifted_window(flash.flash_window_args)),
                          case(causal=True, window=5, sq=40)),
    # a two-sided window passed as one-sided
    "two-sided-as-causal": (lambda mp: mp.setattr(flash, "flash_window_args", _one_sided(flash.flash_window_args)),
                            case(causal=False, window=5, sq=40)),
    # canonical (B, H, S, D) handed over as if it were (B, S, H, D): S == H so only the values can tell
    "layout-not-transposed": (lambda mp: (mp.setattr(flash, "to_flash_layout", lambda t: t.contiguous()),
                                          mp.setattr(flash, "from_flash_layout", lambda t: t)),
                              case(causal=True, sq=8, heads=8, kv_heads=8)),
}



def test_fa4_spelling_of_unbounded_matters(standins, monkeypatch: pytest.MonkeyPatch) -> None:
    """FA4 reads -1 as a bound: passing FA2's spelling of "no limit" would be caught."""
    monkeypatch.setattr(FlashAttn4, "spec", dataclasses.replace(FlashAttn4.spec, unbounded=-1))
    record = measure_one(case(causal=True), FlashAttn4())
    assert record.status == "mismatch"


# ---- reasons ---------------------------------------------------------------------------------
@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_reason_float32(adapter) -> None:
    assert adapter().unsupported(case(dtype="float32")) == (
        "float32 is not supported (FlashAttention takes float16 or bfloat16)")


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_reason_head_dim(adapter) -> None:
    assert adapter().unsupported(case(d=320)) == "head_dim 320 > 256"
    assert adapter().unsupported(case(d=256)) is None


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_reason_not_installed(monkeypatch: pytest.MonkeyPatch, adapter) -> None:
    for module in ("flash_attn", "flash_attn_interface", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    reason = adapter().availability("cuda")
    assert reason.startswith(f"{adapter.library} is not installed")


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_reason_needs_cuda(monkeypatch: pytest.MonkeyPatch, adapter) -> None:
    fake = types.ModuleType(adapter.spec.module)
    fake.flash_attn_func = standin_flash_attn_func(False, False)
    monkeypatch.setitem(sys.modules, adapter.spec.module, fake)
    if adapter.spec.module == "flash_attn.cute":
        monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))
    assert adapter().availability("cpu") == "needs CUDA (FlashAttention has no CPU kernel)"


def test_reason_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("flash_attn")
    fake.flash_attn_func = standin_flash_attn_func(False, False)
    monkeypatch.setitem(sys.modules, "flash_attn", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    assert FlashAttn2().availability("cuda") == "needs compute capability ≥ 8.0 (this GPU: 7.5)"


def test_library_refusal_becomes_the_skip_reason(standins, monkeypatch: pytest.MonkeyPatch) -> None:
    """If our own checks let a case through, the library's input check is recorded as `skipped`."""
    monkeypatch.setattr(FlashAttn2, "unsupported", lambda self, c: None)
    record = measure_one(case(dtype="float32"), FlashAttn2())
    assert record.status == "skipped"
    assert record.reason == "flash-attn refused: FlashAttention only support fp16 and bf16 data type"


def test_reason_without_a_usable_gpu_and_the_capability_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("flash_attn")
    fake.flash_attn_func = standin_flash_attn_func(False, False)
    monkeypatch.setitem(sys.modules, "flash_attn", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert FlashAttn2().availability("cuda") == "needs CUDA (torch.cuda.is_available() is False)"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert FlashAttn2().availability("cuda") is None  # sm80 itself is supported


def test_only_the_librarys_own_refusals_become_skips() -> None:
    backend = FlashAttn2()
    assert backend.skip_reason(RuntimeError("FlashAttention only support fp16 and bf16 data type"), []) == (
        "flash-attn refused: FlashAttention only support fp16 and bf16 data type")
    assert backend.skip_reason(AssertionError("head_dim should be a multiple of 8"), []) is not None
    assert backend.skip_reason(RuntimeError("CUDA error: an illegal memory access was encountered"), []) is None
    assert backend.skip_reason(TypeError("only support keyword arguments"), []) is None  # our bug, not a refusal


def test_kernel_field_says_native_gqa(standins) -> None:
    gqa = measure_one(case(heads=8, kv_heads=2, causal=True), FlashAttn2())
    assert gqa.kernel.endswith("flash_attn.flash_attn_func(causal=True, window_size=(-1, -1), native GQA 8/2)")
    mha = measure_one(case(causal=True), FlashAttn2())
    assert mha.kernel.endswith("flash_attn.flash_attn_func(causal=True, window_size=(-1, -1))")


# ---- workload axes: varlen, paged KV cache, softcap, ALiBi, head_dim_v ------------------------------------------
def axis_case(**overrides) -> Case:  # type: ignore[no-untyped-def]
    fields = dict(dtype="bfloat16", seq_len=48, heads=4, kv_heads=4, head_dim=16, causal=True)
    fields.update(overrides)
    return make_case(**fields)


AXIS_CASES = {
    "documents": axis_case(documents=3),
    "documents-random-window-gqa": axis_case(documents=5, doc_lengths="random", window=6, heads=4, kv_heads=2),
    "documents-two-sided-bwd": axis_case(causal=False, window=5, documents=4, doc_lengths="random", mode="fwd_bwd"),
    "ragged-kv": axis_case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", heads=4, kv_heads=1),
    "ragged-decode-window": axis_case(batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random", window=9),
    "softcap": axis_case(softcap=2.0),
    "softcap-documents-bwd": axis_case(softcap=3.0, documents=3, mode="fwd_bwd"),
    "alibi": axis_case(alibi=True, heads=6, kv_heads=3),
    "alibi-two-sided-ragged": axis_case(causal=False, alibi=True, batch=2, seq_len=8, kv_seq_len=40,
                                        kv_lengths="random"),
    "alibi-softcap": axis_case(alibi=True, softcap=2.0),
    "head-dim-v": axis_case(head_dim_v=8, heads=4, kv_heads=2),
    "paged-256": axis_case(batch=2, seq_len=4, kv_seq_len=600, kv_lengths="random", page_size=256, heads=2,
                           kv_heads=1),
    "paged-256-decode-window-softcap": axis_case(batch=3, seq_len=1, kv_seq_len=700, kv_lengths="random",
                                                 page_size=256, window=100, softcap=5.0, heads=2, kv_heads=2),
    "paged-16": axis_case(batch=3, seq_len=4, kv_seq_len=70, kv_lengths="random", page_size=16, heads=4,
                          kv_heads=2),
    # what FlashAttention's varlen and KV-cache tests run: zero-length sequences, cu_seqlens_k != cu_seqlens_q
    # (documents over a cached prefix, some with fewer keys than queries), caches shorter than the queries
    "zero-length-documents": axis_case(documents=4, doc_lengths="explicit", doc_lens=(0, 30, 0, 18), mode="fwd_bwd"),
    "documents-prefix": axis_case(kv_seq_len=80, documents=3, heads=4, kv_heads=2, mode="fwd_bwd"),
    "documents-prefix-pairs": axis_case(kv_seq_len=50, documents=4, doc_lengths="explicit", doc_lens=(20, 0, 16, 12),
                                        doc_kv_lens=(24, 6, 8, 12), window=5),
    "short-caches": axis_case(batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(4, 0, 24),
                              mode="fwd_bwd"),
    "short-caches-paged": axis_case(batch=3, seq_len=8, kv_seq_len=600, kv_lengths="explicit", kv_lens=(5, 0, 513),
                                    page_size=256),
    "fewer-keys-than-queries": axis_case(kv_seq_len=20, causal=True, heads=4, kv_heads=1),
}
# The axes each library maps, and the words of its reason for each it does not (anything else must be ok).
AXIS_SKIPS = {
    "flash-attn": {"head_dim_v": "needs V's head size equal", "page_size=16": "multiple of 256 tokens (page_size 16)"},
    "flash-attn-3": {"alibi": "FlashAttention 3 has no alibi_slopes"},
    "flash-attn-4": {"alibi": "FlashAttention 4 has no alibi_slopes"},
}


def expected_axis_skip(name: str, c: Case) -> str | None:
    rules = AXIS_SKIPS[name]
    if c.page_size is not None and f"page_size={c.page_size}" in rules:
        return rules[f"page_size={c.page_size}"]
    return next((rules[axis] for axis in c.workload_axes if axis in rules), None)


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
@pytest.mark.parametrize("name", list(AXIS_CASES))
def test_each_workload_axis_matches_the_reference_or_skips_by_name(standins, adapter, name: str) -> None:
    c = AXIS_CASES[name]
    record = measure_one(c, adapter())
    skip = expected_axis_skip(adapter.name, c)
    if skip is None:
        assert record.status == "ok", (record.status, record.reason)
        assert record.grad_checked == c.needs_grad
    else:
        assert record.status == "skipped" and skip in record.reason, (record.status, record.reason)


def test_entry_point_follows_the_axes(standins) -> None:
    calls = standins["fa2"]
    assert measure_one(AXIS_CASES["documents"], FlashAttn2()).status == "ok" and "varlen" in calls and 1 not in calls
    calls.clear()
    assert measure_one(AXIS_CASES["paged-256"], FlashAttn2()).status == "ok" and calls == ["kvcache"] * len(calls)
    calls.clear()
    assert measure_one(AXIS_CASES["softcap"], FlashAttn2()).status == "ok" and set(calls) == {1}


def test_kernel_field_names_the_entry_point(standins) -> None:
    record = measure_one(AXIS_CASES["documents-random-window-gqa"], FlashAttn2())
    assert record.kernel.endswith("flash_attn.flash_attn_varlen_func(causal=True, window_size=(6, 0), 5 sequences, "
                                  "native GQA 4/2)")
    record = measure_one(AXIS_CASES["paged-16"], FlashAttn3())
    assert record.kernel.endswith("flash_attn_interface.flash_attn_with_kvcache(causal=True, window_size=(-1, -1), "
                                  "page_table over pages of 16, native GQA 4/2)")
    record = measure_one(AXIS_CASES["alibi-softcap"], FlashAttn2())
    assert record.kernel.endswith("flash_attn_func(causal=True, window_size=(-1, -1), softcap=2, alibi_slopes)")


def test_a_library_without_the_entry_point_skips_the_case(standins, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys.modules["flash_attn"], "flash_attn_varlen_func")
    record = measure_one(AXIS_CASES["documents"], FlashAttn2())
    assert record.status == "skipped" and record.reason == "flash-attn: flash_attn has no flash_attn_varlen_func"


def test_paged_backward_is_refused_before_running() -> None:
    c = axis_case(batch=2, seq_len=4, kv_seq_len=600, page_size=256, mode="fwd_bwd")
    assert FlashAttn2().unsupported(c) == "flash_attn_with_kvcache (the paged KV cache) is inference-only: no backward"


def _wrong(target: str, kind: str):  # type: ignore[no-untyped-def]
    real = getattr(packing if target == "packing" else flash, kind.split(":")[0])

    def wrong(*args):  # type: ignore[no-untyped-def]
        value = real(*args)
        what = kind.split(":")[1]
        if what == "cu-off-by-one":
            cu = (value.cu_q[0], value.cu_q[1] + 1, *value.cu_q[2:])
            return packing.Varlen(cu, cu, value.max_q + 1, value.max_k + 1, value.kv_lens)
        if what == "cu-k-from-q":
            return packing.Varlen(value.cu_q, value.cu_q, value.max_q, value.max_q, value.kv_lens)
        if what == "table-rows-swapped":  # each request reads another request's pages
            return value.flip(0)
        raise AssertionError(what)

    return wrong


def _score_sabotage(kind: str):  # type: ignore[no-untyped-def]
    real = flash._Flash.score_arguments

    def wrong(self, c, device):  # type: ignore[no-untyped-def]
        args = real(self, c, device)
        if kind == "softcap-dropped":
            args.pop("softcap", None)
        elif kind == "alibi-reversed":
            args["alibi_slopes"] = args["alibi_slopes"].flip(0)
        elif kind == "alibi-tp-whole-model":  # the whole model's first slopes where rank 0 has its share's
            args["alibi_slopes"] = torch.tensor(flash.workload.alibi_slopes(c.heads), dtype=torch.float32)
        return args

    return wrong


FLASH_AXIS_SABOTAGES = {
    "document-boundary-off-by-one": (
        lambda mp: mp.setattr(packing, "varlen", _wrong("packing", "varlen:cu-off-by-one")), AXIS_CASES["documents"]),
    "cu-seqlens-k-from-queries": (lambda mp: mp.setattr(packing, "varlen", _wrong("packing", "varlen:cu-k-from-q")),
                                  AXIS_CASES["ragged-kv"]),
    "document-keys-from-queries": (lambda mp: mp.setattr(packing, "varlen", _wrong("packing", "varlen:cu-k-from-q")),
                                   AXIS_CASES["documents-prefix-pairs"]),
    "block-table-not-shuffled": (lambda mp: mp.setattr(packing, "block_table",
                                                       _wrong("packing", "block_table:table-rows-swapped")),
                                 AXIS_CASES["paged-256"]),
    "softcap-dropped": (lambda mp: mp.setattr(flash._Flash, "score_arguments", _score_sabotage("softcap-dropped")),
                        AXIS_CASES["softcap"]),
    "alibi-slopes-reversed": (lambda mp: mp.setattr(flash._Flash, "score_arguments", _score_sabotage("alibi-reversed")),
                              AXIS_CASES["alibi"]),
    "alibi-slopes-of-the-whole-model": (lambda mp: mp.setattr(flash._Flash, "score_arguments",
                                                              _score_sabotage("alibi-tp-whole-model")),
                                        axis_case(alibi=True, heads=2, kv_heads=1, tp=4)),
}

# Every case runs on all three adapters; each window, layout and workload-axis sabotage breaks FlashAttention 2's.
STANDIN = Standin(name="flash", install=install, backends=(FlashAttn2, FlashAttn3, FlashAttn4), cases=CASES,
                  sabotages={**SABOTAGES, **FLASH_AXIS_SABOTAGES}, check=check)
assert len(STANDIN.sabotages) == len(SABOTAGES) + len(FLASH_AXIS_SABOTAGES)  # no name hides another


def test_fa4_pages_through_varlen_with_page_table(standins) -> None:
    record = measure_one(AXIS_CASES["paged-16"], FlashAttn4())
    assert record.status == "ok", record.reason
    assert record.kernel.endswith("flash_attn.cute.flash_attn_varlen_func(causal=True, window_size=(None, None), "
                                  "page_table over pages of 16, native GQA 4/2)")
    c = axis_case(batch=2, seq_len=4, kv_seq_len=64, page_size=16, mode="fwd_bwd")
    assert FlashAttn4().unsupported(c).startswith("attnbench runs flash-attn-4's paged KV cache forward only")



@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
def test_documents_in_a_paged_cache_are_skipped_by_name(adapter) -> None:
    c = axis_case(documents=3, seq_len=512, page_size=256)
    assert "documents inside a paged cache would need a document mask" in adapter().unsupported(c)


# ---- absorbed MLA (kv_shared) through FA3's and FA4's qv form --------------------------------------------------
def mla_case(latent: int, **overrides) -> Case:  # type: ignore[no-untyped-def]
    """V is K's first `latent` channels, the last 64 its rope part (DeepSeek's 576/512 with latent 512)."""
    fields = dict(dtype="bfloat16", heads=4, kv_heads=1, head_dim=latent + 64, head_dim_v=latent, kv_shared=True,
                  causal=True)
    fields.update(overrides)
    return axis_case(**fields)


QV_CASES = {
    "prefill": dict(seq_len=16),
    "decode-ragged-paged": dict(batch=3, seq_len=1, kv_seq_len=60, kv_lengths="random", page_size=16),
    "decode-short-caches-paged": dict(batch=3, seq_len=2, kv_seq_len=40, kv_lengths="explicit", kv_lens=(1, 0, 33),
                                      page_size=16),
    "documents": dict(seq_len=24, documents=3, causal=False),
    "ragged-prefill-with-cache": dict(batch=2, seq_len=4, kv_seq_len=30, kv_lengths="random"),
}
QV_LATENT = {FlashAttn3: 256, FlashAttn4: 512}  # FA3: head_dim_v >= 256; FA4: exactly 512


def check_qv_record(measured: Measured) -> None:
    assert f"qv: rope 64, latent {QV_LATENT[measured.backend]}" in measured.record.kernel


def test_kv_shared_reasons() -> None:
    fa3, fa4 = FlashAttn3(), FlashAttn4()
    assert "forward only" in fa3.unsupported(mla_case(256, seq_len=8, mode="fwd_bwd"))
    assert fa4.unsupported(mla_case(256, seq_len=8)) == (
        "FlashAttention 4's qv form takes a 64-channel rope part and head_dim_v 512 (got 64/256)")
    assert "no local window" in fa4.unsupported(mla_case(512, seq_len=8, window=4))
    assert "no soft-capping" in fa4.unsupported(mla_case(512, seq_len=8, softcap=5.0))
    assert fa3.unsupported(mla_case(512, seq_len=8)) is None  # 576/512: FA3 decides on its GPU
    assert FlashAttn2().unsupported(mla_case(512, seq_len=8)) == (
        "FlashAttention 2 needs V's head size equal to Q/K's (no head_dim_v)")


def test_fa3_refuses_a_rope_part_over_64_in_its_own_words(standins) -> None:
    record = measure_one(mla_case(256, seq_len=8, head_dim=256 + 96), FlashAttn3())
    assert record.status == "skipped"
    assert record.reason == "flash-attn-3 refused: q_v is only supported for head_size <= 64"


def _qv_sabotage(kind: str):  # type: ignore[no-untyped-def]
    real = flash.qv_split

    def wrong(c, q, k):  # type: ignore[no-untyped-def]
        q_rope, k_rope, latent = real(c, q, k)
        rope = c.head_dim - c.v_dim
        if kind == "rope-first":  # the rope part read from the first channels instead of the last
            return q[..., :rope], k[..., :rope], q[..., rope:]
        if kind == "latent-of-the-keys":  # the query's latent channels against K's own, V not the latent cache
            return q_rope, k_rope, latent.flip(-1)
        raise AssertionError(kind)

    return wrong


QV_SABOTAGES = {
    "rope-channels-first": (lambda mp: mp.setattr(flash, "qv_split", _qv_sabotage("rope-first")),
                            mla_case(256, seq_len=16)),
    "latent-channels-reversed": (lambda mp: mp.setattr(flash, "qv_split", _qv_sabotage("latent-of-the-keys")),
                                 mla_case(256, batch=3, seq_len=1, kv_seq_len=60, kv_lengths="random", page_size=16)),
    "qv-dropped": (lambda mp: mp.setattr(flash, "qv_argument", lambda latent: {}),
                   mla_case(256, seq_len=24, documents=3)),
    "scale-of-the-rope-part-only": (lambda mp: mp.setattr(FlashAttn3, "prepare", _scaled_by_rope(FlashAttn3.prepare)),
                                    mla_case(256, seq_len=16)),
}


def _scaled_by_rope(prepare):  # type: ignore[no-untyped-def]
    """softmax_scale = rope^-1/2 (the scale of q alone) instead of head_dim^-1/2."""
    def wrong(self, c, q, k, v):  # type: ignore[no-untyped-def]
        prepared = prepare(self, c, q, k, v)
        call = prepared.call
        rope = c.head_dim - c.v_dim

        def rescaled(q, k, v, *qv):  # type: ignore[no-untyped-def]
            factor = (c.head_dim / rope) ** 0.5  # scores scale with q: scale q and qv by the ratio of the scales
            return call(q * factor, k, v, *(t * factor for t in qv))

        prepared.call = rescaled
        return prepared
    return wrong


# kv_shared through the qv form: each adapter at the latent width it takes; the sabotages break FlashAttention 3's.
QV_STANDIN = Standin(name="flash-qv", install=install, backends=(FlashAttn3, FlashAttn4),
                     cases={name: {adapter: mla_case(latent, **fields) for adapter, latent in QV_LATENT.items()}
                            for name, fields in QV_CASES.items()},
                     sabotages=QV_SABOTAGES, check=check_qv_record)
