"""What FP8 adapters share: a quantized case's tensors in a page pool, and its descale factors in the shapes the
libraries take (attnbench.core.quant's canonical shapes in, each library's spelling out; all in `prepare`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.backends.base import KernelCost
from attnbench.core import workload
from attnbench.core.case import FP8_DTYPES

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Scales
    from attnbench.core.workload import Pages

# FlashAttention 3's forward on Hopper, which flash-attn-3 calls and PyTorch's quantized SDPA runs (its FA3
# implementation): the kernel's cost, and the scale its FP8 forward puts P under before e4m3 (hopper/softmax.h: P·2^8).
FA3_KERNEL = KernelCost(pairs="visible", efficiency_fwd=0.65, efficiency_bwd=0.45)
FA3_P_SCALE = 256.0


def to_pages(x: torch.Tensor, layout: Pages) -> torch.Tensor:
    """attnbench.core.workload.to_pages for any dtype: FP8 through float32 (exact both ways; PyTorch has no FP8
    index_copy on a CPU), so a paged FP8 cache holds the same stored values and the same junk."""
    if str(x.dtype).removeprefix("torch.") in FP8_DTYPES:
        return workload.to_pages(x.float(), layout).to(x.dtype)
    return workload.to_pages(x, layout)


def per_batch_kv_head(scales: Scales, name: str, case: Case) -> torch.Tensor:
    """`name`'s descale factors as (batch, kv_heads) float32, contiguous: FlashAttention 3's and PyTorch's quantized
    SDPA's layout (hopper/flash_api.cpp: q_descale "(b, h_k), not (b, h)"), for tensor or head granularity."""
    factor = getattr(scales, name)
    assert scales.granularity in ("tensor", "head"), scales.granularity
    return factor.reshape(factor.shape[0], factor.shape[1]).expand(case.batch, case.kv_heads).float().contiguous()


def per_tensor(scales: Scales, name: str) -> float:
    """`name`'s one descale factor, as a Python float (FlashInfer's k_scale / v_scale)."""
    factor = getattr(scales, name)
    assert scales.granularity == "tensor" and factor.numel() == 1, scales.granularity
    return float(factor.reshape(()))
