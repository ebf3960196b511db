"""`xformers`: xformers.ops.memory_efficient_attention, with the operator its dispatcher picks recorded.

Layout BMHK (batch, seq, heads, head_dim). MQA/GQA goes through xformers' 5-D BMGHK form
(batch, seq, kv_heads, group, head_dim) with K/V `expand`ed, not copied; xformers supports that form
for the forward pass only, so backward modes repeat K/V per query head (and say so: kv_expanded).
Masks are xformers' bottom-right bias classes, which state GUIDE.md's alignment themselves.
"""

from __future__ import annotations

import importlib
import re
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Backend, Prepared, Unsupported, expand_kv
from attnbench.backends.sdpa import fp32_math
from attnbench.conformance import LibraryCall
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

NO_OPERATOR = "No operator found"


def xformers_ops() -> Any:
    """The `xformers.ops` module (looked up in sys.modules first, so a test can stand one in)."""
    return importlib.import_module("xformers.ops")


# The bias classes xformers_bias constructs, with what it passes (attnbench.conformance checks them).
BIAS_CALLS = (
    LibraryCall("xformers.ops", "fmha.attn_bias.LowerTriangularFromBottomRightMask"),
    LibraryCall("xformers.ops", "fmha.attn_bias.LowerTriangularFromBottomRightLocalAttentionMask",
                positional=("_window_size",)),  # a dataclass field: its own name is private, we pass it by position
    LibraryCall("xformers.ops", "fmha.attn_bias.LocalAttentionFromBottomRightMask",
                keywords=("window_left", "window_right")),
)


def xformers_bias(case: Case, ops: Any) -> Any:
    """The attn_bias object for GUIDE.md's mask, from `ops.fmha.attn_bias`; None when unmasked.

    causal → LowerTriangularFromBottomRightMask (j <= i + off); causal + window W →
    LowerTriangularFromBottomRightLocalAttentionMask(W + 1) (keys at distance 0 … W); window W alone →
    LocalAttentionFromBottomRightMask(W, W) (i + off - W <= j <= i + off + W). Never LowerTriangularMask:
    it is top-left aligned.
    """
    bias = ops.fmha.attn_bias
    if case.window is None:
        return bias.LowerTriangularFromBottomRightMask() if case.causal else None
    if case.causal:
        return bias.LowerTriangularFromBottomRightLocalAttentionMask(case.window + 1)
    return bias.LocalAttentionFromBottomRightMask(window_left=case.window, window_right=case.window)


def xformers_layout(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Canonical tensors to BMHK, or BMGHK with K/V expanded over each group for forward-only GQA/MQA."""
    bmhk = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731
    if case.kv_heads == case.heads:
        return bmhk(q), bmhk(k), bmhk(v)
    if case.needs_grad:  # BMGHK is forward-only in xformers: repeat K/V per query head for real
        return bmhk(q), bmhk(expand_kv(k, case)), bmhk(expand_kv(v, case))
    b, g, kvh, d = case.batch, case.group_size, case.kv_heads, case.head_dim
    q5 = bmhk(q).view(b, case.seq_len, kvh, g, d)  # query head h = kv_head·g + i reads kv_head
    k5, v5 = (bmhk(t).unsqueeze(3).expand(b, case.kv_seq_len, kvh, g, d) for t in (k, v))
    return q5, k5, v5


def condense(text: str) -> str:
    """xformers' multi-line refusal on one line, without its echo of the inputs (the record has the case)."""
    text = re.sub(r" with inputs:.*?(?=`[^`]+` is not supported)", ": ", text, flags=re.DOTALL)
    return re.sub(r"\s+", " ", text).strip()


# prepare's timed call: mea(q, k, v, attn_bias=, scale=, op=).
MEA_CALL = LibraryCall("xformers.ops", "memory_efficient_attention", positional=("query", "key", "value"),
                       keywords=("attn_bias", "scale", "op"))


@register
class XformersBackend(Backend):
    name = "xformers"
    summary = "xformers.ops.memory_efficient_attention (BMHK; GQA via BMGHK forward-only); op recorded"
    library = "xformers"
    devices = ("cuda",)
    install_hint = "pip install 'attnbench[xformers]'  (its wheel needs torch>=2.10)"

    def __init__(self) -> None:
        self._availability: dict[str, str | None] = {}

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (MEA_CALL, *BIAS_CALLS, *DISPATCH_CALLS)

    def availability(self, device: str) -> str | None:
        if device not in self._availability:
            self._availability[device] = self._probe(device)
        return self._availability[device]

    def _probe(self, device: str) -> str | None:
        """Ask xformers' dispatcher about a tiny input on `device`: its refusal is the reason."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ops = xformers_ops()
        except ImportError as exc:
            return f"xformers is not installed (cannot import xformers.ops: {exc})"
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            return "needs CUDA (torch.cuda.is_available() is False)"
        dtype = torch.float16 if device == "cuda" else torch.float32
        t = torch.zeros(1, 8, 1, 64, device=device, dtype=dtype)  # a head size every operator takes
        try:
            dispatch_fw(ops, t, t, t, None, needs_gradient=False)
        except NotImplementedError as exc:
            where = "CUDA-only: " if device != "cuda" else ""
            return f"{where}xformers has no operator for {device} inputs here: {condense(str(exc))}"
        except AttributeError:  # the private dispatcher moved: judge by device alone
            return None if device == "cuda" else "needs CUDA (xformers' attention operators are CUDA-only)"
        return None

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        ops = xformers_ops()
        bias = xformers_bias(case, ops)
        inputs = xformers_layout(case, q, k, v)
        try:
            op = dispatch_fw(ops, *inputs, bias, needs_gradient=case.needs_grad)
        except NotImplementedError as exc:
            raise Unsupported(f"xformers: {condense(str(exc))}") from None
        except AttributeError:
            op = None  # private API gone: let xformers choose, and say that we could not ask
        op_bw = None
        if case.needs_grad and op is not None:
            try:
                op_bw = dispatch_bw(ops, *inputs, bias)
            except NotImplementedError as exc:
                raise Unsupported(f"xformers: {condense(str(exc))}") from None
            except AttributeError:
                op_bw = None  # private API gone: xformers chooses the backward op, unrecorded
        mea = ops.memory_efficient_attention
        pinned = None if op is None else (op, op_bw)  # the ops we record are the ops that run

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return mea(q, k, v, attn_bias=bias, scale=case.head_dim ** -0.5, op=pinned)

        b, sq, h, d = case.batch, case.seq_len, case.heads, case.head_dim
        five_d = inputs[0].dim() == 5
        layout = "BMGHK, K/V expanded" if five_d else ("BMHK, K/V repeated" if case.kv_heads != case.heads else "BMHK")
        op_name = getattr(op, "NAME", None) or "op unknown (xformers dispatcher not reachable)"
        ops_named = f"fw op {op_name}"
        if case.needs_grad:
            ops_named += f", bw op {getattr(op_bw, 'NAME', None) or 'unknown (xformers dispatcher not reachable)'}"
        cutlass = "cutlass" in str(op_name).lower()
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=(f"xformers {self.version()} memory_efficient_attention {ops_named} "
                    f"({layout}, attn_bias={type(bias).__name__}{_window_of(bias)})"),
            extra=fp32_math(case, inputs[0].device.type, cutlass),
            to_canonical=lambda out: out.reshape(b, sq, h, d).transpose(1, 2),
            kv_expanded=case.kv_heads != case.heads and not five_d,
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        if isinstance(exc, (NotImplementedError, ValueError)) and (
            NO_OPERATOR in str(exc) or "does not support" in str(exc)
        ):
            return f"xformers: {condense(str(exc))}"
        return None


# dispatch_fw's private calls; optional, since the adapter does without them when they are gone.
DISPATCH_CALLS = (
    LibraryCall("xformers.ops", "fmha.Inputs", keywords=("query", "key", "value", "attn_bias"), optional=True),
    LibraryCall("xformers.ops", "fmha._dispatch_fw", positional=("inp", "needs_gradient"), optional=True),
    LibraryCall("xformers.ops", "fmha._dispatch_bw", positional=("inp",), keywords=("varlen_lse_packed",),
                optional=True),
)


def dispatch_fw(ops: Any, q: Any, k: Any, v: Any, bias: Any, needs_gradient: bool) -> Any:
    """The forward operator xformers' dispatcher picks for these inputs (private API: may move)."""
    fmha = ops.fmha
    inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias)
    return fmha._dispatch_fw(inp, needs_gradient)


def dispatch_bw(ops: Any, q: Any, k: Any, v: Any, bias: Any) -> Any:
    """The backward operator xformers' dispatcher picks (as memory_efficient_attention does at its forward)."""
    fmha = ops.fmha
    inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias)
    return fmha._dispatch_bw(inp, varlen_lse_packed=None)


def _window_of(bias: Any) -> str:
    for attr in ("_window_size", "window_left"):
        if hasattr(bias, attr):
            right = getattr(bias, "window_right", None)
            return f"({getattr(bias, attr)})" if right is None else f"({bias.window_left}, {right})"
    return ""
