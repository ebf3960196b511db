"""`naive`: textbook multi-head attention in plain PyTorch ops, materialising the score matrix."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from attnbench.backends.base import Backend, Prepared, expand_kv
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(QKᵀ/√d, masked) · V, with K/V heads already matching Q's (or broadcastable to them)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


@register
class NaiveBackend(Backend):
    name = "naive"
    summary = "textbook attention in PyTorch ops (QKᵀ/√d, mask, softmax, ·V); O(seq²) memory"
    materialises_scores = True
    expands_kv = True

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        mask = case.mask(device=q.device)
        return Prepared(
            inputs=(q, expand_kv(k, case), expand_kv(v, case)),
            call=lambda q, k, v: naive_attention(q, k, v, mask),
            kernel=f"torch {self.version()} matmul+softmax" + (" (explicit mask)" if mask is not None else ""),
            kv_expanded=case.kv_heads != case.heads,
        )
