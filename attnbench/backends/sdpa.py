"""PyTorch's scaled_dot_product_attention: its own choice (`sdpa`) and each kernel pinned alone."""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends import kernel_names
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    first_line,
    installed_version,
    module_owner,
)
from attnbench.backends.conformance import LibraryCall, UnpackedCall
from attnbench.backends.kernel_names import MATMUL_SOFTMAX
from attnbench.backends.registry import register
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, REFUSED, Answer, Answers, on_cpu, torch_ops, unset
from attnbench.core import workload
from attnbench.core.counting import MemoryCost
from attnbench.core.kernel_id import KernelId

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

NO_KERNEL = ("No available kernel", "No viable backend")
# PyTorch warns "<kernel> kernel not used because:", then that kernel's reasons, one warning each.
KERNEL_HEADERS = {
    "EFFICIENT_ATTENTION": "memory efficient kernel not used because",
    "FLASH_ATTENTION": "flash attention kernel not used because",
    "CUDNN_ATTENTION": "cudnn attention kernel not used because",
}
TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)?\s*$")
# RuntimeError("FA3 flash_attention forward unsupported: ...").
IMPL_REFUSAL = re.compile(r"\bFA\d\b.*\bunsupported\b")


def pinned_kernel_reasons(kernel: str | None, messages: list[str]) -> list[str]:
    """PyTorch's reasons for `kernel` alone,
    without "(Triggered internally at ...)" or "runtime disabled" lines."""
    groups: dict[str | None, list[str]] = {}
    current: str | None = None
    for message in messages:
        text = TRIGGERED.sub("", message).strip()
        lower = text.lower()
        header = next((name for name, words in KERNEL_HEADERS.items() if lower.startswith(words)), None)
        if header is not None:
            current, text = header, text.split(":", 1)[1].strip() if ":" in text else ""
        if not text or "has been runtime disabled" in lower:
            continue
        groups.setdefault(current, []).append(text)
    own = groups.get(kernel) if kernel in KERNEL_HEADERS else [t for ts in groups.values() for t in ts]
    return list(dict.fromkeys(own or []))
SDPA_CALL = LibraryCall("torch.nn.functional", "scaled_dot_product_attention",
                        positional=("query", "key", "value"),
                        keywords=("enable_gqa", "is_causal", "attn_mask"))


def mask_arguments(case: Case, q: torch.Tensor) -> tuple[dict[str, Any], str]:
    """SDPA's mask keywords and how the mask was given. `is_causal` is top-left: only where Sq == Sk; else an
    explicit additive mask, untimed (`causal_lower_right` would bypass a pinned `sdpa_kernel`)."""
    import torch

    kwargs: dict[str, Any] = {"enable_gqa": case.kv_heads != case.heads}
    alibi = workload.alibi_bias(case, device=q.device, dtype=q.dtype)  # (R, H, Sq, Sk)
    if not workload.has_mask(case) and alibi is None:
        return kwargs, "no mask"
    dense = case.doc_lens is None and case.kv_lens is None
    if case.causal and case.window is None and case.seq_len == case.kv_seq_len and dense and alibi is None:
        return {**kwargs, "is_causal": True}, "is_causal"
    keep = workload.visibility(case, device=q.device)  # (R, Sq, Sk)
    if keep is None:
        return {**kwargs, "attn_mask": alibi}, "explicit ALiBi bias"
    bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill_(~keep, float("-inf"))
    if dense:
        bias = bias[0]  # one (Sq, Sk) mask
    else:
        bias = bias[:, None]  # (R, 1, Sq, Sk) over (B, H, Sq, Sk)
    if alibi is not None:
        return {**kwargs, "attn_mask": bias + alibi}, "explicit mask with ALiBi bias"
    return {**kwargs, "attn_mask": bias}, "explicit mask"


class _Sdpa(Backend):

    kernel_name: ClassVar[str | None] = None  # an SDPBackend member name; None lets PyTorch choose
    flash_impl: ClassVar[str | None] = None  # FA3/FA4 to route FLASH_ATTENTION to; None: its built-in FA2
    spec = BackendSpec(
        capabilities=Capabilities(
            workload_axes=frozenset({"documents", "kv_lengths", "alibi", "head_dim_v", "kv_shared"})),
        limits=(unset("softcap", "SDPA has no soft-capping"),
                unset("page_size",
                      "SDPA reads contiguous K/V, not a page pool (a gather before it would be timed as "
                      "SDPA's own work; attnbench does not time one)")))

    def availability(self, device: str) -> str | None:
        if device not in self.capabilities.devices:
            return f"needs CUDA (PyTorch has no CPU implementation of {self.kernel_name})"
        return None

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (SDPA_CALL,)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kwargs, how = mask_arguments(case, q)
        call = functools.partial(F.scaled_dot_product_attention, **kwargs)
        how = f"({how}{', enable_gqa' if kwargs['enable_gqa'] else ''})"
        detail = ""
        if self.kernel_name is None:
            context, choice = sdpa_kernel_choice(q, k, v, kwargs)
            kernel, routed = choice or "auto", choice is not None
            detail = "" if routed else "(choice unknown)"
        elif self.kernel_name == "FLASH_ATTENTION":
            pinned = [SDPBackend.FLASH_ATTENTION]
            context, routed = (lambda: flash_pinned(self.flash_impl, pinned)), False
            kernel, detail = flash_impl_words(self.flash_impl, q.device.type)
        else:
            pinned = [getattr(SDPBackend, self.kernel_name)]
            context, kernel, routed = (lambda: sdpa_kernel(pinned)), self.kernel_name, False
        made = KernelId(f"torch {self.version()} sdpa {kernel}", f"{detail} {how}".lstrip(), routed)
        return Prepared(inputs=(q, k, v), call=call, kernel=made.label, context=context,
                        extra=fp32_math(case, q.device.type, kernel == "EFFICIENT_ATTENTION"))

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        text = str(exc)
        if IMPL_REFUSAL.search(text):
            return f"PyTorch's {self.kernel_name} refused: {first_line(exc)}"
        if not any(marker in text for marker in NO_KERNEL):
            return None
        reasons = pinned_kernel_reasons(self.kernel_name, [str(w.message) for w in caught])
        return f"PyTorch refused {self.kernel_name}: " + "; ".join(reasons or ["PyTorch gave no reason"])


FLASH_IMPL_MODULES = {"FA3": ("flash_attn_interface", "flash-attn-3"),
                      # imported module, owning distribution
                      "FA4": ("flash_attn.cute.interface", "flash-attn-4")}


@contextmanager
def flash_pinned(impl: str | None, pinned: list[Any]) -> Iterator[None]:
    """SDPA pinned to FLASH_ATTENTION on `impl` (None: FA2); the default is restored afterwards."""
    from torch.nn import attention
    from torch.nn.attention import sdpa_kernel

    switchable = hasattr(attention, "activate_flash_attention_impl")
    if impl is not None:
        attention.activate_flash_attention_impl(impl)
    elif switchable and attention.current_flash_attention_impl() is not None:
        attention.restore_flash_attention_impl(_raise_warn=False)
    try:
        with sdpa_kernel(pinned):
            yield
    finally:
        if impl is not None:
            attention.restore_flash_attention_impl(_raise_warn=False)


def flash_impl_label(impl: str | None, device_type: str) -> str:
    kernel, detail = flash_impl_words(impl, device_type)
    return f"{kernel.partition(' ')[2]} {detail}".lstrip()


def flash_impl_words(impl: str | None, device_type: str) -> tuple[str, str]:
    """(the kernel, its parenthesised detail)."""
    if device_type != "cuda":
        return "FLASH_ATTENTION", "(PyTorch's CPU flash kernel)"
    if impl is None:
        return "FLASH_ATTENTION via FA2", "(built into PyTorch)"
    module, distribution = FLASH_IMPL_MODULES.get(impl, (None, None))
    version = installed_version(distribution) if distribution else None
    if version:
        return f"FLASH_ATTENTION via {impl}", f"({module}, {distribution} {version})"
    return f"FLASH_ATTENTION via {impl}", f"({module})"


@functools.cache
def flash_impl_problem(impl: str) -> str | None:
    """Why PyTorch cannot route SDPA's flash kernel to `impl` here (activated once, then restored)."""
    import torch
    from torch.nn import attention

    if not hasattr(attention, "list_flash_attention_impls"):
        return (f"torch {torch.__version__} cannot switch SDPA's flash implementation (no "
                "activate_flash_attention_impl)")
    listed = attention.list_flash_attention_impls()
    if impl not in listed:
        return f"torch {torch.__version__} lists no {impl} flash implementation (it lists {listed or 'none'})"
    module, distribution = FLASH_IMPL_MODULES.get(impl, (None, None))
    if module and distribution:
        owner = module_owner(module, distribution)
        if owner:
            return owner
    try:
        attention.activate_flash_attention_impl(impl)
    except Exception as exc:  # PyTorch's own words
        return f"PyTorch cannot activate {impl}: {type(exc).__name__}: {first_line(exc)}"
    finally:
        attention.restore_flash_attention_impl(_raise_warn=False)
    return None


def fp32_math(case: Case, device_type: str, cutlass_efficient: bool) -> dict[str, Any]:
    """`fp32_math: 3xTF32` where CUTLASS's memory-efficient kernel runs float32 on tensor cores
    (OpMultiplyAddFastF32), so percent_of_peak uses the TF32 roof."""
    if cutlass_efficient and case.dtype == "float32" and device_type == "cuda":
        return {"fp32_math": "3xTF32"}
    return {}


def sdpa_kernel_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       kwargs: dict[str, Any]) -> tuple[Any, str | None]:
    """The kernel PyTorch picks (None: unknown), pinned so the timed call cannot drift."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        choice = SDPBackend(torch._fused_sdp_choice(
            q, k, v, kwargs.get("attn_mask"), 0.0, kwargs.get("is_causal", False),
            enable_gqa=kwargs["enable_gqa"],
        ))
    except Exception:  # a private API: when it moves, say so rather than guess
        from contextlib import nullcontext

        return nullcontext, None
    return (lambda: sdpa_kernel([choice])), choice.name


SDPA_FLASH = kernel_names.per_device(cpu=kernel_names.ATEN_CPU_FLASH, cuda=kernel_names.FLASH_ATTENTION_2)
SDPA_EFFICIENT = kernel_names.per_device(cuda=kernel_names.CUTLASS_FMHA)
SDPA_CUDNN = kernel_names.per_device(cuda=kernel_names.CUDNN_SDPA)
FA3_KERNELS = kernel_names.per_device(cuda=kernel_names.FLASH_ATTENTION_3)
FA4_KERNELS = kernel_names.per_device(cuda=kernel_names.FLASH_ATTENTION_4)
SDPA_ANY = {device: tuple(dict.fromkeys(p for names in (SDPA_FLASH, SDPA_EFFICIENT, SDPA_CUDNN, FA3_KERNELS,
                                                         MATMUL_SOFTMAX) for p in names.get(device, ())))
            for device in ("cpu", "cuda")}


def sdpa_answers(kernel: str, forward: Answer, backward: Answer) -> Answers:
    """Under torch.use_deterministic_algorithms(True) on CUDA (sources in docs/suites.md);
    on a CPU PyTorch's ops."""
    return Answers(forward=forward, backward=backward, on=on_cpu(f"PyTorch's {kernel} kernel"))


@register
class SdpaAuto(_Sdpa):
    spec = dataclasses.replace(
        _Sdpa.spec, name="sdpa",
        # Backward workspace: the costliest kernel it may choose.
        cost=Cost(cpu=KernelCost(pairs="causal-flag", efficiency_fwd=0.8, efficiency_bwd=0.35),
                  cuda=KernelCost(pairs="visible", efficiency_fwd=0.50, efficiency_bwd=0.35),
                  memory=MemoryCost(bwd_workspace=4, bwd_expands_kv=True)),
        summary="F.scaled_dot_product_attention, PyTorch's own kernel choice (recorded)",
        capabilities=dataclasses.replace(_Sdpa.capabilities, kernel_names=SDPA_ANY),
        determinism=sdpa_answers(
            "SDPA",
            Answer(HONOURED, "PyTorch chooses among deterministic kernels: cuDNN is excluded under the mode"),
            Answer(HONOURED,
                   "PyTorch chooses among deterministic kernels: cuDNN is excluded, flash's backward runs "
                   "FA2's deterministic path, efficient's runs with num_splits_key=1")))


@register
class SdpaMath(_Sdpa):
    spec = dataclasses.replace(
        _Sdpa.spec, name="sdpa-math",
        # Computes fp16/bf16 in float32 (copies of Q, K, V, scores, softmax) and expands K/V for GQA.
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.55, efficiency_bwd=0.8,
                                 score_passes_fwd=35.0, score_passes_bwd=14.0, calls=6),
                  cuda=KernelCost(pairs="dense", efficiency_fwd=0.45, efficiency_bwd=0.35,
                                  score_passes_fwd=8.0, score_passes_bwd=16.0, calls=8),
                  memory=MemoryCost(score_copies_fwd=2.25, score_copies_bwd=4, upcast_halves=True,
                                    expands_kv=True)),
        summary="SDPA pinned to the MATH kernel (reference C++ composite; O(seq²) memory)",
        capabilities=dataclasses.replace(_Sdpa.capabilities, kernel_names=MATMUL_SOFTMAX),
        determinism=torch_ops("SDPA's MATH composite of PyTorch operations"))
    kernel_name = "MATH"


@register
class SdpaFlash(_Sdpa):
    spec = dataclasses.replace(
        _Sdpa.spec, name="sdpa-flash",
        # Backward (torch's attention_backward.cu _flash_attention_backward, flash_api.cpp mha_bwd):
        # `grad_out.contiguous()` and `out.contiguous()` copy both (SDPA hands them over transposed), a
        # float32 `dq_accum`, and under GQA `dk_expanded`/`dv_expanded` per query head, summed into dK/dV
        # after.
        cost=Cost(cpu=KernelCost(pairs="causal-flag", efficiency_fwd=0.8, efficiency_bwd=0.35),
                  cuda=KernelCost(pairs="causal", efficiency_fwd=0.45, efficiency_bwd=0.32),
                  memory=MemoryCost(bwd_dq_accum=True, bwd_out_copies=2, bwd_expands_kv=True)),
        summary="SDPA pinned to FLASH_ATTENTION (PyTorch's FlashAttention-2 on CUDA, fused kernel on CPU)",
        capabilities=dataclasses.replace(_Sdpa.capabilities, kernel_names=SDPA_FLASH),
        determinism=sdpa_answers(
            "FLASH_ATTENTION", Answer(NOT_APPLICABLE, "FlashAttention's forward is deterministic"),
            Answer(HONOURED, "PyTorch passes deterministic=true to FA2's backward under the mode")))
    kernel_name = "FLASH_ATTENTION"


# torch >= 2.11.
FLASH_IMPL_CALLS = (
    LibraryCall("torch.nn.attention", "activate_flash_attention_impl", positional=("impl",)),
    LibraryCall("torch.nn.attention", "restore_flash_attention_impl", keywords=("_raise_warn",)),
    LibraryCall("torch.nn.attention", "list_flash_attention_impls"),
)


# What torch's FA4 route (torch/nn/attention/_fa4.py) passes to flash-attn-4 and unpacks from it, as torch
# 2.11.0 writes it: `out, lse = module._flash_attn_fwd(...)` (line 206), `dq, dk, dv =
# module._flash_attn_bwd(...)` (line 226). Conformance reads the installed torch's own unpacking and the
# installed flash-attn-4's return statements.
_FA4_ROUTE = "torch.nn.attention._fa4"
FA4_ROUTE_CALLS = (
    UnpackedCall("flash_attn.cute.interface", "_flash_attn_fwd", positional=("q", "k", "v"),
                 keywords=("softmax_scale", "causal", "window_size_left", "window_size_right", "return_lse",
                           "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "out"),
                 optional=True, unpacks=2, caller=LibraryCall(_FA4_ROUTE, "_fa4_run_forward")),
    UnpackedCall("flash_attn.cute.interface", "_flash_attn_bwd",
                 positional=("q", "k", "v", "out", "dout", "lse"),
                 keywords=("softmax_scale", "causal", "cu_seqlens_q", "cu_seqlens_k", "deterministic"),
                 optional=True, unpacks=3, caller=LibraryCall(_FA4_ROUTE, "_fa4_run_backward")),
)


class _SdpaFlashImpl(SdpaFlash):

    # FA3/FA4 take no attn_mask.
    spec = dataclasses.replace(
        SdpaFlash.spec,
        capabilities=dataclasses.replace(SdpaFlash.capabilities, devices=("cuda",),
                                         workload_axes=frozenset()))
    # what PyTorch's route calls in the implementation's library
    route_calls: ClassVar[tuple[LibraryCall, ...]] = ()

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (SDPA_CALL, *FLASH_IMPL_CALLS, *self.route_calls)

    def availability(self, device: str) -> str | None:
        if device != "cuda":
            return f"needs CUDA (PyTorch's {self.flash_impl} flash implementation is CUDA-only)"
        assert self.flash_impl is not None
        return flash_impl_problem(self.flash_impl)


@register
class SdpaFlashFa3(_SdpaFlashImpl):
    spec = dataclasses.replace(
        _SdpaFlashImpl.spec, name="sdpa-flash-fa3",
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.60, efficiency_bwd=0.45)),
        summary="SDPA's FLASH_ATTENTION routed to FlashAttention 3 "
                "(activate_flash_attention_impl('FA3')), Hopper",
        capabilities=dataclasses.replace(_SdpaFlashImpl.capabilities, kernel_names=FA3_KERNELS),
        install_hint="build flash-attention's hopper/ package (flash_attn_interface) on a Hopper GPU",
        determinism=sdpa_answers(
            "FLASH_ATTENTION", Answer(HONOURED, "PyTorch's FA3 route runs num_splits=1 under the mode"),
            Answer(HONOURED,
                   "PyTorch's FA3 route passes deterministic=true to FA3's backward under the mode")))
    flash_impl = "FA3"


@register
class SdpaFlashFa4(_SdpaFlashImpl):
    spec = dataclasses.replace(
        _SdpaFlashImpl.spec, name="sdpa-flash-fa4",
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.60, efficiency_bwd=0.45)),
        summary="SDPA's FLASH_ATTENTION routed to FlashAttention 4 "
                "(activate_flash_attention_impl('FA4')), sm90/sm100",
        capabilities=dataclasses.replace(_SdpaFlashImpl.capabilities, kernel_names=FA4_KERNELS),
        install_hint="pip install flash-attn-4",
        determinism=sdpa_answers(
            "FLASH_ATTENTION", Answer(NOT_APPLICABLE, "FlashAttention's forward is deterministic"),
            Answer(HONOURED,
                   "PyTorch's FA4 route passes deterministic=true to FA4's backward under the mode")))
    flash_impl = "FA4"
    route_calls = FA4_ROUTE_CALLS


@register
class SdpaEfficient(_Sdpa):
    spec = dataclasses.replace(
        _Sdpa.spec, name="sdpa-efficient",
        cost=Cost(cuda=KernelCost(pairs="causal", efficiency_fwd=0.30, efficiency_bwd=0.20),
                  memory=MemoryCost(bwd_workspace=3, bwd_expands_kv=True)),
        summary="SDPA pinned to EFFICIENT_ATTENTION (memory-efficient, CUTLASS); no native GQA",
        capabilities=dataclasses.replace(_Sdpa.capabilities, devices=("cuda",), kernel_names=SDPA_EFFICIENT),
        determinism=sdpa_answers(
            "EFFICIENT_ATTENTION", Answer(NOT_APPLICABLE, "the memory-efficient forward is deterministic"),
            Answer(HONOURED,
                   "PyTorch runs the memory-efficient backward with num_splits_key=1 under the mode: no "
                   "split keys, no atomics")))
    kernel_name = "EFFICIENT_ATTENTION"


# sdp_utils.cpp's check_cudnn_deterministic drops cuDNN whenever the mode is on.
CUDNN_REFUSAL = Answer(REFUSED, "PyTorch does not run cuDNN SDPA under torch.use_deterministic_algorithms"
                       "(True), forward included (\"cuDNN SDPA is not deterministic\")")


@register
class SdpaCudnn(_Sdpa):
    spec = dataclasses.replace(
        _Sdpa.spec, name="sdpa-cudnn",
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.50, efficiency_bwd=0.35),
                  memory=MemoryCost(bwd_workspace=2, bwd_expands_kv=True)),
        summary="SDPA pinned to CUDNN_ATTENTION (cuDNN's fused attention)",
        capabilities=dataclasses.replace(_Sdpa.capabilities, devices=("cuda",), kernel_names=SDPA_CUDNN),
        determinism=sdpa_answers("CUDNN_ATTENTION", CUDNN_REFUSAL, CUDNN_REFUSAL))
    kernel_name = "CUDNN_ATTENTION"
