"""`naive`: textbook multi-head attention in plain PyTorch ops, materialising the score matrix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared, expand_kv
from attnbench.backends.kernel_names import MATMUL_SOFTMAX
from attnbench.backends.registry import register
from attnbench.backends.spec import torch_ops
from attnbench.core import workload
from attnbench.core.case import DTYPE_BYTES
from attnbench.core.counting import MemoryCost
from attnbench.verify.inputs import naive_attention

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from attnbench.core.case import Case


@register
class NaiveBackend(Backend):
    spec = BackendSpec(
        name="naive",
        # Scores and probabilities; with backward P kept and dP, dS made.
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.55, efficiency_bwd=0.8,
                                 score_passes_fwd=40.0, score_passes_bwd=14.0, calls=6),
                  cuda=KernelCost(pairs="dense", efficiency_fwd=0.45, efficiency_bwd=0.35,
                                  score_passes_fwd=6.0, score_passes_bwd=14.0, calls=6),
                  memory=MemoryCost(score_copies_fwd=2, score_copies_bwd=4, expands_kv=True)),
        summary="textbook attention in PyTorch ops (QKᵀ/√d, mask, softmax, ·V); O(seq²) memory",
        capabilities=Capabilities(workload_axes=frozenset(workload.MEANT), kernel_names=MATMUL_SOFTMAX),
        determinism=torch_ops("matmul, softmax and masking"))

    def estimate_memory(self, case: Case) -> int:
        """Its MemoryCost, and with pages the K and V gathered in the call."""
        estimate = super().estimate_memory(case)
        if case.page_size is not None:
            estimate += (case.batch * case.kv_heads * case.kv_seq_len * (case.head_dim + case.v_dim)
                         * DTYPE_BYTES[case.dtype])
        return estimate

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        mask = workload.visibility(case, device=q.device)
        mask = None if mask is None else mask[:, None]  # (R, 1, Sq, Sk) over (B, H, Sq, Sk)
        bias = workload.alibi_bias(case, device=q.device, dtype=q.dtype)
        softcap = case.softcap
        words = ["explicit mask"] if mask is not None else []
        words += [f"softcap {softcap:g}"] if softcap is not None else []
        words += ["ALiBi bias"] if bias is not None else []
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return naive_attention(q, k, v, mask, softcap, bias)

        inputs, call, paged = laid_out(case, q, k, v, attend)
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=(f"torch {self.version()} matmul+softmax"
                    + (f" ({', '.join(words + paged)})" if words + paged else "")),
            kv_expanded=case.kv_heads != case.heads,
        )


def laid_out(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
             to_pages: Callable[[torch.Tensor, workload.Pages], torch.Tensor] = workload.to_pages,
             ) -> tuple[tuple[torch.Tensor, ...], Callable[..., torch.Tensor], list[str]]:
    """The inputs and call of `attend(q, k, v)` over expanded K/V, and the kernel label's words; with pages
    the call gathers K/V from the pool (timed, as a naive paged attention does)."""
    if case.page_size is None:
        return (q, expand_kv(k, case), expand_kv(v, case)), attend, []
    layout = workload.pages(case)
    table = workload.table_tensor(layout, q.device)

    def call(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        k, v = (expand_kv(workload.gather(pool, table, case.kv_seq_len), case) for pool in (k_pool, v_pool))
        return attend(q, k, v)

    return (q, to_pages(k, layout), to_pages(v, layout)), call, [f"pages of {case.page_size} "
                                                                 "gathered in the call"]
