"""PyTorch's scaled_dot_product_attention: its own choice (`sdpa`) and each kernel pinned alone."""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends.base import Backend, Prepared, first_line
from attnbench.conformance import LibraryCall
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

NO_KERNEL = ("No available kernel", "No viable backend")
# What `_Sdpa.prepare`'s call passes: q, k, v by position, and every keyword mask_arguments may give.
SDPA_CALL = LibraryCall("torch.nn.functional", "scaled_dot_product_attention",
                        positional=("query", "key", "value"), keywords=("enable_gqa", "is_causal", "attn_mask"))


def mask_arguments(case: Case, q: torch.Tensor) -> tuple[dict[str, Any], str]:
    """SDPA keyword arguments for GUIDE.md's mask, and how the mask was given (for the kernel field).

    `is_causal=True` is top-left aligned, so it is used only when Sq == Sk; any other mask is passed as
    an explicit additive mask built here, outside the timed call. (`causal_lower_right` is avoided: its
    dispatch calls the flash and efficient ops directly, bypassing a pinned `sdpa_kernel`.)
    """
    import torch

    kwargs: dict[str, Any] = {"enable_gqa": case.kv_heads != case.heads}
    if not case.has_mask:
        return kwargs, "no mask"
    if case.causal and case.window is None and case.seq_len == case.kv_seq_len:
        return {**kwargs, "is_causal": True}, "is_causal"
    keep = case.mask(device=q.device)
    bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill_(~keep, float("-inf"))
    return {**kwargs, "attn_mask": bias}, "explicit mask"


class _Sdpa(Backend):
    """`F.scaled_dot_product_attention`, optionally pinned to one kernel with `sdpa_kernel`."""

    kernel_name: ClassVar[str | None] = None  # an SDPBackend member name; None lets PyTorch choose
    def availability(self, device: str) -> str | None:
        if device not in self.devices:
            return f"needs CUDA (PyTorch has no CPU implementation of {self.kernel_name})"
        return None

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (SDPA_CALL,)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kwargs, how = mask_arguments(case, q)
        call = functools.partial(F.scaled_dot_product_attention, **kwargs)
        if self.kernel_name is None:
            context, kernel = sdpa_kernel_choice(q, k, v, kwargs)
        else:
            pinned = [getattr(SDPBackend, self.kernel_name)]
            context, kernel = (lambda: sdpa_kernel(pinned)), self.kernel_name
        return Prepared(
            inputs=(q, k, v),
            call=call,
            kernel=f"torch {self.version()} sdpa {kernel} ({how}{', enable_gqa' if kwargs['enable_gqa'] else ''})",
            context=context,
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        text = str(exc)
        if not any(marker in text for marker in NO_KERNEL):
            return None
        reasons = list(dict.fromkeys(str(w.message).strip() for w in caught))  # PyTorch says why in warnings
        head = f"PyTorch refused {self.kernel_name}: {first_line(exc)}"
        return "; ".join([head, *reasons])


def sdpa_kernel_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """Ask PyTorch which kernel it will pick, and pin that one so the timed call cannot drift."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        choice = SDPBackend(torch._fused_sdp_choice(
            q, k, v, kwargs.get("attn_mask"), 0.0, kwargs.get("is_causal", False),
            enable_gqa=kwargs["enable_gqa"],
        ))
    except Exception:  # a private API: when it moves, say so rather than guess
        from contextlib import nullcontext

        return nullcontext, "auto (choice unknown)"
    return (lambda: sdpa_kernel([choice])), f"auto→{choice.name}"


@register
class SdpaAuto(_Sdpa):
    name = "sdpa"
    summary = "F.scaled_dot_product_attention, PyTorch's own kernel choice (recorded)"


@register
class SdpaMath(_Sdpa):
    name = "sdpa-math"
    summary = "SDPA pinned to the MATH kernel (reference C++ composite; O(seq²) memory)"
    kernel_name = "MATH"
    materialises_scores = True


@register
class SdpaFlash(_Sdpa):
    name = "sdpa-flash"
    summary = "SDPA pinned to FLASH_ATTENTION (PyTorch's FlashAttention-2 on CUDA, fused kernel on CPU)"
    kernel_name = "FLASH_ATTENTION"


@register
class SdpaEfficient(_Sdpa):
    name = "sdpa-efficient"
    summary = "SDPA pinned to EFFICIENT_ATTENTION (memory-efficient, CUTLASS); no native GQA"
    kernel_name = "EFFICIENT_ATTENTION"
    devices = ("cuda",)


@register
class SdpaCudnn(_Sdpa):
    name = "sdpa-cudnn"
    summary = "SDPA pinned to CUDNN_ATTENTION (cuDNN's fused attention)"
    kernel_name = "CUDNN_ATTENTION"
    devices = ("cuda",)
