"""The xformers adapter against a stand-in `xformers.ops`, and the real xformers' refusal on CPU.

The stand-in follows xformers' documentation, not attnbench's Case: BMHK (batch, seq, heads, K) layout;
BMGHK (batch, seq, groups, heads_per_group, K) for MQA/GQA, forward only; and the bias classes' own
definitions with shift = Sk - Sq:
  LowerTriangularMask: key j <= query i (top-left);
  LowerTriangularFromBottomRightMask: j <= i + shift;
  LowerTriangularFromBottomRightLocalAttentionMask(window_size): j <= i + shift and
      i + shift - j < window_size (window_size > 0);
  LocalAttentionFromBottomRightMask(window_left, window_right):
      i + shift - window_left <= j <= i + shift + window_right.
A query row whose bias lets no key through outputs zeros: what xformers' flash operators return (FlashAttention's
convention) and PyTorch's cutlass kernel since it stopped answering NaN there (pytorch/pytorch#133882).
The block-diagonal, padded-keys and paged biases are xformers' own classes, materialised.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings

import pytest
import torch

import attnbench.backends.xformers_ops as xf
from attnbench.backends.xformers_ops import XformersBackend
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import (
    Phases,
    PhaseTimer,
    assert_sabotage_caught,
    make_case,
    measure_one,
)


class LowerTriangularMask:
    def keep(self, sq: int, sk: int) -> torch.Tensor:
        return torch.ones(sq, sk, dtype=torch.bool).tril()


class LowerTriangularFromBottomRightMask:
    def keep(self, sq: int, sk: int) -> torch.Tensor:
        return torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=sk - sq)


class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    def __init__(self, _window_size: int) -> None:  # xformers' class is a dataclass: its field is `_window_size`
        if _window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={_window_size}")
        self._window_size = _window_size

    def keep(self, sq: int, sk: int) -> torch.Tensor:
        i, j = torch.arange(sq)[:, None] + (sk - sq), torch.arange(sk)[None, :]
        return (j <= i) & (i - j < self._window_size)


class LocalAttentionFromBottomRightMask:
    def __init__(self, window_left: int, window_right: int) -> None:
        self.window_left, self.window_right = window_left, window_right

    def keep(self, sq: int, sk: int) -> torch.Tensor:
        i, j = torch.arange(sq)[:, None] + (sk - sq), torch.arange(sk)[None, :]
        return (j >= i - self.window_left) & (j <= i + self.window_right)


class StandinOp:
    NAME = "standinF"


class CallTimeChoice:
    """What the stand-in's dispatcher runs when a call is not pinned: not what it told the adapter in prepare."""

    NAME = "standinOtherF"


class Inputs:
    def __init__(self, query, key, value, attn_bias=None, p=0.0, scale=None) -> None:
        self.query, self.key, self.value, self.attn_bias = query, key, value, attn_bias


def _dispatch_fw(inp: Inputs, needs_gradient: bool):
    if inp.query.shape[-1] > 128:
        raise NotImplementedError(
            "No operator found for `memory_efficient_attention_forward` with inputs:\n"
            f"     query       : shape={tuple(inp.query.shape)}\n"
            "`standinF` is not supported because:\n    max(query.shape[-1], value.shape[-1]) > 128")
    return StandinOp


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                               output_dtype=None, ran=None, now=lambda: ""):
    """softmax(Q Kᵀ · scale + bias) V over BMHK or BMGHK inputs, in float32, returned like query.

    `op` is xformers' (forward op, backward op) pair; an unpinned forward is chosen at call time
    (CallTimeChoice). Each call appends (now(), the forward op's NAME) to `ran`.
    """
    if op is not None and not (isinstance(op, tuple) and len(op) == 2):
        raise TypeError(f"op must be a (fw, bw) tuple, got {op!r}")
    if ran is not None:
        ran.append((now(), (op[0] if op is not None and op[0] is not None else CallTimeChoice).NAME))
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if query.dim() == 5 and grad:
        raise ValueError("MQA/GQA (BMGHK inputs) is supported only for the forward pass")
    bmhk = query.dim() == 4
    if bmhk:
        if key.shape[2] != query.shape[2]:
            raise ValueError("BMHK inputs need as many key heads as query heads")
        query, key, value = (t.unsqueeze(2) for t in (query, key, value))  # one group
    b, sq, g, hg, d = query.shape
    sk = key.shape[1]
    to_bghsd = lambda t: t.float().permute(0, 2, 3, 1, 4)  # noqa: E731
    q, k, v = to_bghsd(query), to_bghsd(key), to_bghsd(value)
    s = q @ k.transpose(-1, -2) * (d ** -0.5 if scale is None else scale)
    if attn_bias is not None:  # a stand-in class's keep(), or a real xformers bias's own materialize()
        if hasattr(attn_bias, "keep"):
            keep = attn_bias.keep(sq, sk)
        elif hasattr(attn_bias, "block_tables"):  # paged: materialised over the pages in use, K/V are the pool
            tables = attn_bias.block_tables
            used = attn_bias.materialize((sq, tables.shape[0] * tables.shape[1] * attn_bias.page_size),
                                         dtype=torch.float32, device="cpu")
            keep = torch.zeros(sq, sk, dtype=torch.bool)
            keep[:, : used.shape[-1]] = torch.isfinite(used)
        else:
            keep = torch.isfinite(attn_bias.materialize((sq, sk), dtype=torch.float32, device="cpu"))
        s = s.masked_fill(~keep, float("-inf"))
    probs = torch.nan_to_num(s.softmax(-1), nan=0.0)  # a row that sees no key outputs zeros
    out = (probs @ v).permute(0, 3, 1, 2, 4).to(query.dtype)  # (B, Sq, G, H/G, K), like query
    return out.squeeze(2) if bmhk else out


def _standin_module() -> types.ModuleType:
    ops = types.ModuleType("xformers.ops")
    attn_bias = types.SimpleNamespace(
        LowerTriangularMask=LowerTriangularMask,
        LowerTriangularFromBottomRightMask=LowerTriangularFromBottomRightMask,
        LowerTriangularFromBottomRightLocalAttentionMask=LowerTriangularFromBottomRightLocalAttentionMask,
        LocalAttentionFromBottomRightMask=LocalAttentionFromBottomRightMask,
    )
    if importlib.util.find_spec("xformers") is not None:  # the block-diagonal biases are xformers' own classes
        real = real_attn_bias()
        attn_bias.BlockDiagonalMask = real.BlockDiagonalMask
        for name in ("BlockDiagonalPaddedKeysMask", "BlockDiagonalCausalWithOffsetPaddedKeysMask",
                     "BlockDiagonalCausalLocalAttentionPaddedKeysMask"):
            setattr(attn_bias, name, getattr(real, name))
        attn_bias.PagedBlockDiagonalPaddedKeysMask = real.PagedBlockDiagonalPaddedKeysMask
        attn_bias.PagedBlockDiagonalCausalWithOffsetPaddedKeysMask = (
            real.PagedBlockDiagonalCausalWithOffsetPaddedKeysMask)
    ops.fmha = types.SimpleNamespace(attn_bias=attn_bias, Inputs=Inputs, _dispatch_fw=_dispatch_fw)
    ops.ran = []  # (phase, forward op NAME) of every call
    ops.phase = lambda: ""  # a test points this at its Phases
    ops.memory_efficient_attention = lambda *a, **kw: memory_efficient_attention(
        *a, **kw, ran=ops.ran, now=lambda: ops.phase())
    return ops


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    ops = _standin_module()
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    return ops




def case(dtype="float32", sq=48, sk=None, heads=4, kv_heads=4, causal=True, window=None, mode="fwd", d=16) -> Case:
    """A small case; sk defaults to sq."""
    return make_case(device="cpu", dtype=dtype, batch=1, seq_len=sq, kv_seq_len=sk, heads=heads,
                     kv_heads=kv_heads, head_dim=d, causal=causal, window=window, mode=mode)


CASES = [
    case(causal=False),
    case(causal=True, sq=20, sk=70),
    case(causal=True, sq=30, sk=50, heads=6, kv_heads=2, mode="fwd_bwd"),
    case(causal=True, window=5, sq=40, heads=8, kv_heads=2, dtype="bfloat16"),
    case(causal=True, window=0, sq=30, sk=50, heads=4, kv_heads=1),
    case(causal=False, window=6, sq=30, sk=45, mode="fwd_bwd"),
    case(causal=False, window=3, sq=40, heads=6, kv_heads=3, dtype="float16"),
    case(causal=True, window=7, sq=1, sk=64, heads=8, kv_heads=2),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.case_id)
def test_adapter_gives_the_reference_answer_through_the_standin(standin, c: Case) -> None:
    record = measure_one(c, XformersBackend())
    assert record.status == "ok", record.reason
    assert "fw op standinF" in record.kernel
    gqa = c.kv_heads != c.heads
    assert record.kv_expanded is (gqa and c.needs_grad)  # BMGHK expand forward; real repeat for backward
    assert ("BMGHK, K/V expanded" in record.kernel) is (gqa and not c.needs_grad)


@pytest.mark.parametrize("c", [case(), case(heads=8, kv_heads=2), case(causal=False, window=4, mode="fwd_bwd")],
                         ids=lambda c: c.case_id)
def test_the_timed_call_runs_the_operator_the_record_names(standin, monkeypatch: pytest.MonkeyPatch, c: Case) -> None:
    """The stand-in's dispatcher would run another operator at call time: only the pin keeps the record true."""
    phases = Phases()
    standin.phase = lambda: phases.phase
    monkeypatch.setattr(XformersBackend, "prepare", phases.during_prepare(XformersBackend.prepare))
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)
    record = measure(CaseData(c), XformersBackend(), PhaseTimer(phases), Settings(RunInfo("x", "t"), settings))
    assert record.status == "ok", record.reason
    assert " fw op standinF" in record.kernel
    timed = [name for phase, name in standin.ran if phase == "timed"]
    # the three samples and any warm-up calls thrown away (a forward's checked call is its warm-up), every one
    # on the recorded op
    sampled_check = int(record.extra.get("check_sampled", False))  # the check may also be one of the samples
    assert timed == ["standinF"] * (3 - sampled_check + record.extra["warmup_calls"]) and record.samples == 3
    assert [name for phase, name in standin.ran if phase == "check"] == ["standinF"]


@pytest.mark.parametrize("c, layout", [(case(), "BMHK"), (case(heads=8, kv_heads=2), "BMGHK, K/V expanded"),
                                       (case(heads=8, kv_heads=2, mode="fwd_bwd"), "BMHK, K/V repeated")],
                         ids=["mha", "gqa-fwd", "gqa-bwd"])
def test_kernel_field_names_op_layout_and_bias(standin, c: Case, layout: str) -> None:
    record = measure_one(c, XformersBackend())
    ops = "fw op standinF, bw op unknown (xformers dispatcher not reachable)" if c.needs_grad else "fw op standinF"
    assert record.kernel.endswith(
        f"memory_efficient_attention {ops} ({layout}, attn_bias=LowerTriangularFromBottomRightMask)")


def test_kernel_field_when_the_dispatcher_cannot_be_asked(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """xformers' private dispatcher gone: availability judges by device alone, the call is left to xformers
    (unpinned) and the record says so."""
    del standin.fmha._dispatch_fw
    assert XformersBackend().availability("cpu") == "needs CUDA (xformers' attention operators are CUDA-only)"
    monkeypatch.setattr(XformersBackend, "availability", lambda self, device: None)  # let it run on this CPU
    record = measure_one(case(causal=False), XformersBackend())
    assert record.status == "ok"
    assert "fw op op unknown (xformers dispatcher not reachable) (BMHK, attn_bias=NoneType)" in record.kernel
    assert {name for _, name in standin.ran} == {"standinOtherF"}


def test_kernel_field_names_the_bias(standin) -> None:
    record = measure_one(case(causal=True, window=5), XformersBackend())
    assert "attn_bias=LowerTriangularFromBottomRightLocalAttentionMask(6)" in record.kernel
    record = measure_one(case(causal=False, window=5), XformersBackend())
    assert "attn_bias=LocalAttentionFromBottomRightMask(5, 5)" in record.kernel


def test_gqa_forward_does_not_copy_kv(standin) -> None:
    c = case(heads=8, kv_heads=2)
    q, k, v = (torch.randn(1, h, 48, 16) for h in (8, 2, 2))
    q5, k5, v5 = xf.xformers_layout(c, q, k, v)
    assert q5.shape == k5.shape == (1, 48, 2, 4, 16)
    assert k5.stride(3) == 0 and v5.stride(3) == 0  # expanded over the group, not copied


def test_dispatcher_refusal_is_the_skip_reason(standin) -> None:
    record = measure_one(case(d=160), XformersBackend())
    assert record.status == "skipped"
    assert record.reason.startswith("xformers: No operator found for `memory_efficient_attention_forward`")
    assert "max(query.shape[-1], value.shape[-1]) > 128" in record.reason


def _wrong_bias(kind: str):
    def bias(c: Case, ops):
        b = ops.fmha.attn_bias
        if kind == "top-left":
            return b.LowerTriangularMask()
        return b.LowerTriangularFromBottomRightLocalAttentionMask(c.window)  # W instead of W + 1
    return bias


_real_layout = xf.xformers_layout


def _wrong_grouping(c: Case, q, k, v):
    """Query head h reading KV head h % kv_heads instead of h // group."""
    q5, k5, v5 = _real_layout(c, q, k, v)
    b, s, kvh, g, d = q5.shape
    return q5.reshape(b, s, g, kvh, d).transpose(2, 3), k5, v5


SABOTAGES = {
    "top-left-causal": (lambda mp: mp.setattr(xf, "xformers_bias", _wrong_bias("top-left")),
                        case(causal=True, sq=20, sk=70)),
    "window-off-by-one": (lambda mp: mp.setattr(xf, "xformers_bias", _wrong_bias("off-by-one")),
                          case(causal=True, window=5, sq=40)),
    "gqa-grouping": (lambda mp: mp.setattr(xf, "xformers_layout", _wrong_grouping),
                     case(causal=True, sq=40, heads=8, kv_heads=2)),
    "layout-not-transposed": (lambda mp: mp.setattr(xf, "xformers_layout", lambda c, q, k, v: (
                                  q.contiguous(), k.contiguous(), v.contiguous())),
                              case(causal=False, sq=8, heads=8, kv_heads=8)),
}


@pytest.mark.parametrize("name", list(SABOTAGES))
def test_standin_catches_a_wrong_mapping(standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    sabotage, c = SABOTAGES[name]
    assert_sabotage_caught(c, XformersBackend, sabotage, monkeypatch)


def test_reason_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setitem(sys.modules, "xformers.ops", None)
    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert XformersBackend().availability("cpu").startswith("xformers is not installed")


@pytest.mark.skipif(importlib.util.find_spec("xformers") is None, reason="xformers is not installed")
def test_an_installed_xformers_that_cannot_import_says_so_not_that_it_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside flash-attn-4 without FlashAttention 2, xformers.ops fails to import (the GPU image): installed, its
    import's reason given, never "not installed"."""
    monkeypatch.setitem(sys.modules, "xformers.ops", None)
    reason = XformersBackend().availability("cpu")
    assert reason.startswith("xformers ") and "is installed but xformers.ops cannot be imported" in reason


def test_reason_needs_cuda_without_a_gpu(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert XformersBackend().availability("cuda") == "needs CUDA (torch.cuda.is_available() is False)"


REAL = importlib.util.find_spec("xformers") is not None


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_real_xformers_on_cpu_says_why_in_its_own_words() -> None:
    """On CPU the real dispatcher finds no operator; its refusal is the availability and skip reason."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the CPU refusal is checked where there is no GPU")
    backend = XformersBackend()
    reason = backend.availability("cpu")
    from attnbench.backends.xformers_ops import built_for

    assert reason.startswith(f"CUDA-only: xformers has no operator for cpu inputs here{built_for()}: No operator "
                             "found for `memory_efficient_attention_forward`")
    assert "device=cpu (supported: {'cuda'})" in reason
    record = measure_one(case(dtype="float16", causal=True, window=8), backend)
    assert record.status == "skipped"
    assert record.reason == reason


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_the_reason_names_the_torch_the_installed_xformers_was_built_for() -> None:
    """xformers 0.0.35's wheel is built for torch 2.10; under another torch (2.11 on the H200, 2.13 here) its C++
    operators do not load and its dispatcher refuses every CUDA operator: the reason says which torch it wanted."""
    from attnbench.backends.xformers_ops import built_for

    if torch.__version__.startswith("2.10."):
        assert built_for() == ""
    else:
        assert built_for() == \
            f" (its C++ extension was built for torch 2.10.0+cu128; this is torch {torch.__version__})"


# ---- the stand-in's masks and the adapter's biases against the real xformers ------------------
def real_attn_bias():  # type: ignore[no-untyped-def]
    """The real xformers.ops.fmha.attn_bias (its bias classes materialise on CPU without the C++ extension)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("xformers.ops.fmha.attn_bias")


def materialized_keep(bias, sq: int, sk: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    return bias.materialize((sq, sk), dtype=torch.float32, device="cpu") == 0


SHAPES = [(1, 1), (1, 9), (5, 5), (6, 13), (12, 30)]
STANDIN_BIASES = {
    "LowerTriangularMask": lambda b: (b.LowerTriangularMask(), LowerTriangularMask()),
    "LowerTriangularFromBottomRightMask": lambda b: (b.LowerTriangularFromBottomRightMask(),
                                                     LowerTriangularFromBottomRightMask()),
    **{f"LowerTriangularFromBottomRightLocalAttentionMask({w})": (
        lambda b, w=w: (b.LowerTriangularFromBottomRightLocalAttentionMask(w),
                        LowerTriangularFromBottomRightLocalAttentionMask(w))) for w in (1, 2, 5)},
    **{f"LocalAttentionFromBottomRightMask({left}, {right})": (
        lambda b, left=left, right=right: (b.LocalAttentionFromBottomRightMask(window_left=left, window_right=right),
                                           LocalAttentionFromBottomRightMask(left, right)))
       for left, right in ((0, 0), (3, 3), (2, 0), (0, 4))},
}


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(STANDIN_BIASES))
def test_standin_biases_are_the_real_ones(name: str, shape: tuple[int, int]) -> None:
    real, ours = STANDIN_BIASES[name](real_attn_bias())
    sq, sk = shape
    assert torch.equal(ours.keep(sq, sk), materialized_keep(real, sq, sk))


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("shape", SHAPES[1:], ids=str)
@pytest.mark.parametrize("causal, window", [(True, None), (True, 0), (True, 3), (False, 0), (False, 4), (True, 100)])
def test_adapters_real_bias_is_the_cases_mask(shape: tuple[int, int], causal: bool, window: int | None) -> None:
    """xformers_bias with the real library's classes, materialised, keeps exactly the pairs docs/conventions.md's mask
    keeps."""
    sq, sk = shape
    c = case(sq=sq, sk=sk, causal=causal, window=window)
    bias = xf.xformers_bias(c, types.SimpleNamespace(fmha=types.SimpleNamespace(attn_bias=real_attn_bias())))
    want = workload.mask(c)
    if want is None:
        want = torch.ones(sq, sk, dtype=torch.bool)
    assert torch.equal(materialized_keep(bias, sq, sk), want)


# ---- documents and ragged cache lengths: block-diagonal biases -------------------------------------------------
def varlen_case(**overrides) -> Case:  # type: ignore[no-untyped-def]
    fields = dict(dtype="float32", seq_len=48, heads=4, kv_heads=4, head_dim=16, causal=True)
    fields.update(overrides)
    return make_case(**fields)


VARLEN_CASES = {
    "documents-causal": varlen_case(documents=3),
    "documents-random-window-gqa": varlen_case(documents=5, doc_lengths="random", window=6, heads=4, kv_heads=2),
    "documents-full-batch": varlen_case(causal=False, batch=2, documents=4, doc_lengths="random"),
    "documents-window-zero": varlen_case(documents=3, window=0),
    "documents-gqa-bwd": varlen_case(documents=3, heads=4, kv_heads=2, mode="fwd_bwd"),
    "ragged-causal-gqa": varlen_case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", heads=4, kv_heads=1),
    "ragged-decode-window": varlen_case(batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random", window=9),
    "ragged-full-bwd": varlen_case(causal=False, batch=2, seq_len=6, kv_seq_len=50, kv_lengths="random",
                                   mode="fwd_bwd"),
}


def expected_packed_keep(c: Case) -> torch.Tensor:
    """docs/conventions.md's mask of `c` (attnbench.core.workload.visibility, one block per batch row) laid out over the
    packed tokens: row b's queries against row b's own keys, nothing across rows."""
    from attnbench.core import workload

    rows = workload.visibility(c)
    rows = torch.ones(1, c.seq_len, c.kv_seq_len, dtype=torch.bool) if rows is None else rows
    lens = workload.request_kv_lens(c)
    keep = torch.zeros(c.batch * c.seq_len, sum(lens), dtype=torch.bool)
    start = 0
    for b, n in enumerate(lens):
        keep[b * c.seq_len:(b + 1) * c.seq_len, start:start + n] = rows[b if len(rows) > 1 else 0][:, :n]
        start += n
    return keep


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(VARLEN_CASES))
def test_real_block_diagonal_bias_is_the_cases_mask(name: str) -> None:
    """xformers_varlen_bias with the real library's classes, materialised, keeps exactly docs/conventions.md's pairs."""
    c = VARLEN_CASES[name]
    bias = xf.xformers_varlen_bias(c, types.SimpleNamespace(fmha=types.SimpleNamespace(attn_bias=real_attn_bias())),
                                   torch.device("cpu"))  # a torch.device: xformers pins memory for any other
    want = expected_packed_keep(c)
    assert torch.equal(materialized_keep(bias, *want.shape), want)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(VARLEN_CASES))
def test_documents_and_ragged_lengths_through_the_standin(standin, name: str) -> None:
    c = VARLEN_CASES[name]
    record = measure_one(c, XformersBackend())
    assert record.status == "ok", record.reason
    assert record.grad_checked == c.needs_grad
    assert record.kv_expanded == (c.kv_heads != c.heads and c.needs_grad)  # BMGHK forward, repeated for backward


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_kernel_field_names_the_block_diagonal_bias(standin) -> None:
    record = measure_one(VARLEN_CASES["documents-random-window-gqa"], XformersBackend())
    assert record.kernel.endswith("(BMGHK, K/V expanded, 5 sequences packed in one row, "
                                  "attn_bias=BlockDiagonalCausalLocalAttentionFromBottomRightMask(7))")
    record = measure_one(VARLEN_CASES["ragged-causal-gqa"], XformersBackend())
    assert record.kernel.endswith("attn_bias=BlockDiagonalCausalFromBottomRightMask)")


def _top_left(real):  # type: ignore[no-untyped-def]
    def wrong(c, ops, device=None):  # type: ignore[no-untyped-def]
        bias = real(c, ops, device)
        return bias.make_causal() if type(bias).__name__ == "BlockDiagonalCausalFromBottomRightMask" else bias
    return wrong


def _window_without_diagonal(c, ops, device=None):  # type: ignore[no-untyped-def]
    seqs = xf.packing.varlen(c)
    q_lens = [b - a for a, b in zip(seqs.cu_q, seqs.cu_q[1:], strict=False)]
    block = ops.fmha.attn_bias.BlockDiagonalMask.from_seqlens(q_lens, list(seqs.kv_lens), device=device)
    return block.make_local_attention_from_bottomright(c.window)  # W where xformers needs W + 1


VARLEN_SABOTAGES = {
    # each request's causal block aligned top-left: its queries would see only the first keys of its cache
    "ragged-causal-top-left": (lambda mp: mp.setattr(xf, "xformers_varlen_bias", _top_left(xf.xformers_varlen_bias)),
                               VARLEN_CASES["ragged-causal-gqa"]),
    "window-without-the-diagonal": (lambda mp: mp.setattr(xf, "xformers_varlen_bias", _window_without_diagonal),
                                    VARLEN_CASES["documents-random-window-gqa"]),
    "packed-without-transpose": (lambda mp: mp.setattr(xf.packing, "pack_q",
                                                       lambda t: t.reshape(-1, t.shape[1], t.shape[3])),
                                 varlen_case(seq_len=8, heads=8, kv_heads=8, documents=2)),
}


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(VARLEN_SABOTAGES))
def test_standin_catches_a_wrong_block_diagonal_mapping(standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    sabotage, c = VARLEN_SABOTAGES[name]
    assert_sabotage_caught(c, XformersBackend, sabotage, monkeypatch)


@pytest.mark.parametrize("c, words", [
    (varlen_case(softcap=2.0), "xformers has no soft-capping"),
    (varlen_case(alibi=True), "attnbench does not map alibi onto xformers"),
])
def test_varlen_reasons(c: Case, words: str) -> None:
    reason = XformersBackend().unsupported(c)
    assert reason is not None and words in reason
    assert XformersBackend().unsupported(varlen_case(causal=False, window=4)) is None  # dense two-sided: as before


# ---- padded keys: a two-sided window over packed sequences; causal blocks with fewer keys than queries -------------
PADDED_CASES = {
    "documents-two-sided-window": varlen_case(causal=False, window=4, documents=3),
    "documents-two-sided-window-gqa-random": varlen_case(causal=False, window=6, documents=5, doc_lengths="random",
                                                         heads=4, kv_heads=2),
    "ragged-two-sided-window": varlen_case(causal=False, window=5, batch=3, seq_len=6, kv_seq_len=40,
                                           kv_lengths="random"),
    "documents-prefix-two-sided-window": varlen_case(causal=False, window=3, kv_seq_len=50, documents=4,
                                                     doc_lengths="explicit", doc_lens=(20, 0, 16, 12),
                                                     doc_kv_lens=(24, 6, 8, 12)),
    "documents-fewer-keys-causal": varlen_case(kv_seq_len=40, documents=3, doc_lengths="explicit",
                                               doc_lens=(20, 16, 12), doc_kv_lens=(10, 18, 12)),
    "documents-fewer-keys-causal-window": varlen_case(window=3, kv_seq_len=40, documents=3, doc_lengths="explicit",
                                                      doc_lens=(20, 16, 12), doc_kv_lens=(10, 18, 12)),
    "short-caches-causal": varlen_case(batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(4, 0, 24)),
    "short-caches-two-sided-bwd": varlen_case(causal=False, window=2, batch=2, seq_len=8, kv_seq_len=24,
                                              kv_lengths="explicit", kv_lens=(5, 24), mode="fwd_bwd"),
}
# Contiguous keys still serve everything else, zero-length documents and prefixes included.
CONTIGUOUS_CASES = {
    "zero-length-documents": varlen_case(documents=4, doc_lengths="explicit", doc_lens=(0, 30, 0, 18)),
    "documents-prefix": varlen_case(kv_seq_len=80, documents=3, window=5),
    "short-caches-full": varlen_case(causal=False, batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit",
                                     kv_lens=(4, 0, 24)),
}


def expected_padded_keep(c: Case) -> torch.Tensor:
    """docs/conventions.md's mask (attnbench.core.workload.visibility) laid over padded keys: sequence i (a document of
    a row, or a request) owns key slots [i·pad, i·pad + k_i), its key t at i·pad + t; nothing else is visible."""
    rows = workload.visibility(c)
    rows = torch.ones(1, c.seq_len, c.kv_seq_len, dtype=torch.bool) if rows is None else rows
    if c.doc_lens is None:
        pad, q_lens, k_lens = c.kv_seq_len, [c.seq_len] * c.batch, list(workload.request_kv_lens(c))
    else:
        k_doc = list(workload.doc_key_lens(c))
        pad, q_lens, k_lens = max(k_doc), list(c.doc_lens) * c.batch, k_doc * c.batch
    keep = torch.zeros(sum(q_lens), len(q_lens) * pad, dtype=torch.bool)
    q0 = 0
    per_row = len(q_lens) // c.batch
    for i, (nq, nk) in enumerate(zip(q_lens, k_lens, strict=False)):
        b = i // per_row
        row = rows[b if len(rows) > 1 else 0]
        q_row = q0 - b * c.seq_len  # the sequence's first query within its batch row
        k_row = sum(k_lens[b * per_row:i])  # its first key within its batch row
        keep[q0:q0 + nq, i * pad:i * pad + nk] = row[q_row:q_row + nq, k_row:k_row + nk]
        q0 += nq
    return keep


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PADDED_CASES))
def test_real_padded_keys_bias_is_the_cases_mask(name: str) -> None:
    """xformers_padded_bias with the real library's classes, materialised over the padded keys, keeps exactly
    docs/conventions.md's pairs: BlockDiagonalLocalAttentionPaddedKeysMask(W, W) is inclusive on both sides."""
    c = PADDED_CASES[name]
    assert xf.needs_padded_keys(c)
    ops = types.SimpleNamespace(fmha=types.SimpleNamespace(attn_bias=real_attn_bias()))
    _, pad = xf.packing.padded_kv(torch.zeros(c.batch, 1, c.kv_seq_len, 1), c)
    bias = xf.xformers_padded_bias(c, ops, pad, torch.device("cpu"))
    want = expected_padded_keep(c)
    assert torch.equal(torch.isfinite(bias.materialize(tuple(want.shape))), want)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PADDED_CASES) + list(CONTIGUOUS_CASES))
def test_padded_keys_and_empty_rows_through_the_standin(standin, name: str) -> None:
    c = {**PADDED_CASES, **CONTIGUOUS_CASES}[name]
    record = measure_one(c, XformersBackend())
    assert record.status == "ok", record.reason
    assert ("keys padded to" in record.kernel) is (name in PADDED_CASES)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_kernel_field_names_the_padded_two_sided_window(standin) -> None:
    record = measure_one(PADDED_CASES["documents-two-sided-window"], XformersBackend())
    assert record.kernel.endswith("(BMHK, 3 sequences in one row, keys padded to 16, "
                                  "attn_bias=BlockDiagonalLocalAttentionPaddedKeysMask(4, 4))")


def _padded_window(shrink: int):  # type: ignore[no-untyped-def]
    real = xf.xformers_padded_bias

    def wrong(c, ops, pad, device=None):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        return real(replace(c, window=c.window - shrink), ops, pad, device)  # W - 1: xformers' docstring count
    return wrong


def _slots_off_by_one(real):  # type: ignore[no-untyped-def]
    def wrong(t, c):  # type: ignore[no-untyped-def]
        keys, pad = real(t, c)
        return keys.roll(1, dims=0), pad  # every sequence's keys one slot position late
    return wrong


PADDED_SABOTAGES = {
    "two-sided-window-one-short": (lambda mp: mp.setattr(xf, "xformers_padded_bias", _padded_window(1)),
                                   PADDED_CASES["documents-two-sided-window"]),
    "padded-slots-misaligned": (lambda mp: mp.setattr(xf.packing, "padded_kv", _slots_off_by_one(xf.packing.padded_kv)),
                                PADDED_CASES["documents-prefix-two-sided-window"]),
    "fewer-keys-causal-as-contiguous-top-left": (lambda mp: (mp.setattr(xf, "needs_padded_keys", lambda c: False),
                                                             mp.setattr(xf, "xformers_varlen_bias", _top_left_any)),
                                                 PADDED_CASES["short-caches-causal"]),
}


def _top_left_any(c, ops, device=None):  # type: ignore[no-untyped-def]
    """The contiguous-key block mask made causal top-left: it takes fewer keys than queries, but wrongly aligned."""
    seqs = xf.packing.varlen(c)
    q_lens = [b - a for a, b in zip(seqs.cu_q, seqs.cu_q[1:], strict=False)]
    return ops.fmha.attn_bias.BlockDiagonalMask.from_seqlens(q_lens, list(seqs.kv_lens), device=device).make_causal()


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PADDED_SABOTAGES))
def test_standin_catches_a_wrong_padded_keys_mapping(standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    sabotage, c = PADDED_SABOTAGES[name]
    assert_sabotage_caught(c, XformersBackend, sabotage, monkeypatch)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_contiguous_causal_blocks_refuse_fewer_keys_than_queries_which_is_why_keys_are_padded() -> None:
    """xformers' own check: BlockDiagonalCausalFromBottomRightMask raises for a block with fewer keys than queries."""
    c = PADDED_CASES["short-caches-causal"]
    ops = types.SimpleNamespace(fmha=types.SimpleNamespace(attn_bias=real_attn_bias()))
    with pytest.raises(ValueError, match="num_keys >= num_queries"):
        xf.xformers_varlen_bias(c, ops, torch.device("cpu"))


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_block_diagonal_calls_pass_exactly_what_they_declare(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_conformance import Spy

    cls = standin.fmha.attn_bias.BlockDiagonalMask
    spies = {"from_seqlens": Spy(cls.from_seqlens)}
    monkeypatch.setattr(cls, "from_seqlens", spies["from_seqlens"])
    for name in ("make_causal_from_bottomright", "make_local_attention_from_bottomright"):
        spies[name] = spy = Spy(getattr(cls, name))
        monkeypatch.setattr(cls, name, lambda self, *a, _spy=spy, **kw: _spy(self, *a, **kw))
    for c in VARLEN_CASES.values():
        assert measure_one(c, XformersBackend()).status == "ok"
    for call in xf.VARLEN_BIAS_CALLS:
        spies[call.name].assert_declared(call)


# ---- paged caches: paged block-diagonal biases over the page pool -------------------------------------------------
PAGED_CASES = {
    "paged-prefill-causal": varlen_case(batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16),
    "paged-decode-gqa": varlen_case(batch=4, seq_len=1, kv_seq_len=90, kv_lengths="random", page_size=8, heads=4,
                                    kv_heads=1),
    "paged-full-dense-lengths": varlen_case(causal=False, batch=3, seq_len=4, kv_seq_len=40, page_size=16),
    "paged-page-of-one": varlen_case(batch=2, seq_len=2, kv_seq_len=20, kv_lengths="random", page_size=1),
}


def expected_physical_keep(c: Case) -> torch.Tensor:
    """docs/conventions.md's mask of `c` over the pool's physical token positions: request b's key t lives at
    table[b][t // P]·P + t % P."""
    from attnbench.core import workload

    layout = workload.pages(c)
    rows = workload.visibility(c)
    rows = torch.ones(1, c.seq_len, c.kv_seq_len, dtype=torch.bool) if rows is None else rows
    p = c.page_size
    keep = torch.zeros(c.batch * c.seq_len, layout.num_pages * p, dtype=torch.bool)
    for b, n in enumerate(layout.kv_lens):
        for t in range(n):
            keep[b * c.seq_len:(b + 1) * c.seq_len, layout.table[b][t // p] * p + t % p] = (
                rows[b if len(rows) > 1 else 0][:, t])
    return keep


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PAGED_CASES))
def test_real_paged_bias_is_the_cases_mask_over_the_pool(name: str) -> None:
    c = PAGED_CASES[name]
    bias = xf.xformers_paged_bias(c, types.SimpleNamespace(fmha=types.SimpleNamespace(attn_bias=real_attn_bias())),
                                  torch.device("cpu"))
    want = expected_physical_keep(c)
    tables = bias.block_tables
    used = bias.materialize((want.shape[0], tables.shape[0] * tables.shape[1] * c.page_size))
    got = torch.zeros_like(want)
    got[:, : used.shape[-1]] = torch.isfinite(used)
    assert torch.equal(got, want)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PAGED_CASES))
def test_paged_cache_through_the_standin(standin, name: str) -> None:
    record = measure_one(PAGED_CASES[name], XformersBackend())
    assert record.status == "ok", record.reason
    assert "requests over a pool of pages of" in record.kernel


def test_spare_filled_table_points_unused_entries_at_a_page_nobody_owns() -> None:
    from attnbench.core import workload

    layout = workload.Pages(page_size=4, num_pages=6, table=((3, 1, -1), (0, 4, 2)), kv_lens=(6, 10))
    assert xf.packing.spare_filled_table(layout) == ((3, 1, 5), (0, 4, 2))


def _paged_rows_swapped(real):  # type: ignore[no-untyped-def]
    def wrong(c, ops, device=None):  # type: ignore[no-untyped-def]
        bias = real(c, ops, device)
        bias.block_tables = bias.block_tables.flip(0)  # each request reads another's pages
        return bias
    return wrong


def _paged_not_causal(c, ops, device=None):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return REAL_PAGED_BIAS(replace(c, causal=False), ops, device)


REAL_PAGED_BIAS = xf.xformers_paged_bias


PAGED_SABOTAGES = {
    "paged-rows-swapped": (
        lambda mp: mp.setattr(xf, "xformers_paged_bias", _paged_rows_swapped(xf.xformers_paged_bias)),
        PAGED_CASES["paged-prefill-causal"]),
    "paged-causal-dropped": (lambda mp: mp.setattr(xf, "xformers_paged_bias", _paged_not_causal),
                             PAGED_CASES["paged-prefill-causal"]),
}


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
@pytest.mark.parametrize("name", list(PAGED_SABOTAGES))
def test_standin_catches_a_wrong_paged_mapping(standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    sabotage, c = PAGED_SABOTAGES[name]
    assert_sabotage_caught(c, XformersBackend, sabotage, monkeypatch)


@pytest.mark.parametrize("c, words", [
    (varlen_case(batch=2, seq_len=4, kv_seq_len=40, page_size=16, mode="fwd_bwd"), "paged biases are for inference"),
    (varlen_case(batch=2, seq_len=4, kv_seq_len=40, page_size=16, window=8), "no paged local-attention bias"),
    (varlen_case(documents=3, page_size=16), "documents inside a paged cache would need a document mask"),
])
def test_paged_reasons(c: Case, words: str) -> None:
    reason = XformersBackend().unsupported(c)
    assert reason is not None and words in reason


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_paged_bias_calls_pass_exactly_what_they_declare(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_conformance import Spy

    classes = {call.target: getattr(standin.fmha.attn_bias, call.qualname.split(".")[-2])
               for call in xf.PAGED_BIAS_CALLS}
    spies = {target: Spy(cls.from_seqlens) for target, cls in classes.items()}  # bound before any is patched:
    for target, cls in classes.items():  # the causal class inherits from_seqlens from the other
        monkeypatch.setattr(cls, "from_seqlens", spies[target])
    for c in PAGED_CASES.values():
        assert measure_one(c, XformersBackend()).status == "ok"
    for call in xf.PAGED_BIAS_CALLS:
        spies[call.target].assert_declared(call)


@pytest.mark.skipif(not REAL, reason="xformers is not installed")
def test_padded_bias_calls_pass_exactly_what_they_declare(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_conformance import Spy

    bias = standin.fmha.attn_bias
    spies = {call.target: Spy(getattr(getattr(bias, call.qualname.split(".")[-2]), call.name))
             for call in xf.PADDED_BIAS_CALLS}  # bound before any is patched
    for call in xf.PADDED_BIAS_CALLS:
        cls, spy = getattr(bias, call.qualname.split(".")[-2]), spies[call.target]
        if call.positional[:1] == ("self",):
            monkeypatch.setattr(cls, call.name, lambda self, *a, _spy=spy, **kw: _spy(self, *a, **kw))
        else:
            monkeypatch.setattr(cls, call.name, spy)
    for c in PADDED_CASES.values():
        assert measure_one(c, XformersBackend()).status == "ok"
    for call in xf.PADDED_BIAS_CALLS:
        spies[call.target].assert_declared(call)
