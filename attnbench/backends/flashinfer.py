"""`flashinfer` (flashinfer-python, CUDA, forward only; docs/backends.md#flashinfer), its entry point by
`route`. Absorbed MLA: scores (q_nope·ckv + q_pe·kpe)·sm_scale (include/flashinfer/attention/mla.cuh), with
the flat plan()/run() keywords of 0.2+ (0.7.4 deprecates, still accepts them).

Causal is bottom-right per request (prefill.cuh: masked when kv_idx + qo_len > kv_len + q_idx), as
docs/conventions.md; `window_left=W` keeps W keys before the diagonal, no right bound. `logits_soft_cap=c` is
c·tanh(s·sm_scale/c). ALiBi: `pos_encoding_mode="ALIBI"`, own slopes (`get_alibi_slopes(H)`, the
conventions'), a signed bias slope·(kv_idx − q_idx), equal to ours only where no query sees a later key. FP8
K/V cache: `k_scale`, `v_scale` floats (decode.py / prefill.py: `sm_scale *= k_scale`, `out *= v_scale`),
plan's `kv_data_type` FP8. """

from __future__ import annotations

import importlib
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from attnbench.backends import fp8, packing
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    LibraryCompile,
    Prepared,
    device_problem,
    import_problem,
    installed_version,
    library_refusal,
    warm_up,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.flash import qv_split
from attnbench.backends.flashinfer_kernels import JitWatch, compiling_now, kernel_files
from attnbench.backends.kernel_names import FLASHINFER, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import NOT_APPLICABLE, Limit, always, forward_only
from attnbench.core import workload
from attnbench.core.axes import HALF_DTYPES
from attnbench.core.quant import Numerics

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Scales

MODULE = "flashinfer"
# As FlashInfer's examples: 128 MB of uint8, zeroed for decode.
WORKSPACE_BYTES = 128 << 20
# A key's modules built on the H200 (docs/run-time.md, "Compiling ahead"), and loaded.
JIT_COLD_S = 100.0
JIT_CACHED_S = 0.05
# Phrases of FlashInfer's own input checks.
REFUSALS = ("not supported", "Unsupported", "unsupported", "does not support", "must be", "only support",
            "NotImplemented", "should be", "Invalid")
SCALE_ARGS = ("k_scale", "v_scale")  # FP8 K/V descale factors, floats
PLAN_ARGS = ("causal", "window_left", "logits_soft_cap", "sm_scale", "pos_encoding_mode", "q_data_type",
             "kv_data_type")

# Methods are declared with `self` first, as their unbound signatures read.
SINGLE_CALL = LibraryCall(MODULE, "single_prefill_with_kv_cache", positional=("q", "k", "v"),
                          keywords=("causal", "kv_layout", "sm_scale", "window_left", "logits_soft_cap",
                                    "pos_encoding_mode", *SCALE_ARGS))
RAGGED_CALLS = (
    LibraryCall(MODULE, "BatchPrefillWithRaggedKVCacheWrapper", positional=("float_workspace_buffer",),
                keywords=("kv_layout",)),
    LibraryCall(MODULE, "BatchPrefillWithRaggedKVCacheWrapper.plan",
                positional=("self", "qo_indptr", "kv_indptr", "num_qo_heads", "num_kv_heads", "head_dim_qk"),
                keywords=("head_dim_vo", *PLAN_ARGS)),
    LibraryCall(MODULE, "BatchPrefillWithRaggedKVCacheWrapper.run", positional=("self", "q", "k", "v"),
                keywords=SCALE_ARGS),
)
PAGED_PREFILL_CALLS = (
    LibraryCall(MODULE, "BatchPrefillWithPagedKVCacheWrapper", positional=("float_workspace_buffer",),
                keywords=("kv_layout",)),
    LibraryCall(MODULE, "BatchPrefillWithPagedKVCacheWrapper.plan",
                positional=("self", "qo_indptr", "paged_kv_indptr", "paged_kv_indices",
                            "paged_kv_last_page_len", "num_qo_heads", "num_kv_heads", "head_dim_qk",
                            "page_size"),
                keywords=("head_dim_vo", *PLAN_ARGS)),
    LibraryCall(MODULE, "BatchPrefillWithPagedKVCacheWrapper.run", positional=("self", "q", "paged_kv_cache"),
                keywords=SCALE_ARGS),
)
DECODE_CALLS = (
    LibraryCall(MODULE, "BatchDecodeWithPagedKVCacheWrapper", positional=("float_workspace_buffer",),
                keywords=("kv_layout",)),
    # plan() forwards **kwargs to _plan_impl (flashinfer 0.7): both are held.
    LibraryCall(MODULE, "BatchDecodeWithPagedKVCacheWrapper.plan",
                positional=("self", "indptr", "indices", "last_page_len", "num_qo_heads", "num_kv_heads",
                            "head_dim", "page_size"),
                keywords=tuple(a for a in PLAN_ARGS if a != "causal")),
    LibraryCall(MODULE, "BatchDecodeWithPagedKVCacheWrapper._plan_impl",
                positional=("self", "indptr", "indices", "last_page_len", "num_qo_heads", "num_kv_heads",
                            "head_dim", "page_size"),
                keywords=tuple(a for a in PLAN_ARGS if a != "causal"), optional=True),
    LibraryCall(MODULE, "BatchDecodeWithPagedKVCacheWrapper.run", positional=("self", "q", "paged_kv_cache"),
                keywords=SCALE_ARGS),
)


MLA_PLAN_KEYWORDS = ("qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr", "num_heads", "head_dim_ckv",
                     "head_dim_kpe", "page_size", "causal", "sm_scale", "q_data_type", "kv_data_type")
MLA_CALLS = (
    LibraryCall(MODULE, "mla.BatchMLAPagedAttentionWrapper", positional=("float_workspace_buffer",)),
    LibraryCall(MODULE, "mla.BatchMLAPagedAttentionWrapper.plan", positional=("self",),
                keywords=MLA_PLAN_KEYWORDS),
    LibraryCall(MODULE, "mla.BatchMLAPagedAttentionWrapper.run", positional=("self",),
                keywords=("q_nope", "q_pe", "ckv_cache", "kpe_cache")),
)


def flashinfer_module() -> Any:
    return importlib.import_module(MODULE)


def window_arguments(case: Case) -> dict[str, Any]:
    """`causal` and `window_left` (W keys before the query, inclusive). A two-sided W equals causal + W where
    every query is its sequence's last position; unsupported() refuses the rest."""
    if case.window is None:
        return {"causal": case.causal, "window_left": -1}
    return {"causal": True, "window_left": case.window}


SINGLE_TMP_BYTES = 32 << 20  # flashinfer/utils.py SINGLE_KERNEL_TMP_SIZE (0.7.2.post1)


def route(case: Case) -> str:
    """Which FlashInfer entry point runs `case`: "single", "ragged", "paged-prefill", "decode" or "mla"."""
    if case.kv_shared:
        return "mla"
    if case.page_size is not None:
        return "decode" if case.seq_len == 1 else "paged-prefill"
    if case.batch == 1 and case.doc_lens is None and case.kv_lens is None:
        return "single"
    return "ragged"


def short_causal(case: Case) -> tuple[int, int] | None:
    """The first (queries, keys) of a causal sequence with 0 < keys < queries,
    which FlashInfer does not take."""
    if not case.causal:
        return None
    pairs = (zip(case.doc_lens, workload.doc_key_lens(case), strict=False) if case.doc_lens is not None
             else ((case.seq_len, kv) for kv in workload.request_kv_lens(case)))
    return next(((q, kv) for q, kv in pairs if 0 < kv < q), None)


@register
class FlashInferBackend(Backend):
    spec = BackendSpec(
        name="flashinfer",
        # Kernels by analogy with FA2/FA3, not fitted.
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.55, efficiency_bwd=0.0), compiles=True,
                  jit=LibraryCompile(cold_s=JIT_COLD_S, cached_s=JIT_CACHED_S)),
        summary=("FlashInfer: single/ragged prefill, paged prefill and decode (plan() outside the timed "
                 "call); fp16/bf16, native GQA, forward only"),
        library="flashinfer-python",
        install_hint=("pip install 'attnbench[flashinfer]'  "
                      "(its kernels are JIT-compiled with nvcc at first use)"),
        capabilities=Capabilities(
            devices=("cuda",), kernel_names=per_device(cuda=FLASHINFER),
            workload_axes=frozenset({"documents", "kv_lengths", "page_size", "softcap", "alibi", "head_dim_v",
                                     "kv_shared"}),
            quantized=frozenset({"kv:float8_e4m3fn", "kv:float8_e5m2", "scale:tensor"}),
            quant_reasons={
                **{f"qkv:{fmt}": ("attnbench maps FlashInfer's FP8 K/V cache (k_scale, v_scale under "
                                  "bf16/fp16 queries); its FP8-query prefill (single_prefill_with_kv_cache's "
                                  "per-head scale_q) is not mapped yet")
                   for fmt in ("float8_e4m3fn", "float8_e5m2")},
                **{f"scale:{g}": ("FlashInfer's k_scale and v_scale are one float each (run(): sm_scale *= "
                                  "k_scale, out *= v_scale): per-tensor factors only")
                   for g in ("head", "block")},
            }),
        limits=(Limit(field="dtype", allowed=HALF_DTYPES,
                      reason="{dtype} is not supported (FlashInfer's attention takes float16 or bfloat16)"),
                forward_only("FlashInfer's attention is forward-only (no backward kernel)")),
        # plan() fixes the split of the keys: two calls run one schedule.
        determinism=always(NOT_APPLICABLE,
                           "forward only; FlashInfer's attention has no deterministic switch"))
    kv_layout: ClassVar[str] = "NHD"  # the paged pool's: NHD (pages, page_size, KVH, D), or HND

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (SINGLE_CALL, *RAGGED_CALLS, *PAGED_PREFILL_CALLS, *DECODE_CALLS, *MLA_CALLS)

    def estimate_memory(self, case: Case) -> int:
        """The single prefill allocates its split-KV buffer in every call (prefill.py)."""
        held = SINGLE_TMP_BYTES if route(case) == "single" else 0
        return super().estimate_memory(case) + held

    def availability(self, device: str) -> str | None:
        # it has crashed at import on CPU-only torch builds
        problem = import_problem(flashinfer_module, "flashinfer-python", "flashinfer")
        if problem:
            return problem
        problem = device_problem(device, self.capabilities.devices,
                                 "needs CUDA (FlashInfer has no CPU kernels)")
        if problem or device != "cuda":
            return problem
        kernels = kernel_files()
        if kernels["state"] == "absent":
            return f"FlashInfer has {kernels['summary']}"
        return None

    def kernels(self) -> dict[str, Any] | None:
        return kernel_files() if installed_version(self.library) is not None else None

    def unsupported(self, case: Case) -> str | None:
        checks = (_pages_reason, _alibi_reason, _head_dim_v_reason, _short_causal_reason, _window_reason)
        return super().unsupported(case) or next((reason for check in checks if (reason := check(case))),
                                                 None)

    def compile_key(self, case: Case) -> str:
        """What a JIT module specialises on (flashinfer/jit/attention/modules.py get_*_uri)."""
        return "|".join(str(part) for part in (
            f"{self.name} {self.version()}", case.device, route(case), case.dtype,
            case.kv_dtype or case.dtype, case.head_dim, case.v_dim, f"alibi={case.alibi}",
            f"window={case.window is not None}", f"softcap={bool(case.softcap)}"))

    def compiling(self) -> str | None:
        module = compiling_now()
        return f"FlashInfer's JIT compile of {module}" if module else None

    def numerics(self, case: Case) -> Numerics | None:
        if not case.quantized:
            return None
        decode = route(case) == "decode"
        return Numerics(source="FlashInfer's FP8 K/V cache " + ("decode (CUDA cores)" if decode
                                                                else "prefill"),
                        p_format=None if decode else case.dtype, v_scale_after=True, out_dtype=case.dtype)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scales: Scales | None = None) -> Prepared:
        fi = flashinfer_module()
        watch = JitWatch()
        how = route(case)
        scaled = {} if scales is None else {name: fp8.per_tensor(scales, name[0]) for name in SCALE_ARGS}
        mask = window_arguments(case)
        common = {**mask, "logits_soft_cap": case.softcap, "sm_scale": case.head_dim ** -0.5}
        if case.alibi:
            common["pos_encoding_mode"] = "ALIBI"  # its own slopes: the conventions' for these heads
        if how == "single":
            planned = single_planned(fi, q, k, v, common, scaled)
        elif how == "ragged":
            planned = ragged_planned(fi, case, q, k, v, common, scaled)
        elif how == "mla":
            planned = Planned(*mla_prepared(fi, case, q, k, v), lambda out: packing.unpack_out(out, case))
        else:
            planned = paged_planned(fi, case, self.kv_layout, (q, k, v), common, scaled)
        wrapper, inputs, call, plan_s, to_canonical = planned
        built_in_plan = bool(watch.split()[0])  # a batch wrapper's plan() builds its module
        extra: dict[str, Any] = {"compile_s": warm_up(call, inputs, False)}
        if plan_s is not None and built_in_plan:
            extra["compile_s"] += plan_s
        elif plan_s is not None:
            extra["plan_ms"] = plan_s * 1e3
        extra.update(watch.extra())
        chosen = getattr(wrapper, "_backend", None) if wrapper is not None else None
        if chosen is not None:
            extra["flashinfer_backend"] = str(chosen)
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"flashinfer {self.version()} {kernel_words(case, how, mask, self.kv_layout, chosen)}"
                   + (f" with {case.kv_dtype} K/V, k_scale {scaled['k_scale']:.4g}, "
                      f"v_scale {scaled['v_scale']:.4g}"
                      if scaled else ""),
            to_canonical=to_canonical,
            extra=extra,
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "flashinfer", REFUSALS, (RuntimeError, ValueError, NotImplementedError,
                                                             AssertionError))


def _pages_reason(case: Case) -> str | None:
    if reason := packing.documents_in_pages(case, "FlashInfer"):
        return reason
    if case.kv_shared and (reason := mla_reason(case)):
        return reason
    if case.page_size is not None and min(workload.request_kv_lens(case)) == 0:
        return ("FlashInfer's paged layout gives each request at least one key (kv_last_page_len in [1, "
                "page_size]): a request with an empty cache is not mapped")
    return None


def _alibi_reason(case: Case) -> str | None:
    if not case.alibi:
        return None
    if case.softcap is not None:
        return ("FlashInfer applies sm_scale twice where ALiBi meets logits_soft_cap (variants.cuh); "
                "attnbench does not run alibi with softcap on flashinfer")
    if (case.tp or 1) > 1:
        return ("FlashInfer's ALiBi slopes are fixed for the heads it is given (get_alibi_slopes(H)); a "
                "tensor-parallel share needs the whole model's slopes: alibi with tp is not mapped")
    if not case.causal and case.seq_len > 1:
        return ("FlashInfer's ALiBi bias is signed, slope·(kv_idx − q_idx): it equals docs/conventions.md's "
                "−slope·|i + off − j| only where no query sees a later key (causal, or decode)")
    return None


def _head_dim_v_reason(case: Case) -> str | None:
    if case.head_dim_v is not None and route(case) == "decode":
        return "FlashInfer's paged decode takes one head_dim for K and V (head_dim_v needs its MLA wrapper)"
    return None


def _short_causal_reason(case: Case) -> str | None:
    if short := short_causal(case):
        return ("FlashInfer does not take a causal sequence whose cache is shorter than its queries "
                f"({short[0]} queries over {short[1]} keys): its single prefill raises 'kv_len must be "
                "greater than or equal to qo_len', its batch and MLA kernels' causal bounds wrap around "
                "(uint32) and its tests skip 'qo_len > kv_len and causal'; an empty cache is mapped")
    return None


def _window_reason(case: Case) -> str | None:
    if case.window is not None and not case.causal and (case.seq_len > 1 or case.doc_lens is not None):
        return ("FlashInfer has no right window bound (window_left only): a two-sided window is not "
                "expressible with more than one query per request")
    return None


def mla_reason(case: Case) -> str | None:
    if case.page_size is None:
        return ("FlashInfer runs absorbed MLA (kv_shared) through BatchMLAPagedAttentionWrapper, which reads "
                "a paged ckv/kpe cache: attnbench maps kv_shared onto it with page_size")
    if case.kv_heads != 1:
        return f"FlashInfer's MLA cache is one latent KV head (kv_heads {case.kv_heads})"
    if case.window is not None or case.softcap is not None or case.alibi:
        return ("FlashInfer's MLA wrapper has no window, soft-cap or ALiBi (plan takes "
                "causal and sm_scale only)")
    return None


def mla_plan_arguments(case: Case, device: Any, q_dtype: Any, kv_dtype: Any) -> dict[str, Any]:
    """BatchMLAPagedAttentionWrapper.plan's keywords:
    the page table in CSR form, ckv = head_dim_v, kpe the rest."""
    seqs = packing.varlen(case)
    indptr, indices, _ = packing.flashinfer_page_indices(workload.pages(case))
    return {"qo_indptr": packing.int32(seqs.cu_q, device), "kv_indptr": packing.int32(indptr, device),
            "kv_indices": packing.int32(indices, device),
            "kv_len_arr": packing.int32(workload.request_kv_lens(case), device), "num_heads": case.heads,
            "head_dim_ckv": case.v_dim, "head_dim_kpe": case.head_dim - case.v_dim,
            "page_size": case.page_size, "causal": case.causal, "sm_scale": case.head_dim ** -0.5,
            "q_data_type": q_dtype, "kv_data_type": kv_dtype}


class Planned(NamedTuple):
    wrapper: Any
    inputs: tuple[torch.Tensor, ...]
    call: Callable[..., torch.Tensor]
    plan_s: float | None
    to_canonical: Callable[[torch.Tensor], torch.Tensor]


def single_planned(fi: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, common: dict[str, Any],
                   scaled: dict[str, float]) -> Planned:
    single = fi.single_prefill_with_kv_cache
    inputs = tuple(t[0].transpose(0, 1).contiguous() for t in (q, k, v))  # (S, H, D): NHD

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return single(q, k, v, kv_layout="NHD", **common, **scaled)

    return Planned(None, inputs, call, None, lambda out: out.transpose(0, 1)[None])


def ragged_planned(fi: Any, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   common: dict[str, Any], scaled: dict[str, float]) -> Planned:
    device = q.device
    seqs = packing.varlen(case)
    wrapper = fi.BatchPrefillWithRaggedKVCacheWrapper(workspace(device), kv_layout="NHD")
    start = time.perf_counter()
    wrapper.plan(packing.int32(seqs.cu_q, device), packing.int32(seqs.cu_k, device), case.heads,
                 case.kv_heads, case.head_dim, head_dim_vo=case.v_dim, q_data_type=q.dtype,
                 kv_data_type=k.dtype, **common)
    plan_s = synced(start, device)
    inputs = (packing.pack_q(q), packing.pack_kv(k, case), packing.pack_kv(v, case))
    run = wrapper.run

    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return run(q, k, v, **scaled)

    return Planned(wrapper, inputs, call, plan_s, lambda out: packing.unpack_out(out, case))


def paged_planned(fi: Any, case: Case, kv_layout: str, qkv: tuple[torch.Tensor, ...], common: dict[str, Any],
                  scaled: dict[str, float]) -> Planned:
    q, k, v = qkv
    device = q.device
    layout = workload.pages(case)
    indptr, indices, last = (packing.int32(x, device) for x in packing.flashinfer_page_indices(layout))
    pools = tuple(fp8.to_pages(t, layout) for t in (k, v))  # (pages, P, KVH, D): NHD
    if kv_layout == "HND":
        pools = tuple(packing.nhd_to_hnd(pool) for pool in pools)
    decode = route(case) == "decode"
    if decode:
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace(device), kv_layout=kv_layout)
        start = time.perf_counter()
        decode_args = {key: value for key, value in common.items() if key != "causal"}
        wrapper.plan(indptr, indices, last, case.heads, case.kv_heads, case.head_dim, case.page_size,
                     q_data_type=q.dtype, kv_data_type=k.dtype, **decode_args)
        q_in = q[:, :, 0]  # (B, H, D): one query per request
    else:
        seqs = packing.varlen(case)
        wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace(device), kv_layout=kv_layout)
        start = time.perf_counter()
        wrapper.plan(packing.int32(seqs.cu_q, device), indptr, indices, last, case.heads, case.kv_heads,
                     case.head_dim, case.page_size, head_dim_vo=case.v_dim, q_data_type=q.dtype,
                     kv_data_type=k.dtype, **common)
        q_in = packing.pack_q(q)
    plan_s = synced(start, device)
    run = wrapper.run

    def call(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        return run(q, (k_pool, v_pool), **scaled)

    to_canonical = ((lambda out: out[:, :, None]) if decode  # (B, H, D) → (B, H, 1, D)
                    else (lambda out: packing.unpack_out(out, case)))
    return Planned(wrapper, (q_in.contiguous(), *pools), call, plan_s, to_canonical)


def mla_prepared(fi: Any, case: Case, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> tuple[Any, tuple[torch.Tensor, ...], Callable[..., torch.Tensor], float]:
    """The planned MLA wrapper, inputs (q_nope, q_pe, ckv pool, kpe pool), the call and plan's seconds."""
    layout = workload.pages(case)
    q_pe, k_pe, q_nope = qv_split(case, q, k)
    wrapper = fi.mla.BatchMLAPagedAttentionWrapper(workspace(q.device))
    start = time.perf_counter()
    wrapper.plan(**mla_plan_arguments(case, q.device, q.dtype, k.dtype))
    plan_s = synced(start, q.device)
    ckv, kpe = (workload.to_pages(t, layout)[:, :, 0].contiguous() for t in (v, k_pe))
    inputs = (packing.pack_q(q_nope).contiguous(), packing.pack_q(q_pe).contiguous(), ckv, kpe)
    run = wrapper.run

    def call(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv: torch.Tensor, kpe: torch.Tensor) -> torch.Tensor:
        return run(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv, kpe_cache=kpe)

    return wrapper, inputs, call, plan_s


def workspace(device: torch.device) -> torch.Tensor:
    import torch

    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def synced(start: float, device: torch.device) -> float:
    """Seconds since `start`, the device synchronised (plan() may copy to the GPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def kernel_words(case: Case, how: str, mask: dict[str, Any], kv_layout: str, chosen: Any) -> str:
    function = {"single": "single_prefill_with_kv_cache", "ragged": "BatchPrefillWithRaggedKVCacheWrapper",
                "paged-prefill": "BatchPrefillWithPagedKVCacheWrapper",
                "decode": "BatchDecodeWithPagedKVCacheWrapper",
                "mla": "mla.BatchMLAPagedAttentionWrapper"}[how]
    if how == "mla":
        words = [f"causal={case.causal}", f"ckv {case.v_dim} + kpe {case.head_dim - case.v_dim}",
                 f"pages of {case.page_size}"]
        return f"{function}({', '.join(words + ([f'backend {chosen}'] if chosen is not None else []))})"
    words = [f"causal={mask['causal']}", f"window_left={mask['window_left']}"]
    if case.softcap is not None:
        words.append(f"logits_soft_cap={case.softcap:g}")
    if case.alibi:
        words.append("pos_encoding_mode=ALIBI")
    if how in ("paged-prefill", "decode"):
        words.append(f"{kv_layout} pages of {case.page_size}")
    if case.kv_heads != case.heads:
        words.append(f"native GQA {case.heads}/{case.kv_heads}")
    if chosen is not None:
        words.append(f"backend {chosen}")
    return f"{function}({', '.join(words)})"
