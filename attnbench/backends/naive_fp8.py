"""`naive-fp8`: the FP8 yardstick: quantized inputs dequantized (timed), then textbook attention in float32,
on every device; its numerics are attnbench.core.quant.plain_numerics. """

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.backends import fp8
from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared, expand_kv
from attnbench.backends.kernel_names import MATMUL_SOFTMAX
from attnbench.backends.naive import laid_out
from attnbench.backends.registry import register
from attnbench.backends.spec import Limit, torch_ops
from attnbench.core import quant, workload
from attnbench.core.counting import MemoryCost, bytes_moved, tensor_bytes
from attnbench.verify.inputs import dtype_of, naive_attention

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Numerics, Scales

EVERY_FORMAT = quant.EVERY_INPUT | {f"scale:{g}" for g in quant.GRANULARITIES}
FLOAT32_BYTES = 4


def row_factors(scales: Scales, name: str, case: Case) -> torch.Tensor:
    """`name`'s descale factor per row it multiplies, (B, H, S or 1, 1), per query head."""
    factor = scales.per_row(name)
    return expand_kv(factor, case) if name != "q" and factor.shape[1] == case.kv_heads else factor


@register
class NaiveFp8Backend(Backend):
    spec = BackendSpec(
        name="naive-fp8",
        # naive's, in float32 (not fitted).
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.5, efficiency_bwd=0.0, score_passes_fwd=40.0,
                                 score_passes_bwd=0.0, calls=8),
                  cuda=KernelCost(pairs="dense", efficiency_fwd=0.4, efficiency_bwd=0.0, score_passes_fwd=6.0,
                                  score_passes_bwd=0.0, calls=8),
                  memory=MemoryCost(score_copies_fwd=2, expands_kv=True)),
        summary=("FP8 yardstick: attnbench's quantized inputs dequantized (tensor, head or block scales), "
                 "then textbook attention in float32; every format and axis, on every device"),
        capabilities=Capabilities(quantized=EVERY_FORMAT, kernel_names=MATMUL_SOFTMAX,
                                  workload_axes=frozenset(workload.MEANT)),
        limits=(Limit(field="quantized", allowed=(True,), reason=(
            "naive-fp8 runs quantized cases only (an FP8 dtype or kv_dtype); `naive` is textbook "
            "attention in the case's own dtype")),),
        determinism=torch_ops("dequantization, matmul, softmax and masking"))

    def numerics(self, case: Case) -> Numerics:
        return quant.plain_numerics(case)

    def bytes_moved(self, case: Case) -> int:
        """The inputs' floor and the float32 scores and probabilities, two passes each."""
        scores = case.batch * case.heads * case.seq_len * case.kv_seq_len * FLOAT32_BYTES
        return bytes_moved(case) + 4 * scores

    def estimate_memory(self, case: Case) -> int:
        """The output, two float32 score buffers, float32 Q and expanded K, V (and gathered pages)."""
        sizes = tensor_bytes(case)
        rows = case.batch * case.heads
        scores = 2 * rows * case.seq_len * case.kv_seq_len * FLOAT32_BYTES
        elements = case.seq_len * case.head_dim + case.kv_seq_len * (case.head_dim + case.v_dim)
        copies = rows * elements * FLOAT32_BYTES
        gathered = case.batch * case.kv_heads * case.kv_seq_len * (case.head_dim + case.v_dim)
        return sizes["o"] + scores + copies + (gathered if case.page_size is not None else 0)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scales: Scales | None = None) -> Prepared:
        assert scales is not None, "naive-fp8 runs quantized cases only"
        mask = workload.visibility(case, device=q.device)
        mask = None if mask is None else mask[:, None]
        bias = workload.alibi_bias(case, device=q.device, dtype=dtype_of("float32"))
        softcap, out = case.softcap, dtype_of(quant.original_dtype(case))
        q_factor = None if scales.q is None else row_factors(scales, "q", case)
        k_factor, v_factor = (row_factors(scales, n, case) for n in ("k", "v"))

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            qf = q.float() if q_factor is None else q.float() * q_factor
            return naive_attention(qf, k.float() * k_factor, v.float() * v_factor, mask, softcap,
                                   bias).to(out)

        words = [f"{quant.kv_format(case)} {'K/V' if scales.q is None else 'Q/K/V'}",
                 f"{case.quant} descales"]
        # the FP8 pool, as naive gathers it
        inputs, call, paged = laid_out(case, q, k, v, attend, fp8.to_pages)
        words += paged
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"torch {self.version()} dequantize ({', '.join(words)}) + float32 matmul+softmax, "
                   f"{quant.original_dtype(case)} out",
            kv_expanded=case.kv_heads != case.heads,
        )
