"""`sliding-window`: our local attention in PyTorch ops, O(seq_len × window) work and memory.

Each block of `block` queries sees one span of `block + W + W_right` keys (W_right 0 causal, W two-sided),
spans `block` apart: K and V, padded, are viewed as overlapping windows (`unfold`, no copy), and each block is
a small dense attention under the exact mask. GQA folds a KV head's query group into the block's rows. """

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared
from attnbench.backends.kernel_names import MATMUL_SOFTMAX
from attnbench.backends.registry import register
from attnbench.backends.spec import Limit, torch_ops, unset
from attnbench.core import counting, workload
from attnbench.core.case import DTYPE_BYTES

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

# Rows per block: each query pays block + window keys; below 64, tiny matmuls' overhead dominates.
MIN_BLOCK = 64
MAX_BLOCK = 128
# The algorithm's revision, in every record's `kernel`: 2 sums the overlapping windows' dK/dV in float32.
REVISION = 2


@dataclass(frozen=True)
class Blocking:

    seq_len: int
    kv_seq_len: int
    block: int  # query rows per block
    span: int  # keys each block sees: block + left + right
    left: int  # the window to the left, clipped to what exists
    blocks: int
    drop: torch.Tensor  # bool (blocks, block, span): True where a row must NOT see a span position
    # bool (blocks, block): rows that see some key (the others output zeros); None when all do
    seen: torch.Tensor | None = None

    @property
    def pad_front(self) -> int:
        """Zero keys in front of K: block 0's span starts at key `off - left`."""
        return max(0, self.left - (self.kv_seq_len - self.seq_len))

    @property
    def first_key(self) -> int:
        return max(0, self.kv_seq_len - self.seq_len - self.left)


def blocking(seq_len: int, kv_seq_len: int, window: int, causal: bool,
             block: int | None = None) -> tuple[int, int, int]:
    """(block, blocks, span)."""
    left = min(window, kv_seq_len + abs(kv_seq_len - seq_len))
    right = 0 if causal else left
    if block is None:
        block = min(MAX_BLOCK, max(MIN_BLOCK, left))
    block = max(1, min(block, seq_len))
    return block, -(-seq_len // block), block + left + right


def plan_for(
    seq_len: int,
    kv_seq_len: int,
    window: int,
    causal: bool,
    allowed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device: torch.device | str | None = None,
    block: int | None = None,
) -> Blocking:
    """Block the queries and build the in-span mask from `allowed(q_idx, k_idx)`; the window is clipped to
    `Sk + |off|`, so the cost is bounded by the case."""
    import torch

    off = kv_seq_len - seq_len
    left = min(window, kv_seq_len + abs(off))
    block, blocks, span = blocking(seq_len, kv_seq_len, window, causal, block)
    # Block n's span position l holds key n·block + l + off - left; its row t is query n·block + t.
    n = torch.arange(blocks, device=device)[:, None, None]
    q_idx = n * block + torch.arange(block, device=device)[None, :, None]
    k_idx = n * block + torch.arange(span, device=device)[None, None, :] + (off - left)
    keep = allowed(q_idx, k_idx) & (q_idx < seq_len) & (k_idx >= 0) & (k_idx < kv_seq_len)
    seen = keep.any(dim=-1)
    real = q_idx[..., 0] < seq_len
    return Blocking(seq_len, kv_seq_len, block, span, left, blocks, ~keep,
                    None if bool(seen[real].all()) else seen)


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             plan: Blocking) -> torch.Tensor:
    """Local attention of q (B, H, Sq, D) over k, v (B, KVH, Sk, D); O(B·H·Sq·span), backward too."""
    import torch
    import torch.nn.functional as F

    b, h, sq, d = q.shape
    kvh = k.shape[1]
    g = h // kvh
    t, nb, span = plan.block, plan.blocks, plan.span
    qp = F.pad(q, (0, 0, 0, nb * t - sq)) if nb * t != sq else q
    qb = qp.view(b, kvh, g, nb, t, d).transpose(2, 3).reshape(b, kvh, nb, g * t, d)
    # Keys some block can see, zero-padded so block n's span starts at n·t.
    kv_len = (nb - 1) * t + span
    tail = kv_len - plan.pad_front - (k.shape[2] - plan.first_key)

    def windows(x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, plan.first_key:]
        x = x[:, :, : x.shape[2] + min(0, tail)]
        x = F.pad(x, (0, 0, plan.pad_front, max(0, tail)))
        return overlapping_windows(x, span, t)  # (B, KVH, nb, D, span): overlapping views, no copy

    kw, vw = windows(k), windows(v)
    # In place: autograd needs neither form, and two score-sized buffers are saved.
    scores = (qb @ kw).div_(math.sqrt(d))  # (B, KVH, nb, g·t, span)
    # A row with no visible key (only padding rows) gets finite weights over zero keys, never NaN.
    scores.view(b, kvh, nb, g, t, span).masked_fill_(plan.drop[:, None], torch.finfo(q.dtype).min)
    probs = scores.softmax(dim=-1)
    out = probs @ vw.transpose(-1, -2)  # (B, KVH, nb, g·t, D)
    if plan.seen is not None:  # queries that see no key output zeros
        out = (out.view(b, kvh, nb, g, t, d) * plan.seen[:, None, :, None]).view(b, kvh, nb, g * t, d)
    out = out.view(b, kvh, nb, g, t, d).transpose(2, 3).reshape(b, h, nb * t, d)
    return out[:, :, :sq] if nb * t != sq else out


def overlapping_windows(x: torch.Tensor, span: int, step: int) -> torch.Tensor:
    """`x.unfold(2, span, step)` whose backward sums in float32:
    in bf16, a rounding per window exceeds the bound."""
    return _WindowsFp32Grad.apply(x, span, step)


def _windows_function() -> type:
    import torch

    class WindowsFp32Grad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: torch.Tensor, span: int, step: int) -> torch.Tensor:  # type: ignore[override]
            ctx.shape, ctx.span, ctx.step = x.shape, span, step
            return x.unfold(2, span, step)

        @staticmethod
        def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
            wide = grad if grad.dtype in (torch.float32, torch.float64) else grad.float()
            summed = torch.ops.aten.unfold_backward(wide, list(ctx.shape), 2, ctx.span, ctx.step)
            return summed.to(grad.dtype), None, None

    return WindowsFp32Grad


class _LazyFunction:
    """The autograd.Function built on first use: importing this module does not import torch."""

    def __init__(self, make: Callable[[], type]) -> None:
        self.make, self.fn = make, None

    def apply(self, *args: object) -> torch.Tensor:
        if self.fn is None:
            self.fn = self.make()
        return self.fn.apply(*args)


_WindowsFp32Grad = _LazyFunction(_windows_function)


def allowed_of(case: Case, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The case's mask as `allowed(q_idx, k_idx)`."""
    if case.doc_lens is None:
        return lambda q_idx, k_idx: workload.allowed(q_idx, k_idx, case.offset, case.causal, case.window)
    predicate = workload.allowed_fn(case, device)
    last = case.seq_len - 1
    return lambda q_idx, k_idx: predicate(0, q_idx.clamp(0, last), k_idx.clamp(0, last))


@register
class SlidingWindowBackend(Backend):
    spec = BackendSpec(
        name="sliding-window",
        cost=Cost(cpu=KernelCost(pairs="visible", efficiency_fwd=0.2, efficiency_bwd=0.2,
                                 score_passes_fwd=0.0, score_passes_bwd=0.0, calls=8),
                  cuda=KernelCost(pairs="visible", efficiency_fwd=0.25, efficiency_bwd=0.15,
                                  score_passes_fwd=0.0, score_passes_bwd=0.0, calls=8)),
        summary="our blocked local attention in PyTorch ops: O(seq × window) work and memory; windows only",
        capabilities=Capabilities(workload_axes=frozenset({"documents"}), kernel_names=MATMUL_SOFTMAX),
        limits=(Limit(field="window", refused=(None,), reason=(
                    "needs a window (sliding-window attention is local by design; a full or plain causal "
                    "mask is O(seq²) work, measured by naive, sdpa and flex)")),
                unset("doc_kv_lens",
                      "sliding-window blocks documents whose keys are their queries; attnbench does not "
                      "map documents with a cached prefix onto it")),
        # unfold's backward raises where PyTorch has no deterministic implementation: the skip names it.
        determinism=torch_ops("matmul, softmax and unfold"))

    def estimate_memory(self, case: Case) -> int:
        """The band (B, H, Sq, span) twice, four times with backward; the K/V windows; two outputs;
        gradients."""
        block, blocks, span = blocking(case.seq_len, case.kv_seq_len, case.window or 0, case.causal)
        elem = DTYPE_BYTES[case.dtype]
        sizes = counting.tensor_bytes(case)
        band = case.batch * case.heads * blocks * block * span * elem
        windows = case.batch * case.kv_heads * blocks * span * (case.head_dim + case.v_dim) * elem
        grads = sizes["q"] + sizes["k"] + sizes["v"] if case.needs_grad else 0
        return (4 if case.needs_grad else 2) * band + windows + 2 * sizes["o"] + grads

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        assert case.window is not None
        plan = plan_for(case.seq_len, case.kv_seq_len, case.window, case.causal, allowed_of(case, q.device),
                        device=q.device)
        return Prepared(
            inputs=(q, k, v),
            call=lambda q, k, v: sliding_window_attention(q, k, v, plan),
            kernel=(f"attnbench sliding-window r{REVISION} on torch {self.version()}: blocked (block "
                    f"{plan.block}, span {plan.span}, {'causal' if case.causal else 'two-sided'}, "
                    "K/V broadcast over groups)"),
            extra={"block": plan.block, "span": plan.span},
        )
