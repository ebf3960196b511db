"""`sdpa-fp8`: `torch.nn.attention.experimental._scaled_dot_product_attention_quantized` where the installed torch has
it (found by signature; docs/backends.md#sdpa-fp8). It calls `aten::_scaled_dot_product_flash_attention.quantized`,
whose one kernel is PyTorch's FA3 implementation (torch/nn/attention/_fa3.py): FA3 activated, compute capability 9.x,
float8_e4m3fn (B, H, S, D) with float32 (batch, kv_heads) descales (DescaleType.PER_HEAD), bf16 out.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends import fp8
from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, Prepared, device_problem, first_line
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import FLASH_ATTENTION_3, per_device
from attnbench.backends.registry import register
from attnbench.backends.sdpa import (
    IMPL_REFUSAL,
    flash_impl_label,
    flash_impl_problem,
    flash_pinned,
)
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, Answer, Limit, forward_backward, unset
from attnbench.core.quant import Numerics

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Scales

MODULE = "torch.nn.attention.experimental._scaled_dot_product_attention_quantized"
FUNCTION = "_scaled_dot_product_attention_quantized"
KEYWORDS = ("is_causal", "scale", "q_descale", "k_descale", "v_descale")
NUMERICS = Numerics(source=("PyTorch's quantized SDPA on FlashAttention 3's FP8 forward "
                            "(hopper/softmax.h: P·2^8 to e4m3)"),
                    p_format="float8_e4m3fn", p_scale=fp8.FA3_P_SCALE, out_dtype="bfloat16")


def entry_point() -> Any:
    """The installed quantized SDPA function (ImportError / AttributeError where there is none)."""
    return getattr(importlib.import_module(MODULE), FUNCTION)


@register
class SdpaFp8Backend(Backend):
    spec = BackendSpec(
        name="sdpa-fp8",
        cost=Cost(cuda=fp8.FA3_KERNEL),  # the same kernel as flash-attn-3
        summary=("PyTorch's quantized SDPA (_scaled_dot_product_attention_quantized, on its FA3 "
                 "implementation): float8_e4m3fn Q/K/V with (batch, kv_heads) descales, bf16 out; where "
                 "the installed torch has it"),
        capabilities=Capabilities(
            devices=("cuda",),
            kernel_names=per_device(cuda=FLASH_ATTENTION_3),  # its one kernel is FA3's FP8 forward
            quantized=frozenset({"qkv:float8_e4m3fn", "scale:tensor", "scale:head"}),
            quant_reasons={
                "qkv:float8_e5m2": "PyTorch's quantized SDPA takes float8_e4m3fn only (its "
                                   "FA3 implementation's dtypes)",
                "scale:block": "PyTorch's quantized SDPA takes descales per (batch, KV head) only "
                               "(DescaleType.PER_HEAD)",
                **{f"kv:{fmt}": "PyTorch's quantized SDPA takes Q, K and V in float8_e4m3fn: no FP8 "
                                "K/V cache under bf16 queries" for fmt in ("float8_e4m3fn", "float8_e5m2")},
            }),
        limits=(Limit(field="quantized", allowed=(True,), reason=(
                    "sdpa-fp8 runs FP8 cases only (sdpa and its kernels run float16, bfloat16 and float32)")),
                unset("window", "PyTorch's quantized SDPA has no window (is_causal only)")),
        # _fa3.py's _fa3_run_forward passes num_splits=1 under the mode.
        determinism=forward_backward(
            Answer(HONOURED, "PyTorch's FA3 route runs num_splits=1 under the mode"),
            Answer(NOT_APPLICABLE, "attnbench runs PyTorch's quantized SDPA forward only")))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (LibraryCall(MODULE, FUNCTION, positional=("query", "key", "value"), keywords=KEYWORDS),)

    def availability(self, device: str) -> str | None:
        import torch

        try:
            parameters = inspect.signature(entry_point()).parameters
        except (ImportError, AttributeError):
            return f"torch {torch.__version__} has no quantized SDPA entry point ({MODULE}.{FUNCTION})"
        if "q_descale" not in parameters:
            return f"torch {torch.__version__}'s {FUNCTION} takes no q_descale"
        problem = device_problem(device, self.capabilities.devices,
                                 "needs CUDA (aten::_scaled_dot_product_flash_attention.quantized has no CPU "
                                 "kernel: its one kernel is PyTorch's FA3 implementation, on CUDA)")
        if problem:
            return problem
        cap = torch.cuda.get_device_capability()
        if cap[0] != 9:
            return ("PyTorch's FA3 implementation requires compute capability 9.0 "
                    f"(this GPU: {cap[0]}.{cap[1]})")
        return flash_impl_problem("FA3")

    def unsupported(self, case: Case) -> str | None:
        if reason := super().unsupported(case):
            return reason
        if case.causal and case.seq_len != case.kv_seq_len:
            return ("SDPA's is_causal is top-left, docs/conventions.md's causal mask only where "
                    "seq_len == kv_seq_len, and this entry point takes no explicit mask")
        return None

    def numerics(self, case: Case) -> Numerics:
        return NUMERICS

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scales: Scales | None = None) -> Prepared:
        from torch.nn.attention import SDPBackend

        assert scales is not None, "sdpa-fp8 runs quantized cases only"
        fn = entry_point()
        descales = {f"{n}_descale": fp8.per_batch_kv_head(scales, n, case) for n in ("q", "k", "v")}
        kwargs = {"is_causal": case.causal, "scale": case.head_dim ** -0.5, **descales}

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return fn(q, k, v, **kwargs)

        return Prepared(
            inputs=tuple(t.contiguous() for t in (q, k, v)),
            call=call,
            kernel=f"torch {self.version()} {FUNCTION} (aten::_scaled_dot_product_flash_attention.quantized "
                   f"{flash_impl_label('FA3', q.device.type)}; is_causal={case.causal}, float8_e4m3fn, "
                   f"q/k/v_descale ({case.quant}) as (batch, kv_heads))",
            context=lambda: flash_pinned("FA3", [SDPBackend.FLASH_ATTENTION]),
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        if IMPL_REFUSAL.search(str(exc)) or isinstance(exc, ValueError) and "descale" in str(exc):
            return f"PyTorch refused: {first_line(exc)}"
        return None
