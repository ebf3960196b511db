"""FlashAttention 2, 3 and 4: one mapping of GUIDE.md's conventions onto `flash_attn_func`, three libraries.

All three take (batch, seq, heads, head_dim) with native MQA/GQA (K/V with fewer heads), align causal
and windows bottom-right themselves, and accept only fp16/bf16 on CUDA. They differ in module, in how
an unbounded window side is spelled (-1 for FA2/FA3, None for FA4), in what they return (FA4: (out, lse))
and in when kernels are built (FA4 compiles at its first call, so prepare makes that call).
"""

from __future__ import annotations

import importlib
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from attnbench.backends.base import Backend, Prepared, first_line, module_owner
from attnbench.conformance import LibraryCall
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

MAX_HEAD_DIM = 256
# Phrases of the libraries' own input checks (RuntimeError in FA2/FA3's C++, AssertionError in FA4):
# an exception carrying one is the library refusing the case, not a failure of ours.
REFUSALS = ("only support", "not supported", "does not support", "must be", "Unsupported", "should be")
# What `_Flash.prepare`'s call passes to every library's flash_attn_func: q, k, v by position, then
# flash_window_args' keywords and softmax_scale (attnbench.conformance holds these against the installed one).
FLASH_POSITIONAL = ("q", "k", "v")
FLASH_KEYWORDS = ("causal", "window_size", "softmax_scale")


def flash_window_args(case: Case, unbounded: int | None) -> dict[str, Any]:
    """`causal` and `window_size=(left, right)` for GUIDE.md's mask; `unbounded` spells "no limit".

    The libraries keep query i's keys in [i + off - left, i + off + right] with off = Sk - Sq (their
    own bottom-right alignment, which is ours); `causal=True` forces right = 0. So: causal → (∞, ∞) with
    causal; causal + window W → (W, 0) with causal; window W alone → (W, W); nothing → (∞, ∞).
    """
    if case.window is None:
        return {"causal": case.causal, "window_size": (unbounded, unbounded)}
    if case.causal:
        return {"causal": True, "window_size": (case.window, 0)}
    return {"causal": False, "window_size": (case.window, case.window)}


def to_flash_layout(t: torch.Tensor) -> torch.Tensor:
    """Canonical (B, H, S, D) to FlashAttention's (B, S, H, D), contiguous as a model would hold it."""
    return t.transpose(1, 2).contiguous()


def from_flash_layout(out: torch.Tensor) -> torch.Tensor:
    """FlashAttention's (B, Sq, H, D) output back to canonical (B, H, Sq, D)."""
    return out.transpose(1, 2)


class _Flash(Backend):
    """The shared adapter; subclasses name the module, the function and the library's spelling of ∞."""

    module: ClassVar[str]
    function: ClassVar[str] = "flash_attn_func"
    unbounded: ClassVar[int | None] = -1
    warm_call: ClassVar[bool] = False  # FA4 compiles its kernels at the first call
    # FA4: `module` must be the library's own file (flash-attn 2.8 bundles an older flash_attn/cute).
    owner_checked: ClassVar[bool] = False
    min_capability: ClassVar[tuple[int, int]] = (8, 0)
    # The devices the kernels run on; the adapter tests add "cpu" to run it against a stand-in module.
    devices: ClassVar[tuple[str, ...]] = ("cuda",)

    def _function(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), self.function)

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (LibraryCall(self.module, self.function, FLASH_POSITIONAL, FLASH_KEYWORDS),)

    def availability(self, device: str) -> str | None:
        try:
            self._function()
        except ImportError as exc:
            return f"{self.library} is not installed (cannot import {self.module}: {exc})"
        except AttributeError:
            return f"{self.library}: {self.module} has no {self.function}"
        if self.owner_checked:
            problem = module_owner(self.module, self.library)
            if problem:
                return problem
        if device not in self.devices:
            return "needs CUDA (FlashAttention has no CPU kernel)"
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "needs CUDA (torch.cuda.is_available() is False)"
            cap = torch.cuda.get_device_capability()
            if cap < self.min_capability:
                need = ".".join(map(str, self.min_capability))
                return f"needs compute capability ≥ {need} (this GPU: {cap[0]}.{cap[1]})"
        return None

    def unsupported(self, case: Case) -> str | None:
        if case.dtype not in ("float16", "bfloat16"):
            return f"{case.dtype} is not supported (FlashAttention takes float16 or bfloat16)"
        if case.head_dim > MAX_HEAD_DIM:
            return f"head_dim {case.head_dim} > {MAX_HEAD_DIM}"
        return None

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        fn = self._function()
        kwargs = {**flash_window_args(case, self.unbounded), "softmax_scale": case.head_dim ** -0.5}

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return output_of(fn(q, k, v, **kwargs))

        inputs = tuple(to_flash_layout(t) for t in (q, k, v))
        extra: dict[str, Any] = {}
        if self.warm_call:
            extra["compile_s"] = warm_up(call, inputs, case.needs_grad)
        gqa = "" if case.kv_heads == case.heads else f", native GQA {case.heads}/{case.kv_heads}"
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=(f"{self.library} {self.version()} {self.module}.{self.function}"
                    f"(causal={kwargs['causal']}, window_size={kwargs['window_size']}{gqa})"),
            to_canonical=from_flash_layout,
            extra=extra,
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        text = str(exc).strip()
        if isinstance(exc, (RuntimeError, AssertionError, NotImplementedError, ValueError)) and any(
            phrase in text for phrase in REFUSALS
        ):
            return f"{self.library} refused: {first_line(exc)}"
        return None


def output_of(result: Any) -> torch.Tensor:
    """The attention output: FA4 and FA3 builds from before January 2025 return (out, lse), the rest out."""
    return result[0] if isinstance(result, (tuple, list)) else result


def warm_up(call: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], backward: bool) -> float:
    """Call once (and backward once) on detached copies so compilation stays out of the timed region."""
    import torch

    start = time.perf_counter()
    leaves = tuple(t.detach().requires_grad_(backward) for t in inputs)
    with torch.set_grad_enabled(backward):
        out = call(*leaves)
        if backward:
            torch.autograd.grad(out, leaves, torch.ones_like(out))
    if out.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


@register
class FlashAttn2(_Flash):
    name = "flash-attn"
    summary = "FlashAttention 2 (flash_attn.flash_attn_func): fp16/bf16, native GQA, sm80+"
    library = "flash-attn"
    module = "flash_attn"
    install_hint = "pip install 'attnbench[flash]' --no-build-isolation  (compiles against your torch)"


@register
class FlashAttn3(_Flash):
    name = "flash-attn-3"
    summary = "FlashAttention 3 for Hopper (flash_attn_interface.flash_attn_func): fp16/bf16, native GQA"
    library = "flash-attn-3"
    module = "flash_attn_interface"
    install_hint = "build flash-attention's hopper/ package on a Hopper GPU (cd hopper && python setup.py install)"


@register
class FlashAttn4(_Flash):
    name = "flash-attn-4"
    summary = "FlashAttention 4, CuTe DSL (flash_attn.cute.flash_attn_func): fp16/bf16, compiled at first call"
    library = "flash-attn-4"
    module = "flash_attn.cute"
    install_hint = "pip install flash-attn-4"
    unbounded = None
    warm_call = True
    owner_checked = True
