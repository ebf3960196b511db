"""FlashAttention 2, 3 and 4 (docs/backends.md#flash-attn): (B, S, H, D), native GQA, causal and windows
bottom-right as docs/conventions.md; fp16/bf16 on CUDA. Unbounded window side: -1 (FA2/FA3), None (FA4).

Entry points: documents and ragged lengths → `flash_attn_varlen_func` (int32 cu_seqlens); a paged cache →
`flash_attn_with_kvcache` (FA2 `block_table`, pages of a multiple of 256; FA3 `page_table`), FA4 →
`flash_attn_varlen_func(page_table=, seqused_k=)` without `cu_seqlens_k` (refused with a page table); else
`flash_attn_func`. `alibi_slopes` FA2 only, after the soft-cap.

Absorbed MLA (`kv_shared`) is FA3's and FA4's `qv` form: score = (q·k + qv·v)·softmax_scale
(hopper/test_util.py's attention_ref), q and k the rope channels, qv the query's latent ones, v the latent
cache; the scale stays 1/sqrt(head_dim). FP8: FA3 only, e4m3 with float32 (batch, kv_heads) descales
(hopper/flash_api.cpp CHECK_SHAPE), bf16 out, P·2^8 rounded to e4m3 (hopper/softmax.h). """

from __future__ import annotations

import dataclasses
import importlib
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends import fp8, packing
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    Unsupported,
    device_problem,
    installed_version,
    library_refusal,
    module_owner,
    warm_up,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import FLASH_ATTENTION_2, FLASH_ATTENTION_3, FLASH_ATTENTION_4, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, Answer, Answers, forward_backward
from attnbench.core import workload
from attnbench.core.axes import HALF_DTYPES
from attnbench.core.counting import MemoryCost
from attnbench.core.quant import Numerics, for_every_input

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Scales

MAX_HEAD_DIM = 256
# The Dockerfile's FLASH_ATTN_2 build argument: "no" in an image without FlashAttention 2.
IMAGE_FLASH_ATTN_2 = "ATTNBENCH_IMAGE_FLASH_ATTN_2"
# Phrases of the libraries' own input checks (FA2/FA3 RuntimeError, FA4 AssertionError).
REFUSALS = ("only support", "not supported", "does not support", "must be", "Unsupported", "should be")
FLASH_POSITIONAL = ("q", "k", "v")
FLASH_KEYWORDS = ("causal", "window_size", "softmax_scale")
# The backward's deterministic path, on flash_attn_func and flash_attn_varlen_func (not the inference-only
# kvcache).
DETERMINISTIC_KEYWORD = "deterministic"
# Offsets by keyword: FA4 puts `qv` before them.
VARLEN_FUNCTION = "flash_attn_varlen_func"
VARLEN_KEYWORDS = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", *FLASH_KEYWORDS)
KVCACHE_FUNCTION = "flash_attn_with_kvcache"
KVCACHE_POSITIONAL = ("q", "k_cache", "v_cache")
DESCALE_KEYWORDS = ("q_descale", "k_descale", "v_descale")


def flash_window_args(case: Case, unbounded: int | None) -> dict[str, Any]:
    """`causal` and `window_size=(left, right)`: keys [i + off − left, i + off + right], off = Sk − Sq, as
    docs/conventions.md; `causal=True` forces right = 0. `unbounded` spells "no limit"."""
    if case.window is None:
        return {"causal": case.causal, "window_size": (unbounded, unbounded)}
    if case.causal:
        return {"causal": True, "window_size": (case.window, 0)}
    return {"causal": False, "window_size": (case.window, case.window)}


def qv_split(case: Case, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `qv` form's (q, k, qv): rope channels (after the first head_dim_v) and the query's latent ones."""
    dv = case.v_dim
    return q[..., dv:], k[..., dv:], q[..., :dv]


def to_flash_layout(t: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D) to a contiguous (B, S, H, D)."""
    return t.transpose(1, 2).contiguous()


def from_flash_layout(out: torch.Tensor) -> torch.Tensor:
    return out.transpose(1, 2)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FlashSpec(BackendSpec):
    """A FlashAttention backend's facts, and its module's: entry points, window spelling, what it maps."""

    module: str = ""
    function: str = "flash_attn_func"
    unbounded: int | None = -1
    warm_call: bool = False  # FA4 compiles its kernels at the first call
    owner_checked: bool = False  # FA4: flash-attn 2.8 bundles an older flash_attn/cute
    min_capability: tuple[int, int] = (8, 0)
    score_keywords: tuple[str, ...] = ("softcap",)
    page_table_keyword: str | None = None  # flash_attn_with_kvcache's; None: paging not mapped
    page_multiple: int = 1
    varlen_pages: bool = False  # FA4: pages through flash_attn_varlen_func
    takes_qv: bool = False
    fp8_numerics: Numerics | None = None


def flash_answers(library: str) -> Answers:
    return forward_backward(Answer(NOT_APPLICABLE, "FlashAttention's forward is deterministic"),
                            Answer(HONOURED, f"{DETERMINISTIC_KEYWORD}=True to {library}'s backward"))


class _Flash(Backend):

    # Tests add "cpu" to run against a stand-in module.
    spec: ClassVar[FlashSpec] = FlashSpec(capabilities=Capabilities(devices=("cuda",)))

    def qv_reason(self, case: Case) -> str | None:
        """Why this library's qv form cannot run `case`, where attnbench knows before the call;
        None: let it try."""
        return None

    def _function(self, name: str | None = None) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.spec.module), name or self.spec.function)

    def library_calls(self) -> tuple[LibraryCall, ...]:
        paged_varlen = ("seqused_k", "page_table") if self.spec.varlen_pages else ()
        scores = (*self.spec.score_keywords, *(("qv",) if self.spec.takes_qv else ()),
                  *(DESCALE_KEYWORDS if self.spec.fp8_numerics else ()))
        calls = [LibraryCall(self.spec.module, self.spec.function, FLASH_POSITIONAL,
                             (*FLASH_KEYWORDS, *scores, DETERMINISTIC_KEYWORD)),
                 LibraryCall(self.spec.module, VARLEN_FUNCTION, FLASH_POSITIONAL,
                             (*VARLEN_KEYWORDS, *paged_varlen, *scores, DETERMINISTIC_KEYWORD),
                             optional=True)]
        if self.spec.page_table_keyword is not None:
            calls.append(LibraryCall(self.spec.module, KVCACHE_FUNCTION, KVCACHE_POSITIONAL,
                                     ("cache_seqlens", self.spec.page_table_keyword, *FLASH_KEYWORDS,
                                      *scores),
                                     optional=True))
        return tuple(calls)

    def availability(self, device: str) -> str | None:
        try:
            self._function()
        except ImportError as exc:
            return f"{self.library} is not installed (cannot import {self.spec.module}: {exc})"
        except AttributeError:
            return f"{self.library}: {self.spec.module} has no {self.spec.function}"
        if self.spec.owner_checked:
            problem = module_owner(self.spec.module, self.library)
            if problem:
                return problem
        problem = device_problem(device, self.capabilities.devices,
                                 "needs CUDA (FlashAttention has no CPU kernel)")
        if problem:
            return problem
        if device == "cuda":
            import torch

            cap = torch.cuda.get_device_capability()
            if cap < self.spec.min_capability:
                need = ".".join(map(str, self.spec.min_capability))
                return f"needs compute capability ≥ {need} (this GPU: {cap[0]}.{cap[1]})"
        return None

    def numerics(self, case: Case) -> Numerics | None:
        return self.spec.fp8_numerics if case.quantized else None

    def unsupported(self, case: Case) -> str | None:
        checks = (self._dtype_reason, self._head_dim_reason, self._axis_reason, self._qv_form_reason,
                  self._pages_reason)
        return next((reason for check in checks if (reason := check(case))), None)

    def _dtype_reason(self, case: Case) -> str | None:
        if case.dtype not in HALF_DTYPES and not case.quantized:  # `quantized` admitted the FP8 ones
            return f"{case.dtype} is not supported (FlashAttention takes float16 or bfloat16)"
        return None

    def _head_dim_reason(self, case: Case) -> str | None:
        # qv form: q and k are the rope part
        qk_dim = case.head_dim - case.v_dim if case.kv_shared else case.head_dim
        return f"head_dim {case.head_dim} > {MAX_HEAD_DIM}" if qk_dim > MAX_HEAD_DIM else None

    def _axis_reason(self, case: Case) -> str | None:
        reasons = self.capabilities.axis_reasons
        return next((reasons[axis] for axis in case.workload_axes if axis in reasons), None)

    def _qv_form_reason(self, case: Case) -> str | None:
        if not (case.kv_shared and "kv_shared" in self.capabilities.workload_axes):
            return None
        if case.needs_grad:
            return (f"{self.library}'s qv form (absorbed MLA) is run forward only: its gradient puts K's "
                    "latent share into dV (K_nope is V there), which the reference keeps apart")
        return self.qv_reason(case)

    def _pages_reason(self, case: Case) -> str | None:
        if case.page_size is None:
            return None
        if "page_size" in self.capabilities.workload_axes and case.doc_lens is not None:
            return packing.documents_in_pages(case, self.library)
        if self.spec.varlen_pages and case.needs_grad:
            return (f"attnbench runs {self.library}'s paged KV cache forward only "
                    "(page_table is for inference)")
        if self.spec.page_table_keyword is None:
            return None
        if case.needs_grad:
            return f"{KVCACHE_FUNCTION} (the paged KV cache) is inference-only: no backward"
        if case.page_size % self.spec.page_multiple:
            return (f"{self.library}'s paged KV cache takes pages of a multiple of {self.spec.page_multiple} "
                    f"tokens (page_size {case.page_size})")
        return None

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scales: Scales | None = None) -> Prepared:
        import torch

        kwargs = {**flash_window_args(case, self.spec.unbounded), "softmax_scale": case.head_dim ** -0.5,
                  **self.score_arguments(case, q.device)}
        words = [f"causal={kwargs['causal']}", f"window_size={kwargs['window_size']}"]
        words += [f"softcap={case.softcap:g}"] if "softcap" in kwargs else []
        words += ["alibi_slopes"] if "alibi_slopes" in kwargs else []
        deterministic = {DETERMINISTIC_KEYWORD: torch.are_deterministic_algorithms_enabled()}
        words += [f"{DETERMINISTIC_KEYWORD}=True"] if deterministic[DETERMINISTIC_KEYWORD] else []
        latent: tuple[torch.Tensor, ...] = ()  # qv, the call's fourth input
        if case.kv_shared:
            q, k, qv = qv_split(case, q, k)
            latent = (qv,)
            words.append(f"qv: rope {case.head_dim - case.v_dim}, latent {case.v_dim}")
        if scales is not None:
            kwargs.update(descale_arguments(case, scales))
            words.append(f"{case.dtype}, q/k/v_descale ({case.quant}) as "
                         f"({'sequences' if case.doc_lens else 'batch'}, kv_heads)")
        to_canonical: Callable[[torch.Tensor], torch.Tensor] = from_flash_layout
        if case.page_size is not None:
            name = VARLEN_FUNCTION if self.spec.varlen_pages else KVCACHE_FUNCTION
            lengths, table = ("seqused_k", "page_table") if self.spec.varlen_pages else \
                ("cache_seqlens", str(self.spec.page_table_keyword))
            fn = self._library_function(name)
            layout = workload.pages(case)
            paged = {lengths: packing.int32(workload.request_kv_lens(case), q.device),
                     table: packing.block_table(layout, q.device)}
            words.append(f"{table} over pages of {case.page_size}")

            def call(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     *qv: torch.Tensor) -> torch.Tensor:
                return output_of(fn(q, k_cache, v_cache, **paged, **kwargs, **qv_argument(qv)))

            inputs = (to_flash_layout(q), fp8.to_pages(k, layout), fp8.to_pages(v, layout),
                      *(to_flash_layout(t) for t in latent))
        elif case.doc_lens is not None or case.kv_lens is not None:
            name = VARLEN_FUNCTION
            fn = self._library_function(name)
            seqs = packing.varlen(case)
            offsets = {"cu_seqlens_q": packing.int32(seqs.cu_q, q.device),
                       "cu_seqlens_k": packing.int32(seqs.cu_k, q.device),
                       "max_seqlen_q": seqs.max_q, "max_seqlen_k": seqs.max_k}
            words.append(f"{seqs.sequences} sequences")

            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *qv: torch.Tensor) -> torch.Tensor:
                return output_of(fn(q, k, v, **offsets, **kwargs, **qv_argument(qv), **deterministic))

            inputs = (packing.pack_q(q), packing.pack_kv(k, case), packing.pack_kv(v, case),
                      *(packing.pack_q(t) for t in latent))

            def to_canonical(out: torch.Tensor) -> torch.Tensor:
                return packing.unpack_out(out, case)
        else:
            name = self.spec.function
            fn = self._function()

            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *qv: torch.Tensor) -> torch.Tensor:
                return output_of(fn(q, k, v, **kwargs, **qv_argument(qv), **deterministic))

            inputs = tuple(to_flash_layout(t) for t in (q, k, v, *latent))
        extra: dict[str, Any] = {}
        if self.spec.warm_call:
            extra["compile_s"] = warm_up(call, inputs, case.needs_grad)
        gqa = "" if case.kv_heads == case.heads else f", native GQA {case.heads}/{case.kv_heads}"
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"{self.library} {self.version()} {self.spec.module}.{name}({', '.join(words)}{gqa})",
            to_canonical=to_canonical,
            extra=extra,
        )

    def _library_function(self, name: str) -> Callable[..., Any]:
        try:
            return self._function(name)
        except AttributeError:
            raise Unsupported(f"{self.library}: {self.spec.module} has no {name}") from None

    def score_arguments(self, case: Case, device: Any) -> dict[str, Any]:
        """`softcap` and `alibi_slopes` (fp32, the case's), only when the case sets them."""
        import torch

        args: dict[str, Any] = {}
        if case.softcap is not None:
            args["softcap"] = float(case.softcap)
        if case.alibi:
            args["alibi_slopes"] = torch.tensor(workload.case_slopes(case), dtype=torch.float32,
                                                device=device)
        return args

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, self.library, REFUSALS,
                               (RuntimeError, AssertionError, NotImplementedError, ValueError))


def qv_argument(latent: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    return {"qv": latent[0]} if latent else {}


def descale_arguments(case: Case, scales: Scales) -> dict[str, Any]:
    """FA3's q/k/v_descale: float32 (batch, kv_heads), a row per varlen sequence
    (a document's: its batch row's)."""
    factors = {f"{n}_descale": fp8.per_batch_kv_head(scales, n, case) for n in ("q", "k", "v")}
    if case.doc_lens is not None and case.page_size is None:
        rows = [row for row in range(case.batch) for _ in case.doc_lens]
        factors = {name: f[rows].contiguous() for name, f in factors.items()}
    return factors


def output_of(result: Any) -> torch.Tensor:
    """The output: FA4 and older FA3 builds return (out, lse)."""
    return result[0] if isinstance(result, (tuple, list)) else result


@register
class FlashAttn2(_Flash):
    spec = dataclasses.replace(
        _Flash.spec, name="flash-attn",
        # Backward (csrc/flash_attn/flash_api.cpp mha_bwd): a float32 `dq_accum`, under GQA
        # `dk_expanded`/`dv_expanded` per query head, summed after; dO and O arrive contiguous
        # (maybe_contiguous copies nothing).
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.50, efficiency_bwd=0.35),
                  memory=MemoryCost(bwd_dq_accum=True, bwd_expands_kv=True)),
        summary="FlashAttention 2 (flash_attn.flash_attn_func): fp16/bf16, native GQA, sm80+",
        library="flash-attn",
        install_hint="pip install 'attnbench[flash]' --no-build-isolation  (compiles against your torch)",
        capabilities=dataclasses.replace(
            _Flash.capabilities, kernel_names=per_device(cuda=FLASH_ATTENTION_2),
            workload_axes=frozenset({"documents", "kv_lengths", "page_size", "softcap", "alibi"}),
            axis_reasons={"head_dim_v": "FlashAttention 2 needs V's head size "
                                        "equal to Q/K's (no head_dim_v)"}),
        module="flash_attn", score_keywords=("softcap", "alibi_slopes"), page_table_keyword="block_table",
        page_multiple=256,  # flash_attn_with_kvcache's docstring: "page_block_size must be a multiple of 256"
        determinism=flash_answers("flash-attn"))

    def availability(self, device: str) -> str | None:
        reason = super().availability(device)
        if reason is None or installed_version(self.library) is not None:
            return reason
        # flash-attn-4 alone leaves `flash_attn` a namespace package
        try:
            package = importlib.import_module(self.spec.module)
        except ImportError:
            package = None
        if package is not None and getattr(package, "__file__", None) is None and hasattr(package,
                                                                                          "__path__"):
            reason = (f"{self.library} (FlashAttention 2) is not installed: {self.spec.module} here is only "
                      "the namespace package flash-attn-4 installs flash_attn/cute into "
                      f"({', '.join(package.__path__)})")
        if os.environ.get(IMAGE_FLASH_ATTN_2) == "no":
            reason = ("not carried by this image (built with FLASH_ATTN_2=no: FlashAttention 2 compiles from "
                      f"source, on a CUDA-toolkit base; docs/docker.md); {reason}")
        return reason


@register
class FlashAttn3(_Flash):
    spec = dataclasses.replace(
        _Flash.spec, name="flash-attn-3",
        # Backward (hopper/flash_api.cpp mha_bwd): a float32 `dq_accum`; under GQA float32
        # `dk_accum`/`dv_accum` per KV head.
        cost=Cost(cuda=fp8.FA3_KERNEL, memory=MemoryCost(bwd_dq_accum=True, bwd_dkv_accum=True)),
        summary="FlashAttention 3 for Hopper (flash_attn_interface.flash_attn_func): fp16/bf16, native GQA",
        library="flash-attn-3",
        install_hint="build flash-attention's hopper/ package on a Hopper GPU (cd hopper "
                     "&& python setup.py install)",
        capabilities=dataclasses.replace(
            _Flash.capabilities, kernel_names=per_device(cuda=FLASH_ATTENTION_3),
            workload_axes=frozenset({"documents", "kv_lengths", "page_size", "softcap", "head_dim_v",
                                     "kv_shared"}),
            axis_reasons={"alibi": "FlashAttention 3 has no alibi_slopes"},
            quantized=frozenset({"qkv:float8_e4m3fn", "scale:tensor", "scale:head"}),
            quant_reasons={
                "qkv:float8_e5m2": "FlashAttention 3 takes FP8 as float8_e4m3fn only (hopper/flash_api.cpp)",
                **{f"kv:{fmt}": "FlashAttention 3 takes Q, K and V in one dtype: no FP8 "
                                "K/V cache under bf16 queries"
                   for fmt in ("float8_e4m3fn", "float8_e5m2")},
                "scale:block": ("FlashAttention 3 takes one descale per (batch, KV head) "
                                "(hopper/flash_api.cpp CHECK_SHAPE(q_descale, batch_size, num_heads_k)): "
                                "per-block factors are not expressible"),
            }),
        module="flash_attn_interface", page_table_keyword="page_table",
        fp8_numerics=Numerics(source="FlashAttention 3's FP8 forward (hopper/softmax.h: P·2^8 to e4m3)",
                              p_format="float8_e4m3fn", p_scale=fp8.FA3_P_SCALE, out_dtype="bfloat16"),
        takes_qv=True,  # rope <= 64, head_dim_v >= 256 on Hopper: flash_api.cpp refuses the rest
        determinism=flash_answers("flash-attn-3"))

    def deterministic(self, case: Case) -> str:
        # hdim rounded to 256 (hopper/flash_api.cpp's backward check)
        if case.needs_grad and case.head_dim > 192:
            return "refused: FlashAttention 3's deterministic backward does not support head_dim 256"
        return super().deterministic(case)


@register
class FlashAttn4(_Flash):
    spec = dataclasses.replace(
        _Flash.spec, name="flash-attn-4",
        # Backward (flash_attn/cute/interface.py _flash_attn_bwd): a float32 `dq_accum` (batch, heads,
        # seqlen_q_rounded · head_dim_rounded); under GQA (qhead_per_kvhead > 1, `dKV_postprocess`) float32
        # `dk_accum`/`dv_accum` per KV head; `dpsum` and `lse_log2` one float32 per query row each.
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.65, efficiency_bwd=0.45),
                  memory=MemoryCost(bwd_dq_accum=True, bwd_dkv_accum=True)),
        summary="FlashAttention 4, CuTe DSL (flash_attn.cute.flash_attn_func): "
                "fp16/bf16, compiled at first call",
        library="flash-attn-4",
        install_hint="pip install flash-attn-4",
        capabilities=dataclasses.replace(
            _Flash.capabilities, kernel_names=per_device(cuda=FLASH_ATTENTION_4),
            workload_axes=frozenset({"documents", "kv_lengths", "page_size", "softcap", "head_dim_v",
                                     "kv_shared"}),
            axis_reasons={"alibi": "FlashAttention 4 has no alibi_slopes (only a CuTe score_mod)"},
            quant_reasons=for_every_input("FlashAttention 4's FP8 forward runs on SM100 only "
                                          "(flash_attn/cute/interface.py asserts arch 10.x) and flash-attn-4 "
                                          "4.0.0b36's flash_attn_func takes no descale: "
                                          "attnbench maps no FP8 onto it")),
        module="flash_attn.cute", varlen_pages=True, unbounded=None, warm_call=True, owner_checked=True,
        takes_qv=True, determinism=flash_answers("flash-attn-4"))

    def qv_reason(self, case: Case) -> str | None:
        """interface.py's qv asserts, some without a message:
        rope 64, head_dim_v 512, no window, no soft-cap."""
        if (case.head_dim - case.v_dim, case.v_dim) != (64, 512):
            return (f"FlashAttention 4's qv form takes a 64-channel rope part and head_dim_v 512 (got "
                    f"{case.head_dim - case.v_dim}/{case.v_dim})")
        if case.window is not None:
            return "FlashAttention 4's qv form has no local window ('local not yet supported with qv')"
        if case.softcap is not None:
            return "FlashAttention 4's qv form has no soft-capping"
        return None
