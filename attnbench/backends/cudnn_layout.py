"""A case as cuDNN's SDPA graph: masking keywords, dims, strides and ragged offsets per route (the mapping:
attnbench.backends.cudnn)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from attnbench.backends import packing
from attnbench.core import workload

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16"}


def mask_arguments(case: Case) -> dict[str, Any]:
    """cuDNN's masking keywords (alignment by enum name): bottom-right, but top-left with ALiBi."""
    args: dict[str, Any] = {"diagonal_alignment": "TOP_LEFT" if case.alibi else "BOTTOM_RIGHT"}
    if case.causal:
        args["diagonal_band_right_bound"] = 0
    elif case.window is not None:
        args["diagonal_band_right_bound"] = case.window
    if case.window is not None:
        args["diagonal_band_left_bound"] = case.window + 1
    if case.alibi:
        args["use_alibi_mask"] = True
    return args


def token_major_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of (B, H, S, D) dims held token-major, as (B, S, H, D) in memory."""
    b, h, s, d = dims
    return (s * h * d, d, h * d, 1)


def to_token_major(t: torch.Tensor) -> torch.Tensor:
    """Canonical (B, H, S, D) to contiguous (B, S, H, D) memory."""
    return t.transpose(1, 2).contiguous()


def route(case: Case) -> str:
    """"paged", "ragged" (documents), "padded" (ragged cache lengths) or "dense"."""
    if case.page_size is not None:
        return "paged"
    if case.doc_lens is not None:
        return "ragged"
    if case.kv_lens is not None:
        return "padded"
    return "dense"


@dataclass(frozen=True)
class Operand:
    """A graph tensor: dims, strides, data type name, and its ragged offsets' operand (None: not ragged)."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    ragged: str | None = None


@dataclass(frozen=True)
class Spec:
    """A built graph's cache key: operands by role, the sdpa node's keywords
    (runtime values are not in it)."""

    io: str
    operands: tuple[tuple[str, Operand], ...]
    keywords: tuple[tuple[str, Any], ...]
    training: bool

    def operand(self, role: str) -> Operand:
        return dict(self.operands)[role]

    def has(self, role: str) -> bool:
        return role in dict(self.operands)


@dataclass
class Layout:
    """A case laid out for cuDNN: spec, inputs, the variant pack's runtime tensors,
    output shapes and the way back."""

    spec: Spec
    inputs: tuple[torch.Tensor, ...]
    runtime: dict[str, torch.Tensor]
    out_shape: tuple[int, ...]
    stats_shape: tuple[int, ...]
    to_canonical: Callable[[torch.Tensor], torch.Tensor]
    words: list[str] = field(default_factory=list)


def heads_second(out: torch.Tensor) -> torch.Tensor:
    return out.transpose(1, 2)


def layout(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Layout:

    io = DTYPES[case.dtype]
    h, kvh, d, dv = case.heads, case.kv_heads, case.head_dim, case.v_dim
    device = q.device
    keywords: dict[str, Any] = {"attn_scale": case.head_dim ** -0.5, **mask_arguments(case)}
    operands: dict[str, Operand] = {}
    runtime: dict[str, torch.Tensor] = {}
    how = route(case)
    words: list[str] = []

    def lengths(q_lens: tuple[int, ...], kv_lens: tuple[int, ...]) -> None:
        keywords["use_padding_mask"] = True
        for role, values in (("seq_len_q", q_lens), ("seq_len_kv", kv_lens)):
            operands[role] = Operand((len(values), 1, 1, 1), (1, 1, 1, 1), "INT32")
            runtime[role] = packing.int32(values, device).view(-1, 1, 1, 1)

    if how == "ragged":
        seqs = packing.varlen(case)
        n, sq, sk = seqs.sequences, seqs.max_q, seqs.max_k
        # contiguous: cuDNN reads at the declared strides, and packing may return a view
        inputs = tuple(t.contiguous() for t in (packing.pack_q(q), packing.pack_kv(k, case),
                                                packing.pack_kv(v, case)))
        lens = tuple(b - a for a, b in pairwise(seqs.cu_q))
        lengths(lens, seqs.kv_lens)
        keywords["max_total_seq_len_q"], keywords["max_total_seq_len_kv"] = seqs.cu_q[-1], seqs.cu_k[-1]
        for role, cu, width in (("q", seqs.cu_q, h * d), ("k", seqs.cu_k, kvh * d),
                                ("v", seqs.cu_k, kvh * dv), ("o", seqs.cu_q, h * dv),
                                ("stats", seqs.cu_q, h)):
            operands[f"{role}_offset"] = Operand((n + 1, 1, 1, 1), (1, 1, 1, 1), "INT64")
            runtime[f"{role}_offset"] = ragged_offsets(cu, width, device)
        dims = {"q": (n, h, sq, d), "k": (n, kvh, sk, d), "v": (n, kvh, sk, dv), "o": (n, h, sq, dv),
                "stats": (n, h, sq, 1)}
        for role, dim in dims.items():
            operands[role] = Operand(dim, token_major_strides(dim), "FLOAT" if role == "stats" else io,
                                     ragged=f"{role}_offset")
        total_q = seqs.cu_q[-1]
        out_shape, stats_shape = (total_q, h, dv), (total_q, h, 1)
        to_canonical: Callable[[torch.Tensor], torch.Tensor] = partial(packing.unpack_out, case=case)
        words.append(f"ragged, {n} sequences")
    else:
        b, sq, sk = case.batch, case.seq_len, case.kv_seq_len
        native_q = to_token_major(q)
        if how == "paged":
            pages = workload.pages(case)
            pools = tuple(workload.to_pages(t, pages) for t in (k, v))  # (pages, P, KVH, D)
            inputs = (native_q, *pools)
            num, p = pages.num_pages, pages.page_size
            kv_dims = {"k": (num, kvh, p, d), "v": (num, kvh, p, dv)}  # each page read as (KVH, P, D)
            # (B, pages) int32, unused entries → page 0 (never read)
            table = packing.block_table(pages, device)
            width = table.shape[1]
            for role in ("k_table", "v_table"):
                operands[role] = Operand((b, 1, width, 1), (width, width, 1, 1), "INT32")
                runtime[role] = table.view(b, 1, width, 1)
            keywords["paged_attention_max_seq_len_kv"] = sk
            lengths((sq,) * b, workload.request_kv_lens(case))
            words.append(f"paged K/V, pages of {p}")
        else:
            inputs = (native_q, to_token_major(k), to_token_major(v))
            kv_dims = {"k": (b, kvh, sk, d), "v": (b, kvh, sk, dv)}
            if how == "padded":
                lengths((sq,) * b, workload.request_kv_lens(case))
                words.append("padding mask (each request's kv length)")
        dims = {"q": (b, h, sq, d), **kv_dims, "o": (b, h, sq, dv)}
        for role, dim in dims.items():
            operands[role] = Operand(dim, token_major_strides(dim), io)
        operands["stats"] = Operand((b, h, sq, 1), (h * sq, sq, 1, 1), "FLOAT")
        out_shape, stats_shape = (b, sq, h, dv), (b, h, sq, 1)
        to_canonical = heads_second
    spec = Spec(io, tuple(operands.items()), tuple(keywords.items()), case.needs_grad)
    return Layout(spec, inputs, runtime, out_shape, stats_shape, to_canonical, words)


def ragged_offsets(cu: tuple[int, ...], width: int, device: Any) -> torch.Tensor:
    """Each sequence's first element offset (cu_seqlens · elements per token), (N + 1, 1, 1, 1) int64."""
    import torch

    return torch.tensor([c * width for c in cu], dtype=torch.int64, device=device).view(-1, 1, 1, 1)


