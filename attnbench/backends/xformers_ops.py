"""`xformers`: memory_efficient_attention, the dispatcher's operator recorded (docs/backends.md#xformers).
BMHK; GQA as BMGHK, forward only. xformers' bottom-right bias classes (docs/conventions.md); their windows
count the diagonal (W + 1). `make_local_attention(W, W)` keeps [i + off − W, i + off + W] as its materialize()
reads it (not its docstring's "at most wl + wr - 1 keys"). """

from __future__ import annotations

import re
import warnings
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from attnbench.backends import packing
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    Unsupported,
    expand_kv,
    quiet_import,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import CUTLASS_FMHA, FLASH_ATTENTION_2, FLASH_ATTENTION_3, per_device
from attnbench.backends.registry import register
from attnbench.backends.sdpa import fp32_math
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, Answer, forward_backward, unset
from attnbench.core import workload

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

NO_OPERATOR = "No operator found"


def xformers_ops() -> Any:
    """`xformers.ops`, imported without its load warning (built_for names the mismatch instead)."""
    return quiet_import("xformers.ops")


BIAS_CALLS = (
    LibraryCall("xformers.ops", "fmha.attn_bias.LowerTriangularFromBottomRightMask"),
    LibraryCall("xformers.ops", "fmha.attn_bias.LowerTriangularFromBottomRightLocalAttentionMask",
                positional=("_window_size",)),  # a private dataclass field: passed by position
    LibraryCall("xformers.ops", "fmha.attn_bias.LocalAttentionFromBottomRightMask",
                keywords=("window_left", "window_right")),
)


# Methods are declared with `self`, as their unbound signatures read; from_seqlens is a classmethod, read
# bound.
VARLEN_BIAS_CALLS = (
    LibraryCall("xformers.ops", "fmha.attn_bias.BlockDiagonalMask.from_seqlens",
                positional=("q_seqlen", "kv_seqlen"), keywords=("device",)),
    LibraryCall("xformers.ops", "fmha.attn_bias.BlockDiagonalMask.make_causal_from_bottomright",
                positional=("self",)),
    LibraryCall("xformers.ops", "fmha.attn_bias.BlockDiagonalMask.make_local_attention_from_bottomright",
                positional=("self", "window_size")),
)


PADDED_BIAS_CALLS = (
    *(LibraryCall("xformers.ops", f"fmha.attn_bias.{name}.from_seqlens",
                  positional=("q_seqlen", "kv_padding", "kv_seqlen"), keywords=("device",))
      for name in ("BlockDiagonalPaddedKeysMask", "BlockDiagonalCausalWithOffsetPaddedKeysMask")),
    LibraryCall("xformers.ops", "fmha.attn_bias.BlockDiagonalPaddedKeysMask.make_local_attention",
                positional=("self", "window_left", "window_right")),
    LibraryCall("xformers.ops",
                "fmha.attn_bias.BlockDiagonalCausalLocalAttentionPaddedKeysMask.from_seqlens_local",
                positional=("q_seqlen", "kv_padding", "kv_seqlen", "window_size")),
)


PAGED_BIAS_CALLS = tuple(
    LibraryCall("xformers.ops", f"fmha.attn_bias.{name}.from_seqlens",
                positional=("q_seqlen", "kv_seqlen", "block_tables", "page_size"), keywords=("device",))
    for name in ("PagedBlockDiagonalPaddedKeysMask", "PagedBlockDiagonalCausalWithOffsetPaddedKeysMask"))


def built_for() -> str:
    """" (its C++ extension was built for torch X; ...)" when cpp_lib.json names another torch release
    (xformers then loads no C++ operator); "" else."""
    import importlib.util
    import json
    from pathlib import Path

    import torch

    try:
        spec = importlib.util.find_spec("xformers")
        path = Path(spec.origin).parent / "cpp_lib.json" if spec and spec.origin else None
        built = json.loads(path.read_text())["version"]["torch"] if path and path.is_file() else None
    except (ImportError, ValueError, OSError, KeyError, TypeError, json.JSONDecodeError):
        return ""
    if not built or built.split("+")[0].split(".")[:2] == torch.__version__.split("+")[0].split(".")[:2]:
        return ""
    return f" (its C++ extension was built for torch {built}; this is torch {torch.__version__})"


def xformers_paged_bias(case: Case, ops: Any, device: Any = None) -> Any:
    """The paged attn_bias over the shared table (int32, unused entries on a spare page)."""
    import torch

    layout = workload.pages(case)
    table = torch.tensor(packing.spare_filled_table(layout), dtype=torch.int32, device=device)
    cls = (ops.fmha.attn_bias.PagedBlockDiagonalCausalWithOffsetPaddedKeysMask if case.causal
           else ops.fmha.attn_bias.PagedBlockDiagonalPaddedKeysMask)
    return cls.from_seqlens([case.seq_len] * case.batch, list(layout.kv_lens), table, case.page_size,
                            device=device)


def xformers_paged_layout(case: Case, q: torch.Tensor, k: torch.Tensor,
                          v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Queries (1, B·Sq, H, K) and the K and V pools (1, pages·page_size, KVH, K); BMGHK for GQA."""
    layout = workload.pages(case)
    qp = packing.pack_q(q)[None]
    kp, vp = (workload.to_pages(t, layout).flatten(0, 1)[None] for t in (k, v))
    return (qp, kp, vp) if case.kv_heads == case.heads else grouped(case, qp, kp, vp)


def xformers_varlen_bias(case: Case, ops: Any, device: Any = None) -> Any:
    """The block-diagonal attn_bias of packed sequences (packing.varlen), bottom-right per block."""
    seqs = packing.varlen(case)
    q_lens = [b - a for a, b in pairwise(seqs.cu_q)]
    block = ops.fmha.attn_bias.BlockDiagonalMask.from_seqlens(q_lens, list(seqs.kv_lens), device=device)
    if not case.causal:
        assert case.window is None, "a two-sided window has no block-diagonal form over contiguous keys"
        return block
    if case.window is None:
        return block.make_causal_from_bottomright()
    return block.make_local_attention_from_bottomright(case.window + 1)


def needs_padded_keys(case: Case) -> bool:
    """Whether packed sequences need padded keys:
    a two-sided window, or causal with fewer keys than queries."""
    if case.window is not None and not case.causal:
        return True
    seqs = packing.varlen(case)
    q_lens = [b - a for a, b in pairwise(seqs.cu_q)]
    return case.causal and any(k < q for q, k in zip(q_lens, seqs.kv_lens, strict=False))


def xformers_padded_bias(case: Case, ops: Any, pad: int, device: Any = None) -> Any:
    """The padded-keys attn_bias: sequence i's queries against the first kv_lens[i] keys
    of its slot of `pad`."""
    seqs = packing.varlen(case)
    q_lens, kv_lens = [b - a for a, b in pairwise(seqs.cu_q)], list(seqs.kv_lens)
    bias = ops.fmha.attn_bias
    if case.causal and case.window is not None:  # no device parameter
        return bias.BlockDiagonalCausalLocalAttentionPaddedKeysMask.from_seqlens_local(q_lens, pad, kv_lens,
                                                                                        case.window + 1)
    if case.causal:
        return bias.BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens(q_lens, pad, kv_lens,
                                                                             device=device)
    block = bias.BlockDiagonalPaddedKeysMask.from_seqlens(q_lens, pad, kv_lens, device=device)
    return block if case.window is None else block.make_local_attention(case.window, case.window)


def xformers_padded_layout(case: Case, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], int]:
    """Queries in one BMHK row, K and V as padded keys (BMGHK for forward GQA); and the slot size."""
    if case.kv_heads != case.heads and case.needs_grad:
        k, v = expand_kv(k, case), expand_kv(v, case)
    (kp, pad), (vp, _) = packing.padded_kv(k, case), packing.padded_kv(v, case)
    qp, kp, vp = packing.pack_q(q)[None], kp[None], vp[None]
    return ((qp, kp, vp) if kp.shape[2] == case.heads else grouped(case, qp, kp, vp)), pad


def xformers_varlen_layout(case: Case, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Canonical tensors packed into one BMHK row (1, tokens, heads, K), or BMGHK for forward GQA."""
    if case.kv_heads != case.heads and case.needs_grad:
        k, v = expand_kv(k, case), expand_kv(v, case)
    qp, kp, vp = packing.pack_q(q)[None], packing.pack_kv(k, case)[None], packing.pack_kv(v, case)[None]
    return (qp, kp, vp) if kp.shape[2] == case.heads else grouped(case, qp, kp, vp)


def grouped(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """BMGHK (B, M, KVH, G, K), K/V expanded over each group, not copied
    (head kv_head·G + i reads kv_head)."""
    g, kvh = case.group_size, case.kv_heads
    q5 = q.view(*q.shape[:2], kvh, g, q.shape[-1])
    k5, v5 = (t.unsqueeze(3).expand(*t.shape[:2], kvh, g, t.shape[-1]) for t in (k, v))
    return q5, k5, v5


def xformers_bias(case: Case, ops: Any) -> Any:
    """The attn_bias of a dense case's mask, bottom-right (never LowerTriangularMask: top-left);
    None unmasked."""
    bias = ops.fmha.attn_bias
    if case.window is None:
        return bias.LowerTriangularFromBottomRightMask() if case.causal else None
    if case.causal:
        return bias.LowerTriangularFromBottomRightLocalAttentionMask(case.window + 1)
    return bias.LocalAttentionFromBottomRightMask(window_left=case.window, window_right=case.window)


def xformers_layout(case: Case, q: torch.Tensor, k: torch.Tensor,
                    v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    def bmhk(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).contiguous()

    if case.kv_heads == case.heads:
        return bmhk(q), bmhk(k), bmhk(v)
    if case.needs_grad:  # BMGHK is forward-only
        return bmhk(q), bmhk(expand_kv(k, case)), bmhk(expand_kv(v, case))
    return grouped(case, bmhk(q), bmhk(k), bmhk(v))


def condense(text: str) -> str:
    """xformers' refusal on one line, without its echo of the inputs."""
    text = re.sub(r" with inputs:.*?(?=`[^`]+` is not supported)", ": ", text, flags=re.DOTALL)
    return re.sub(r"\s+", " ", text).strip()


MEA_CALL = LibraryCall("xformers.ops", "memory_efficient_attention", positional=("query", "key", "value"),
                       keywords=("attn_bias", "scale", "op"))


@register
class XformersBackend(Backend):
    spec = BackendSpec(
        name="xformers",
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.40, efficiency_bwd=0.30)),
        summary="xformers.ops.memory_efficient_attention (BMHK; GQA via BMGHK forward-only); op recorded",
        library="xformers",
        install_hint="pip install 'attnbench[xformers]'  (its wheel needs torch>=2.10)",
        capabilities=Capabilities(
            devices=("cuda",), workload_axes=frozenset({"documents", "kv_lengths", "page_size"}),
            # The ops its dispatcher chooses among.
            kernel_names=per_device(cuda=CUTLASS_FMHA + FLASH_ATTENTION_2 + FLASH_ATTENTION_3)),
        limits=(unset("softcap", "xformers has no soft-capping (its flash operator passes softcap 0)"),
                unset("alibi",
                      "xformers takes ALiBi only as a dense tensor bias; attnbench does not map alibi onto "
                      "xformers")),
        # Under the mode the dispatcher skips IS_DETERMINISTIC = False operators (fa2B).
        determinism=forward_backward(
            Answer(NOT_APPLICABLE, "xformers' forward operators are deterministic"),
            Answer(HONOURED,
                   "xformers' dispatcher picks only operators marked deterministic under the mode")))

    def __init__(self) -> None:
        self._availability: dict[str, str | None] = {}


    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (MEA_CALL, *BIAS_CALLS, *DISPATCH_CALLS, *VARLEN_BIAS_CALLS, *PADDED_BIAS_CALLS,
                *PAGED_BIAS_CALLS)

    def unsupported(self, case: Case) -> str | None:
        if reason := super().unsupported(case):
            return reason
        if case.page_size is not None:
            if case.doc_lens is not None:
                return packing.documents_in_pages(case, "xformers' paged bias")
            if case.needs_grad:
                return "xformers' paged biases are for inference: no backward"
            if case.window is not None:
                return "xformers has no paged local-attention bias (window with page_size)"
        return None

    def availability(self, device: str) -> str | None:
        if device not in self._availability:
            self._availability[device] = self._probe(device)
        return self._availability[device]

    def _probe(self, device: str) -> str | None:
        try:
            ops = xformers_ops()
        except ImportError as exc:
            from importlib.metadata import PackageNotFoundError, version

            try:
                return (f"xformers {version('xformers')} is installed but xformers.ops "
                        f"cannot be imported: {exc}")
            except PackageNotFoundError:
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
            return (f"{where}xformers has no operator for {device} inputs "
                    f"here{built_for()}: {condense(str(exc))}")
        except AttributeError:  # the private dispatcher moved
            return None if device == "cuda" else "needs CUDA (xformers' attention operators are CUDA-only)"
        return None

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        ops = xformers_ops()
        bias, inputs, padded = biased_inputs(case, ops, q, k, v)
        op, op_bw = dispatched_ops(ops, inputs, bias, case.needs_grad)
        mea = ops.memory_efficient_attention
        pinned = None if op is None else (op, op_bw)  # the ops we record are the ops that run

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return mea(q, k, v, attn_bias=bias, scale=case.head_dim ** -0.5, op=pinned)

        b, sq, h = case.batch, case.seq_len, case.heads
        five_d = inputs[0].dim() == 5
        op_name = getattr(op, "NAME", None) or "op unknown (xformers dispatcher not reachable)"
        ops_named = f"fw op {op_name}"
        if case.needs_grad:
            ops_named += (", bw op "
                          f"{getattr(op_bw, 'NAME', None) or 'unknown (xformers dispatcher not reachable)'}")
        cutlass = "cutlass" in str(op_name).lower()
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=(f"xformers {self.version()} memory_efficient_attention {ops_named} "
                    f"({layout_words(case, five_d, padded)}, "
                    f"attn_bias={type(bias).__name__}{_window_of(bias)})"),
            extra=fp32_math(case, inputs[0].device.type, cutlass),
            to_canonical=lambda out: out.reshape(b, sq, h, out.shape[-1]).transpose(1, 2),
            kv_expanded=case.kv_heads != case.heads and not five_d,
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        if isinstance(exc, (NotImplementedError, ValueError)) and (
            NO_OPERATOR in str(exc) or "does not support" in str(exc)
        ):
            return f"xformers: {condense(str(exc))}"
        return None


def is_varlen(case: Case) -> bool:
    return case.doc_lens is not None or case.kv_lens is not None or case.page_size is not None


def biased_inputs(case: Case, ops: Any, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> tuple[Any, tuple[torch.Tensor, ...], int | None]:
    """The attn_bias, the inputs in its layout, and the keys' padded length (None unless padded)."""
    if case.page_size is not None:
        return xformers_paged_bias(case, ops, q.device), xformers_paged_layout(case, q, k, v), None
    if is_varlen(case) and needs_padded_keys(case):
        inputs, padded = xformers_padded_layout(case, q, k, v)
        return xformers_padded_bias(case, ops, padded, q.device), inputs, padded
    if is_varlen(case):
        return xformers_varlen_bias(case, ops, q.device), xformers_varlen_layout(case, q, k, v), None
    return xformers_bias(case, ops), xformers_layout(case, q, k, v), None


def dispatched_ops(ops: Any, inputs: tuple[torch.Tensor, ...], bias: Any,
                   needs_grad: bool) -> tuple[Any, Any]:
    """The forward and backward operators xformers' dispatcher picks; None where its private API is gone."""
    try:
        op = dispatch_fw(ops, *inputs, bias, needs_gradient=needs_grad)
    except NotImplementedError as exc:
        raise Unsupported(f"xformers: {condense(str(exc))}") from None
    except AttributeError:
        return None, None  # let xformers choose, and say that we could not ask
    if not needs_grad:
        return op, None
    try:
        return op, dispatch_bw(ops, *inputs, bias)
    except NotImplementedError as exc:
        raise Unsupported(f"xformers: {condense(str(exc))}") from None
    except AttributeError:
        return op, None  # xformers chooses the backward op, unrecorded


def layout_words(case: Case, five_d: bool, padded: int | None) -> str:
    if five_d:
        layout = "BMGHK, K/V expanded"
    elif case.kv_heads != case.heads:
        layout = "BMHK, K/V repeated"
    else:
        layout = "BMHK"
    if case.page_size is not None:
        layout += f", {case.batch} requests over a pool of pages of {case.page_size}"
    elif padded is not None:
        layout += f", {packing.varlen(case).sequences} sequences in one row, keys padded to {padded}"
    elif is_varlen(case):
        layout += f", {packing.varlen(case).sequences} sequences packed in one row"
    return layout


DISPATCH_CALLS = (
    LibraryCall("xformers.ops", "fmha.Inputs", keywords=("query", "key", "value", "attn_bias"),
                optional=True),
    LibraryCall("xformers.ops", "fmha._dispatch_fw", positional=("inp", "needs_gradient"), optional=True),
    LibraryCall("xformers.ops", "fmha._dispatch_bw", positional=("inp",), keywords=("varlen_lse_packed",),
                optional=True),
)


def dispatch_fw(ops: Any, q: Any, k: Any, v: Any, bias: Any, needs_gradient: bool) -> Any:
    fmha = ops.fmha
    inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias)
    return fmha._dispatch_fw(inp, needs_gradient)


def dispatch_bw(ops: Any, q: Any, k: Any, v: Any, bias: Any) -> Any:
    fmha = ops.fmha
    inp = fmha.Inputs(query=q, key=k, value=v, attn_bias=bias)
    return fmha._dispatch_bw(inp, varlen_lse_packed=None)


def _window_of(bias: Any) -> str:
    for attr in ("_window_size", "window_left"):
        if hasattr(bias, attr):
            right = getattr(bias, "window_right", None)
            return f"({getattr(bias, attr)})" if right is None else f"({bias.window_left}, {right})"
    return ""
