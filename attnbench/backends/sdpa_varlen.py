"""`sdpa-varlen`: PyTorch's `torch.nn.attention.varlen.varlen_attn` (torch >= 2.10), CUDA only.

varlen_attn takes packed `(total_tokens, heads, head_dim)` queries and keys with int32 cumulative offsets
`cu_seq_q` / `cu_seq_k` and runs PyTorch's FlashAttention (FA2 unless another implementation is activated):
documents become one sequence each, ragged caches one sequence per request (its own keys only), and a paged
cache is the `(pages, page_size, KVH, D)` pool with `block_table` and `seqused_k` (inference only; FA2 needs
pages of a multiple of 256 tokens). There is no `is_causal`: torch 2.13's varlen_attn takes causal from
`window_size == (-1, 0)` (a tuple: a list would not compare equal), and a window W from `(W, 0)` or `(W, W)`,
aligned bottom-right per sequence as FlashAttention does. The packing happens in `prepare`, the unpacking of
the output for the check outside the timed call; the timed call is varlen_attn alone.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends import packing
from attnbench.backends.base import (
    Backend,
    Cost,
    KernelCost,
    Prepared,
    device_problem,
    library_refusal,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import FLASH_ATTENTION_2, per_device
from attnbench.backends.registry import register
from attnbench.core import workload
from attnbench.core.axes import HALF_DTYPES

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

MODULE = "torch.nn.attention.varlen"
MAX_HEAD_DIM = 256
# FlashAttention 2's paged KV cache (aten flash_api.cpp) takes only pages of a multiple of this many tokens.
FA2_PAGE_MULTIPLE = 256
# What prepare's call always passes (attnbench.backends.conformance holds it against the installed torch). varlen_attn's
# keyword-only tail differs between torch builds (torch 2.13: enable_gqa, seqused_k, block_table; another pytorch
# main snapshot: k_cache, v_cache, cache_seqlens, page_table for FA3's KV-cache path, no enable_gqa), so the
# keywords only some cases need are looked up in the installed signature per case (varlen_parameters), and a case
# needing one that is absent is skipped naming it.
VARLEN_CALL = LibraryCall(MODULE, "varlen_attn",
                          positional=("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k"),
                          keywords=("scale", "window_size"))
GQA_KEYWORD = "enable_gqa"
PAGED_KEYWORDS = ("seqused_k", "block_table")
# PyTorch's own refusals (ValueError in varlen_attn, RuntimeError from the flash kernel's input checks).
REFUSALS = ("not supported", "only support", "must be", "Expect", "does not support", "Unsupported")


def varlen_window(case: Case) -> tuple[int, int]:
    """varlen_attn's `window_size` for docs/conventions.md's mask: causal → (-1, 0) (varlen_attn's spelling of causal);
    causal + W → (W, 0); W alone → (W, W); nothing → (-1, -1). Always a tuple (varlen_attn compares with one)."""
    if case.window is None:
        return (-1, 0) if case.causal else (-1, -1)
    return (case.window, 0) if case.causal else (case.window, case.window)


def varlen_function() -> Any:
    """torch's varlen_attn, looked up at each prepare (so a test can stand one in)."""
    return importlib.import_module(MODULE).varlen_attn


def varlen_parameters() -> frozenset[str]:
    """The parameter names of the installed varlen_attn (empty when there is none)."""
    import inspect

    try:
        return frozenset(inspect.signature(varlen_function()).parameters)
    except (ImportError, AttributeError, ValueError, TypeError):
        return frozenset()


def paged_reason(case: Case) -> str | None:
    """Why varlen_attn's block_table cannot run a paged `case`; None when it may (or the case has no pages)."""
    if case.page_size is None:
        return None
    if case.doc_lens is not None:
        return packing.documents_in_pages(case, "varlen_attn's block_table")
    if case.needs_grad:
        return "varlen_attn's block_table (paged KV) is inference-only: no backward"
    missing = [name for name in PAGED_KEYWORDS if name not in varlen_parameters()]
    if missing:
        return (f"this torch's varlen_attn has no {', '.join(missing)} (a paged KV cache through block_table "
                "arrived with torch 2.13's signature); attnbench does not map page_size onto it")
    if case.page_size % FA2_PAGE_MULTIPLE:
        return (f"varlen_attn pages through FlashAttention 2, which takes pages of a multiple of "
                f"{FA2_PAGE_MULTIPLE} tokens (page_size {case.page_size})")
    return None


@register
class SdpaVarlen(Backend):
    name = "sdpa-varlen"
    kernel_names = per_device(cuda=FLASH_ATTENTION_2)  # PyTorch's FA2 varlen kernels
    # By analogy with sdpa-flash (varlen_attn is PyTorch's FlashAttention 2), not yet fitted.
    cost = Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.50, efficiency_bwd=0.35))
    summary = ("torch.nn.attention.varlen.varlen_attn: packed documents and ragged batches through cu_seq_q/cu_seq_k, "
               "paged KV through block_table; fp16/bf16, CUDA")
    devices = ("cuda",)
    workload_axes = frozenset({"documents", "kv_lengths", "page_size"})

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (VARLEN_CALL,)

    def availability(self, device: str) -> str | None:
        import torch

        if device not in self.devices:  # said before importing varlen, which imports dynamo (a second, for `list`)
            return device_problem(device, self.devices,
                                  "needs CUDA (varlen_attn runs PyTorch's CUDA FlashAttention; no CPU kernel)")
        try:
            varlen_function()
        except (ImportError, AttributeError):
            return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn (added in torch 2.10)"
        return device_problem(device, self.devices,
                              "needs CUDA (varlen_attn runs PyTorch's CUDA FlashAttention; no CPU kernel)")

    def unsupported(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES:
            return f"{case.dtype} is not supported (varlen_attn runs FlashAttention: float16 or bfloat16)"
        if case.head_dim > MAX_HEAD_DIM:
            return f"head_dim {case.head_dim} > {MAX_HEAD_DIM}"
        if case.softcap is not None:
            return "varlen_attn has no soft-capping"
        if case.alibi:
            return "varlen_attn has no ALiBi bias"
        if case.head_dim_v is not None:
            return "varlen_attn needs V's head size equal to Q/K's (no head_dim_v)"
        return paged_reason(case)

    def deterministic(self, case: Case) -> str:
        if not case.needs_grad:
            return "not applicable (FlashAttention's forward is deterministic)"
        return ("honoured (varlen_attn's backward is aten._flash_attention_backward, which takes FA2's deterministic "
                "path under the mode)")

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        fn = varlen_function()
        device = q.device
        seqs = packing.varlen(case)
        window = varlen_window(case)
        kwargs: dict[str, Any] = {"scale": case.head_dim ** -0.5, "window_size": window}
        if case.kv_heads != case.heads and GQA_KEYWORD in varlen_parameters():
            kwargs[GQA_KEYWORD] = True  # torch 2.13 refuses fewer KV heads without it; FA2 reads them natively
        cu_q, cu_k = packing.int32(seqs.cu_q, device), packing.int32(seqs.cu_k, device)
        if case.page_size is None:
            inputs = (packing.pack_q(q), packing.pack_kv(k, case), packing.pack_kv(v, case))
            how = f"{seqs.sequences} sequences"
        else:
            layout = workload.pages(case)
            kwargs["seqused_k"] = packing.int32(seqs.kv_lens, device)
            kwargs["block_table"] = packing.block_table(layout, device)
            inputs = (packing.pack_q(q), workload.to_pages(k, layout), workload.to_pages(v, layout))
            how = f"{seqs.sequences} sequences, block_table over pages of {case.page_size}"
        max_q, max_k = seqs.max_q, seqs.max_k

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return fn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)

        gqa = "" if case.kv_heads == case.heads else f", native GQA {case.heads}/{case.kv_heads}"
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"torch {self.version()} varlen_attn(window_size={window}, {how}{gqa})",
            to_canonical=lambda out: packing.unpack_out(out, case),
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "varlen_attn", REFUSALS, (RuntimeError, ValueError, NotImplementedError))
