"""What FP8 adapters share: quantized tensors in a page pool, descale factors in each library's shape."""

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

# FA3's forward (flash-attn-3, and PyTorch's quantized SDPA): its cost, and P's scale before e4m3
# (hopper/softmax.h).
FA3_KERNEL = KernelCost(pairs="visible", efficiency_fwd=0.65, efficiency_bwd=0.45)
FA3_P_SCALE = 256.0


def to_pages(x: torch.Tensor, layout: Pages) -> torch.Tensor:
    """workload.to_pages for FP8 too, through float32 (exact; no FP8 index_copy on a CPU)."""
    if str(x.dtype).removeprefix("torch.") in FP8_DTYPES:
        return workload.to_pages(x.float(), layout).to(x.dtype)
    return workload.to_pages(x, layout)


def per_batch_kv_head(scales: Scales, name: str, case: Case) -> torch.Tensor:
    """`name`'s descales as contiguous float32 (batch, kv_heads)
    (hopper/flash_api.cpp: "(b, h_k), not (b, h)")."""
    factor = getattr(scales, name)
    assert scales.granularity in ("tensor", "head"), scales.granularity
    per_head = factor.reshape(factor.shape[0], factor.shape[1])
    return per_head.expand(case.batch, case.kv_heads).float().contiguous()


def per_tensor(scales: Scales, name: str) -> float:
    """`name`'s one descale factor as a float (FlashInfer's k_scale / v_scale)."""
    factor = getattr(scales, name)
    assert scales.granularity == "tensor" and factor.numel() == 1, scales.granularity
    return float(factor.reshape(()))
