"""The FlashAttention adapters against stand-in modules that implement FlashAttention's documented semantics.

The stand-in is written from FlashAttention's docstrings, not from attnbench's Case: layout
(batch, seqlen, nheads, headdim); K/V with fewer heads, query heads 0..g-1 reading KV head 0 and so on;
query i keeps keys in [i + Sk - Sq - left, i + Sk - Sq + right]; causal forces right = 0; an unbounded side
is -1 (FA2/FA3) or None (FA4, where -1 would be a bound); fully masked rows output zero; fp16/bf16 only.
"""

from __future__ import annotations

import sys
import time
import types

import pytest
import torch

import attnbench.backends.flash as flash
from attnbench.backends.flash import FlashAttn2, FlashAttn3, FlashAttn4
from attnbench.case import Case
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import TimingSettings
from tests.conftest import PhaseTimer, Phases, make_case, measure


def standin_flash_attn_func(none_is_unbounded: bool, returns_lse: bool, calls: list[int] | None = None):
    """A flash_attn_func with the library's documented semantics, computed with explicit masks on CPU."""

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, **kw):
        if calls is not None:
            calls.append(1)
        if q.dtype not in (torch.float16, torch.bfloat16):
            raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
        batch, sq, heads, d = q.shape
        sk, kv_heads = k.shape[1], k.shape[2]
        if heads % kv_heads:
            raise RuntimeError("Number of heads in key/value must divide number of heads in query")
        left, right = window_size
        if causal:
            right = 0
        unbounded = (lambda x: x is None) if none_is_unbounded else (lambda x: x < 0)
        i = torch.arange(sq)[:, None] + (sk - sq)
        j = torch.arange(sk)[None, :]
        keep = torch.ones(sq, sk, dtype=torch.bool)
        if not unbounded(left):
            keep &= j >= i - left
        if not unbounded(right):
            keep &= j <= i + right
        scale = d ** -0.5 if softmax_scale is None else softmax_scale
        qh = q.float().permute(0, 2, 1, 3)  # (B, H, Sq, D)
        kh = k.float().repeat_interleave(heads // kv_heads, dim=2).permute(0, 2, 1, 3)
        vh = v.float().repeat_interleave(heads // kv_heads, dim=2).permute(0, 2, 1, 3)
        scores = (qh @ kh.transpose(-1, -2) * scale).masked_fill(~keep, float("-inf"))
        probs = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # a fully masked row outputs zero
        out = (probs @ vh).permute(0, 2, 1, 3).to(q.dtype)
        lse = torch.logsumexp(scores, -1)
        return (out, lse) if returns_lse else out

    return flash_attn_func


@pytest.fixture
def standins(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Install flash_attn, flash_attn_interface and flash_attn.cute stand-ins; let the adapters run on CPU."""
    calls: dict[str, list[int]] = {"fa2": [], "fa3": [], "fa4": []}
    fa2 = types.ModuleType("flash_attn")
    fa2.flash_attn_func = standin_flash_attn_func(False, False, calls["fa2"])
    fa3 = types.ModuleType("flash_attn_interface")
    fa3.flash_attn_func = standin_flash_attn_func(False, False, calls["fa3"])
    fa4 = types.ModuleType("flash_attn.cute")
    fa4.flash_attn_func = standin_flash_attn_func(True, True, calls["fa4"])
    fa2.cute = fa4
    monkeypatch.setitem(sys.modules, "flash_attn", fa2)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fa3)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", fa4)
    monkeypatch.setattr(flash._Flash, "devices", ("cpu", "cuda"))
    return calls




def case(dtype="bfloat16", sq=48, sk=None, heads=4, kv_heads=4, causal=True, window=None, mode="fwd", d=16) -> Case:
    """A small case; sk defaults to sq."""
    return make_case(device="cpu", dtype=dtype, batch=1, seq_len=sq, kv_seq_len=sk, heads=heads,
                     kv_heads=kv_heads, head_dim=d, causal=causal, window=window, mode=mode)


CASES = [
    case(causal=False),
    case(causal=True),
    case(causal=True, sq=20, sk=70, heads=4, kv_heads=1, mode="fwd_bwd"),
    case(causal=True, window=5, sq=40, heads=6, kv_heads=2, dtype="float16"),
    case(causal=True, window=0, sq=30, sk=50, mode="fwd_bwd"),
    case(causal=False, window=6, sq=30, sk=45, heads=4, kv_heads=2, mode="fwd_bwd"),
    case(causal=True, window=3, sq=1, sk=64, heads=8, kv_heads=2),
]
ADAPTERS = [FlashAttn2, FlashAttn3, FlashAttn4]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.name)
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.case_id)
def test_adapter_gives_the_reference_answer_through_the_standin(standins, adapter, c: Case) -> None:
    record = measure(c, adapter())
    assert record.status == "ok", record.reason
    assert record.kv_expanded is False  # native GQA: K/V go in with their own heads


def test_kernel_field_names_the_call_and_its_window(standins) -> None:
    record = measure(case(causal=True, window=5), FlashAttn2())
    assert "flash_attn.flash_attn_func(causal=True, window_size=(5, 0)" in record.kernel
    record = measure(case(causal=False, window=5), FlashAttn4())
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
    record = Runner(RunInfo("f", "t"), PhaseTimer(phases), settings).measure(CaseData(c), FlashAttn4())
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


@pytest.mark.parametrize("name", list(SABOTAGES))
def test_standin_catches_a_wrong_mapping(standins, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    sabotage, c = SABOTAGES[name]
    assert measure(c, FlashAttn2()).status == "ok"
    sabotage(monkeypatch)
    record = measure(c, FlashAttn2())
    assert record.status == "mismatch", (record.status, record.reason)


def test_fa4_spelling_of_unbounded_matters(standins, monkeypatch: pytest.MonkeyPatch) -> None:
    """FA4 reads -1 as a bound: passing FA2's spelling of "no limit" would be caught."""
    monkeypatch.setattr(FlashAttn4, "unbounded", -1)
    record = measure(case(causal=True), FlashAttn4())
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
    fake = types.ModuleType(adapter.module)
    fake.flash_attn_func = standin_flash_attn_func(False, False)
    monkeypatch.setitem(sys.modules, adapter.module, fake)
    if adapter.module == "flash_attn.cute":
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
    record = measure(case(dtype="float32"), FlashAttn2())
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
    gqa = measure(case(heads=8, kv_heads=2, causal=True), FlashAttn2())
    assert gqa.kernel.endswith("flash_attn.flash_attn_func(causal=True, window_size=(-1, -1), native GQA 8/2)")
    mha = measure(case(causal=True), FlashAttn2())
    assert mha.kernel.endswith("flash_attn.flash_attn_func(causal=True, window_size=(-1, -1))")
