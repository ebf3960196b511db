"""`sage`: SageAttention 1.0.6 `sageattn` (Triton), quantizing bf16/fp16 inputs itself
(docs/backends.md#sage). Read from the wheel (core.py, quant_per_block.py,
attn_qk_int8_per_block[_causal].py): HND layout (ours), native GQA, head_dim 64/96/128; `smooth_k` subtracts
K's mean in place (`k -= km`: it gets its own copy; the softmax is unchanged); Q·sm_scale·log2(e) and K to
INT8 per 128 / 64-token block (amax/127); P·V in float16 per 64 keys. `is_causal` is top-left and asserts
qo_len == kv_len. Judged against attnbench.verify.emulate.sage_inputs. """

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    device_problem,
    import_problem,
    library_refusal,
    warm_up,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import SAGE, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import NOT_APPLICABLE, Limit, always, forward_only, unset
from attnbench.core.axes import DTYPE_BYTES, HALF_DTYPES
from attnbench.core.counting import FLOAT32_BYTES, tensor_bytes
from attnbench.core.quant import Numerics, for_every_input
from attnbench.verify.emulate import SAGE_BLOCK_K, SAGE_BLOCK_Q

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

MODULE = "sageattention"
HEAD_DIMS = (64, 96, 128)
SAGE_CALL = LibraryCall(MODULE, "sageattn", positional=("q", "k", "v"),
                        keywords=("tensor_layout", "is_causal", "sm_scale", "smooth_k"))
SCHEME = {"by": "kernel",
          "q": f"INT8 per block of {SAGE_BLOCK_Q} tokens, scaled by sm_scale·log2(e), factor amax/127",
          "k": f"INT8 per block of {SAGE_BLOCK_K} tokens after subtracting K's mean "
               "over the sequence (smooth_k)",
          "pv": f"float16 P and V, float16 accumulation per {SAGE_BLOCK_K} keys, summed in float32"}
REFUSALS = ("should be", "must be", "only", "Only")
# torch's CUDA reduction (aten/src/ATen/native/cuda/Reduce.cuh, setReduceConfig) as smooth_k's
# `k.mean(dim=seq)` meets it: outputs vectorised by 4 (head_dim % 4 == 0) over 512 threads, at most one
# resident grid (16 blocks of 128 threads on each of an H100's or H200's 132 SMs).
REDUCE_VEC = 4
REDUCE_THREADS = 512 // REDUCE_VEC
RESIDENT_BLOCKS = 132 * 2048 // REDUCE_THREADS


def mean_workspace(outputs: int, reduced: int) -> int:
    """Bytes of the float32 buffer in which torch's CUDA mean over a strided dimension combines its blocks:
    Reduce.cuh's global_memory_size, 4 · outputs · ctas_per_output · block.x · output_vec_size; 0 when one
    block reduces each output."""
    wide = min(1 << ((outputs // REDUCE_VEC).bit_length() - 1), REDUCE_THREADS)
    high = min(1 << (reduced.bit_length() - 1), REDUCE_THREADS)
    height = min(high, REDUCE_THREADS // min(wide, 32))
    width = min(wide, REDUCE_THREADS // height)
    per_thread = -(-reduced // height)  # the warps split the reduction when each keeps 16 values (or 256)
    grid = -(-(outputs // REDUCE_VEC) // width)
    if reduced < min(height * 16, 256) or per_thread < 256 or grid > RESIDENT_BLOCKS:
        return 0
    ctas = max(min(-(-RESIDENT_BLOCKS // grid), -(-per_thread // 16)), -(-per_thread // 256))
    return FLOAT32_BYTES * outputs * ctas * width * REDUCE_VEC if ctas > 1 else 0


@register
class SageBackend(Backend):
    spec = BackendSpec(
        name="sage",
        # By analogy, not fitted.
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.5, efficiency_bwd=0.0)),
        summary=("SageAttention 1.0.6 (sageattn): INT8 Q·Kᵀ per block with smoothed K, fp16 P·V, quantized "
                 "inside from bf16/fp16; judged against its own scheme"),
        library="sageattention",
        install_hint="pip install sageattention==1.0.6  (Triton only)",
        capabilities=Capabilities(
            devices=("cuda",), kernel_names=per_device(cuda=SAGE),
            quant_reasons=for_every_input("SageAttention quantizes bf16/fp16 inputs itself (INT8 Q·Kᵀ): it "
                                          "takes no inputs attnbench quantized")),
        limits=(Limit(field="dtype", allowed=HALF_DTYPES,
                      reason="{dtype} is not mapped (attnbench runs SageAttention on float16 or bfloat16)"),
                forward_only("SageAttention 1.0.6 is forward-only"),
                Limit(field="head_dim", allowed=HEAD_DIMS,
                      reason="sageattn takes head_dim 64, 96 or 128 (core.py asserts it), not {head_dim}"),
                unset("window", "SageAttention has no sliding window")),
        determinism=always(NOT_APPLICABLE, "forward only: sageattn's Triton forward reduces each query "
                           "block in one program, and SageAttention has no deterministic switch"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (SAGE_CALL,)

    def availability(self, device: str) -> str | None:
        problem = import_problem(lambda: importlib.import_module(MODULE), "sageattention", MODULE)
        if problem:
            return problem
        return device_problem(device, self.capabilities.devices,
                              "needs CUDA (SageAttention's kernels are Triton's, for a GPU)")

    def unsupported(self, case: Case) -> str | None:
        if reason := super().unsupported(case):
            return reason
        if case.causal and case.seq_len not in (1, case.kv_seq_len):
            return ("sageattn's causal mask is top-left and needs qo_len == kv_len (its causal kernel "
                    "asserts it): a prefill with a cache is not expressible")
        return None

    def numerics(self, case: Case) -> Numerics:
        return Numerics(source="SageAttention 1.0.6 (INT8 Q·Kᵀ per block, smoothed K; float16 P·V)",
                        p_format="float16", accumulate="float16", pv_block=SAGE_BLOCK_K, inputs="sage-int8",
                        out_dtype=case.dtype)

    def estimate_memory(self, case: Case) -> int:
        """The larger of sageattn's two moments (core.py), with `km = k.mean(dim=seq_dim, keepdim=True)` held
        through both: the mean's cross-block buffer (mean_workspace), then V in float16 (`v.to(torch.float16)`
        from bfloat16), INT8 Q and K with float32 scales per 128 / 64-token block (quant_per_block.py
        per_block_int8) and the output (`torch.empty(q.shape, dtype=output_dtype)`)."""
        keys = case.batch * case.kv_heads * case.kv_seq_len
        queries = case.batch * case.heads * case.seq_len
        km = case.batch * case.kv_heads * case.head_dim * DTYPE_BYTES[case.dtype]
        mean = mean_workspace(case.batch * case.kv_heads * case.head_dim, case.kv_seq_len)
        v16 = 0 if case.dtype == "float16" else keys * case.v_dim * 2
        scales = FLOAT32_BYTES * (-(-queries // SAGE_BLOCK_Q) + -(-keys // SAGE_BLOCK_K))
        quantized = v16 + (queries + keys) * case.head_dim + scales + tensor_bytes(case)["o"]
        return km + max(mean, quantized)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        sageattn = importlib.import_module(MODULE).sageattn
        causal = case.causal and case.seq_len > 1  # one query over a cache sees every key
        kwargs: dict[str, Any] = {"tensor_layout": "HND", "is_causal": causal,
                                  "sm_scale": case.head_dim ** -0.5, "smooth_k": True}
        inputs = (q.contiguous(), k.detach().clone(), v.contiguous())  # sageattn subtracts K's mean in place

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return sageattn(q, k, v, **kwargs)

        extra: dict[str, Any] = {"compile_s": warm_up(call, inputs, False), "quantized": "internal",
                                 "quant_scheme": SCHEME}
        gqa = "" if case.kv_heads == case.heads else f", native GQA {case.heads}/{case.kv_heads}"
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"sageattention {self.version()} sageattn(tensor_layout=HND, is_causal={causal}, "
                   f"smooth_k=True; INT8 Q·Kᵀ per block of {SAGE_BLOCK_Q}/{SAGE_BLOCK_K} "
                   f"tokens, float16 P·V{gqa})",
            extra=extra,
            writes=(1,),  # its own copy of K
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "sageattention", REFUSALS, (AssertionError, ValueError))
