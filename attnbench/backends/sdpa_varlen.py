"""`sdpa-varlen`: `torch.nn.attention.varlen.varlen_attn` (torch >= 2.10, CUDA; docs/backends.md#sdpa-varlen),
packed (total_tokens, heads, head_dim) with int32 `cu_seq_q` / `cu_seq_k`, on PyTorch's FlashAttention. No
`is_causal`: torch 2.13 reads causal from `window_size == (-1, 0)` (a tuple), bottom-right per sequence. """

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends import packing
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    device_problem,
    library_refusal,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import FLASH_ATTENTION_2, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, Answer, Limit, forward_backward, unset
from attnbench.core import workload
from attnbench.core.axes import HALF_DTYPES
from attnbench.core.counting import FLOAT32_BYTES, MemoryCost, tensor_bytes

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

MODULE = "torch.nn.attention.varlen"
MAX_HEAD_DIM = 256
# FA2's paged KV cache page multiple (aten flash_api.cpp).
FA2_PAGE_MULTIPLE = 256
# mha_varlen_bwd's dq_accum: (total_q + 128 · sequences) rows, 128 apart between sequences.
DQ_ACCUM_PAD_ROWS = 128
# Its keyword-only tail differs between torch builds: keywords only some cases need are looked up per case.
VARLEN_CALL = LibraryCall(MODULE, "varlen_attn",
                          positional=("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k"),
                          keywords=("scale", "window_size"))
GQA_KEYWORD = "enable_gqa"
PAGED_KEYWORDS = ("seqused_k", "block_table")
REFUSALS = ("not supported", "only support", "must be", "Expect", "does not support", "Unsupported")


def varlen_window(case: Case) -> tuple[int, int]:
    """`window_size`: causal (-1, 0), causal + W (W, 0), W (W, W), none (-1, -1);
    a tuple (compared with one)."""
    if case.window is None:
        return (-1, 0) if case.causal else (-1, -1)
    return (case.window, 0) if case.causal else (case.window, case.window)


def varlen_function() -> Any:
    return importlib.import_module(MODULE).varlen_attn


def varlen_parameters() -> frozenset[str]:
    import inspect

    try:
        return frozenset(inspect.signature(varlen_function()).parameters)
    except (ImportError, AttributeError, ValueError, TypeError):
        return frozenset()


def paged_reason(case: Case) -> str | None:
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
    spec = BackendSpec(
        name="sdpa-varlen",
        # Kernel: by analogy with sdpa-flash, not fitted. Backward (aten _flash_attention_backward →
        # flash_api.cpp mha_varlen_bwd): a float32 `dq_accum`, under GQA `dk_expanded`/`dv_expanded` per query
        # head, summed after.
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.50, efficiency_bwd=0.35),
                  memory=MemoryCost(bwd_dq_accum=True, bwd_expands_kv=True)),
        summary=("torch.nn.attention.varlen.varlen_attn: packed documents and ragged batches through "
                 "cu_seq_q/cu_seq_k, "
                 "paged KV through block_table; fp16/bf16, CUDA"),
        capabilities=Capabilities(devices=("cuda",), kernel_names=per_device(cuda=FLASH_ATTENTION_2),
                                  workload_axes=frozenset({"documents", "kv_lengths", "page_size"})),
        limits=(Limit(field="dtype", allowed=HALF_DTYPES,
                      reason="{dtype} is not supported (varlen_attn runs "
                             "FlashAttention: float16 or bfloat16)"),
                Limit(field="head_dim", at_most=MAX_HEAD_DIM,
                      reason=f"head_dim {{head_dim}} > {MAX_HEAD_DIM}"),
                unset("softcap", "varlen_attn has no soft-capping"),
                unset("alibi", "varlen_attn has no ALiBi bias"),
                unset("head_dim_v", "varlen_attn needs V's head size equal to Q/K's (no head_dim_v)")),
        determinism=forward_backward(
            Answer(NOT_APPLICABLE, "FlashAttention's forward is deterministic"),
            Answer(HONOURED, "varlen_attn's backward is aten._flash_attention_backward, which takes FA2's "
                   "deterministic path under the mode")))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (VARLEN_CALL,)

    def availability(self, device: str) -> str | None:
        import torch

        if device not in self.capabilities.devices:  # before importing dynamo
            return device_problem(device, self.capabilities.devices,
                                  "needs CUDA (varlen_attn runs PyTorch's CUDA "
                                  "FlashAttention; no CPU kernel)")
        try:
            varlen_function()
        except (ImportError, AttributeError):
            return (f"torch {torch.__version__} has no "
                    "torch.nn.attention.varlen.varlen_attn (added in torch 2.10)")
        return device_problem(device, self.capabilities.devices,
                              "needs CUDA (varlen_attn runs PyTorch's CUDA FlashAttention; no CPU kernel)")

    def unsupported(self, case: Case) -> str | None:
        return super().unsupported(case) or paged_reason(case)

    def estimate_memory(self, case: Case) -> int:
        """Its MemoryCost, and with a backward what mha_varlen_bwd and the packing add: `dq_accum`'s
        DQ_ACCUM_PAD_ROWS rows per sequence, and the copy `out.contiguous()` in _flash_attention_backward makes where
        the packed query is a strided view (one request: pack_q's reshape of a transpose), whose strides the output
        keeps (mha_varlen_fwd: `out = at::empty_like(q_padded)`)."""
        estimate = super().estimate_memory(case)
        if not case.needs_grad:
            return estimate
        rows = DQ_ACCUM_PAD_ROWS * packing.varlen(case).sequences
        padding = rows * case.heads * case.head_dim * FLOAT32_BYTES
        strided = case.batch == 1 and case.heads > 1
        return estimate + padding + (tensor_bytes(case)["o"] if strided else 0)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        fn = varlen_function()
        device = q.device
        seqs = packing.varlen(case)
        window = varlen_window(case)
        kwargs: dict[str, Any] = {"scale": case.head_dim ** -0.5, "window_size": window}
        if case.kv_heads != case.heads and GQA_KEYWORD in varlen_parameters():
            kwargs[GQA_KEYWORD] = True  # torch 2.13 refuses GQA without it
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
