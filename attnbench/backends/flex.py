"""`flex` and `flex-dynamic`: FlexAttention under torch.compile (eager materialises every score), with a block
mask from docs/conventions.md's mask; canonical layout, GQA through enable_gqa. `prepare`'s warm call compiles
(setup). `flex` (dynamic=False): a kernel per shape, specialised on whether the lengths divide the 128-token
block (IS_DIVISIBLE). `flex-dynamic` (dynamic=True): one bounds-checked kernel for every sequence length of a
case group. """

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared, first_line
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import FLEX_CPU, FLEX_TRITON, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import NOT_APPLICABLE, Answer, Answers, forward_only, unset
from attnbench.core import workload
from attnbench.core.quant import for_every_input
from attnbench.core.workload import allowed

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

# An eager block mask costs ~11 bytes a pair; past these bounds create_block_mask is compiled
# (docs/backends.md#flex).
MASK_BYTES_PER_PAIR = 11
MASK_EAGER_LIMIT = 256 << 20
MASK_FREE_SHARE = 0.25
# Past Dynamo's recompile limit (8 per process) flex_attention silently runs eager; a sweep makes thousands.
RECOMPILE_LIMIT = 1 << 16
FLEX_Q_BLOCK = 128  # flex's default query block; a paged mask's KV block is one page
_compiled: dict[bool, Callable[..., Any]] = {}
_compiled_mask: dict[bool, Callable[..., Any]] = {}
FLEX_ATTENTION_CALL = LibraryCall("torch.nn.attention.flex_attention", "flex_attention",
                                  positional=("query", "key", "value"),
                                  keywords=("block_mask", "scale", "enable_gqa", "score_mod"))
CREATE_BLOCK_MASK_CALL = LibraryCall("torch.nn.attention.flex_attention", "create_block_mask",
                                     positional=("mask_mod", "B", "H", "Q_LEN", "KV_LEN"),
                                     keywords=("device", "BLOCK_SIZE"))
PAGED_ATTENTION_CALL = LibraryCall("torch.nn.attention.experimental._paged_attention", "PagedAttention",
                                   positional=("n_pages", "page_size", "max_batch_size"),
                                   keywords=("device",))


def compiled_flex_attention(dynamic: bool = False) -> Callable[..., Any]:
    if dynamic not in _compiled:
        import torch
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention

        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
        # Donated buffers forbid retain_graph=True, which the check and the `bwd` mode need.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
        _compiled[dynamic] = torch.compile(flex_attention, dynamic=dynamic)
    return _compiled[dynamic]


def compiled_create_block_mask(dynamic: bool = False) -> Callable[..., Any]:
    """torch.compile(create_block_mask), PyTorch's replacement for `_compile=True`."""
    if dynamic not in _compiled_mask:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask

        compiled_flex_attention(dynamic)  # the same recompile limits
        _compiled_mask[dynamic] = torch.compile(create_block_mask, dynamic=dynamic)
    return _compiled_mask[dynamic]


@functools.cache
def mask_mod_for(offset: int, causal: bool, window: int | None) -> Callable[..., Any]:
    """The mask_mod of workload.allowed for these values, one function per mask. The values are literals, not
    captured: Dynamo makes captured ints symbolic under dynamic=True, which Inductor's CPU template fails to
    compile (torch 2.13); and no Case is captured, so a compile does not guard on lengths."""
    source = (f"def mask_mod(b, h, q_idx, kv_idx):\n"
              f"    return allowed(q_idx, kv_idx, {int(offset)!r}, {bool(causal)!r}, "
              f"{None if window is None else int(window)!r})\n")
    namespace: dict[str, Any] = {"allowed": allowed}
    exec(compile(source, f"<attnbench flex mask off={offset} causal={causal} window={window}>", "exec"),
         namespace)
    return namespace["mask_mod"]


def mask_is_compiled(case: Case, device_type: str, free_bytes: int | None = None) -> bool:
    eager = case.seq_len * case.kv_seq_len * MASK_BYTES_PER_PAIR
    if device_type == "cuda" and free_bytes is not None:
        return eager > MASK_FREE_SHARE * free_bytes
    return eager > MASK_EAGER_LIMIT


def flex_block_mask(case: Case, device: torch.device | str,
                    dynamic: bool = False) -> tuple[Any, dict[str, Any]]:
    """The block mask (None when unmasked), with `mask_build` and `mask_build_s`."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    if not workload.has_mask(case):
        return None, {}
    mask_mod = (mask_mod_for(case.offset, case.causal, case.window) if case.doc_lens is None
                and case.kv_lens is None
                else workload_mask_mod(case, device))
    rows = case.batch if case.kv_lens is not None else None  # ragged lengths: a mask per request
    kind = torch.device(device).type
    free = torch.cuda.mem_get_info(torch.device(device))[0] if kind == "cuda" else None
    compiled = mask_is_compiled(case, kind, free)
    build = compiled_create_block_mask(dynamic) if compiled else create_block_mask
    start = time.perf_counter()
    block_mask = build(mask_mod, rows, None, case.seq_len, case.kv_seq_len, device=device)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return block_mask, {"mask_build": "compiled" if compiled else "eager",
                        "mask_build_s": time.perf_counter() - start}


def workload_mask_mod(case: Case, device: torch.device | str) -> Callable[..., Any]:
    """The mask_mod of documents or ragged cache lengths (workload.allowed_fn)."""
    predicate = workload.allowed_fn(case, device)

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return predicate(b, q_idx, kv_idx)

    return mask_mod


def workload_score_mod(case: Case, device: torch.device | str) -> Callable[..., Any] | None:
    """Soft-cap c·tanh(s/c) then ALiBi −slope_h·|i − j| (i from workload.query_positions),
    docs/conventions.md's order; None when the case has neither."""
    import torch

    cap = case.softcap
    if cap is None and not case.alibi:
        return None
    slopes = None
    if case.alibi:
        slopes = torch.tensor(workload.case_slopes(case), dtype=torch.float32, device=device)
    positions = torch.tensor(workload.query_positions(case), device=device)
    positions = positions.expand(case.batch, -1) if len(positions) == 1 else positions  # (B, Sq)

    def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score - slopes[h] * (positions[b, q_idx] - kv_idx).abs()
        return score

    return score_mod


def paged_inputs(case: Case, k: torch.Tensor, v: torch.Tensor,
                 score_mod: Callable[..., Any] | None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """K and V as PyTorch's PagedAttention cache (1, kv_heads, num_pages·page_size, d) under the workload's
    page table, the logical block mask (a page per KV block) and score_mod converted to physical pages;
    untimed."""
    import torch
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask

    layout = workload.pages(case)
    size, device = case.page_size, k.device
    assert size is not None

    def cache(x: torch.Tensor) -> torch.Tensor:
        pool = workload.to_pages(x.detach(), layout)  # (num_pages, P, KVH, D)
        heads_first = pool.permute(2, 0, 1, 3)
        return heads_first.reshape(1, pool.shape[2], layout.num_pages * size, pool.shape[3]).contiguous()

    start = time.perf_counter()
    paged = PagedAttention(layout.num_pages, size, case.batch, device=str(device))
    # (B, pages); -1: none, as PagedAttention
    table = torch.tensor(layout.table, dtype=torch.int64, device=device)
    width = table.shape[1]
    paged.page_table[:, :width] = table
    used = table >= 0
    rows = torch.arange(case.batch, device=device)[:, None].expand_as(table)
    logical = torch.arange(width, device=device)[None, :].expand_as(table)
    paged.physical_to_logical[rows[used], table[used]] = logical[used]
    logical_mask = create_block_mask(workload_mask_mod(case, device), case.batch, None, case.seq_len,
                                     width * size, device=device, BLOCK_SIZE=(FLEX_Q_BLOCK, size))
    block_mask = paged.convert_logical_block_mask(logical_mask)
    if score_mod is not None:
        score_mod = paged.get_score_mod(score_mod)
    if device.type == "cuda":
        torch.cuda.synchronize()
    extra = {"mask_build": "eager, paged", "mask_build_s": time.perf_counter() - start}
    return cache(k), cache(v), block_mask, score_mod, extra


def refuse_before_compiling(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, needs_grad: bool) -> None:
    """Raise flex_attention's refusal (e.g. backward on a CPU) before compiling: inside torch.compile Dynamo
    suppresses it and runs every later flex case eager."""
    import torch.nn.attention.flex_attention as flex_module

    validate = getattr(flex_module, "_validate_device", None)
    if validate is not None:
        validate(*(t.detach().requires_grad_(needs_grad) for t in (q, k, v)))


def compile_counters() -> dict[str, float]:
    """This process's compile counters so far (docs/backends.md#flex)."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    builds = compilation_time_metrics.get("compile_file", [])
    return {"graphs_traced": int(counters["stats"]["unique_graphs"]),
            "kernels_compiled": int(counters["inductor"]["fxgraph_cache_miss"])
            + int(counters["inductor"]["fxgraph_cache_bypass"]),
            "cache_hits": int(counters["aot_autograd"]["autograd_cache_hit"])
            + int(counters["inductor"]["fxgraph_cache_hit"]),
            "cpp_builds": len(builds), "cpp_build_s": float(sum(builds)),
            "dynamo_s": float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))}


def counted_since(before: dict[str, float]) -> dict[str, float]:
    """compile_counters() less `before` (seconds to the millisecond)."""
    return {name: (round(value - before[name], 3) if isinstance(value, float) else value - before[name])
            for name, value in compile_counters().items()}


def score_words(case: Case) -> str:
    words = [f"softcap {case.softcap:g}"] if case.softcap is not None else []
    return "+".join(words + (["ALiBi"] if case.alibi else []))


def inductor_cxx() -> tuple[str | None, ...]:
    """Inductor's config.cpp.cxx, or its default when torch._inductor (a second to import) is not loaded."""
    import os
    import sys

    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return (None, os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++"))
    named = config.cpp.cxx  # type: ignore[attr-defined]
    return tuple(named) if isinstance(named, (list, tuple)) else (named,)


@functools.cache
def cpu_build_tools_missing() -> str | None:
    """Why Inductor cannot build FlexAttention's CPU kernels (C++ including Python.h) here;
    None when it can."""
    import shutil
    import sysconfig
    from pathlib import Path

    compilers = [c for c in inductor_cxx() if c]
    if not any(shutil.which(c) for c in compilers):
        return (f"needs a C++ compiler for torch.compile's CPU kernels ({' or '.join(compilers) or 'none'} "
                "not found; install g++ or set CXX)")
    include = Path(sysconfig.get_path("include"))
    if not (include / "Python.h").is_file():
        return (f"needs Python's C headers for torch.compile's CPU kernels (no Python.h in {include}; "
                "e.g. apt-get install python3-dev)")
    return None


@register
class FlexBackend(Backend):
    spec = BackendSpec(
        name="flex",
        cost=Cost(cpu=KernelCost(pairs="visible", efficiency_fwd=0.5, efficiency_bwd=0.25),
                  cuda=KernelCost(pairs="visible", efficiency_fwd=0.40, efficiency_bwd=0.28), compiles=True),
        summary="torch FlexAttention (torch.compile, dynamic=False) with a block mask from the case's mask",
        capabilities=Capabilities(
            kernel_names=per_device(cpu=FLEX_CPU, cuda=FLEX_TRITON),
            workload_axes=frozenset({"documents", "kv_lengths", "softcap", "alibi", "head_dim_v", "page_size",
                                     "kv_shared"}),
            quant_reasons=for_every_input("attnbench maps no FP8 inputs onto flex yet (on a GPU Triton may "
                                          "compile an FP8 flex kernel; untried), and "
                                          "PyTorch's CPU flex has no FP8 path")),
        limits=(forward_only("flex runs paged K/V forward only (PyTorch's PagedAttention serves inference)",
                             when="page_size"),
                unset("doc_lens", "flex does not run packed documents inside a paged cache",
                      when="page_size")),
        # No atomics: flex_attention_backward_grid gives each dQ and dK/dV block one program.
        determinism=Answers(
            forward=Answer(NOT_APPLICABLE,
                           "no atomics: its Triton forward computes each query block in one program"),
            backward=Answer(NOT_APPLICABLE, "no atomics: its Triton backward computes each dQ and each dK/dV "
                                            "block in one program"),
            on={"cpu": Answer(NOT_APPLICABLE, "no atomics: Inductor's C++ kernel on a CPU")}))
    dynamic: bool = False

    def availability(self, device: str) -> str | None:
        return cpu_build_tools_missing() if device == "cpu" else None

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (FLEX_ATTENTION_CALL, CREATE_BLOCK_MASK_CALL, PAGED_ATTENTION_CALL)

    def compile_key(self, case: Case) -> str:
        return compile_key(self.name, case, (case.seq_len, case.kv_seq_len))

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch

        refuse_before_compiling(q, k, v, case.needs_grad)
        flex = compiled_flex_attention(self.dynamic)
        score_mod = workload_score_mod(case, q.device)
        paged = None
        if case.page_size is not None:
            k, v, block_mask, score_mod, mask_extra = paged_inputs(case, k, v, score_mod)
            paged = f", PagedAttention (pages of {case.page_size})"
        else:
            block_mask, mask_extra = flex_block_mask(case, q.device, self.dynamic)
        gqa = case.kv_heads != case.heads
        scale = case.head_dim ** -0.5
        mods = {} if score_mod is None else {"score_mod": score_mod}

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa, **mods)

        # Compiled in the timed grad mode: Dynamo guards on it.
        before = compile_counters()
        start = time.perf_counter()
        leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in (q, k, v))
        with torch.set_grad_enabled(case.needs_grad):
            out = call(*leaves)
            if case.needs_grad:
                torch.autograd.grad(out, leaves, torch.ones_like(out))
        if out.is_cuda:
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        compiled = counted_since(before)
        sparsity = None if block_mask is None else float(block_mask.sparsity())
        if sparsity is not None and not 0 <= sparsity <= 100:
            sparsity = None  # torch's is out of range when Q_LEN is below one 128-row block
        where = "Inductor C++" if q.device.type == "cpu" else "Inductor Triton"
        options = ["block_mask" if block_mask is not None else "no mask"]
        if score_mod is not None:
            options.append(f"score_mod {score_words(case)}")
        if gqa:
            options.append("enable_gqa")
        return Prepared(
            inputs=(q, k, v),
            call=call,
            kernel=(f"torch {self.version()} flex_attention compiled ({where}, dynamic={self.dynamic}, "
                    f"{', '.join(options)}{paged or ''})"),
            extra={"compile_s": compile_s, **compiled, "sparsity_percent": sparsity, **mask_extra},
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        first = first_line(exc)
        if isinstance(exc, (TypeError, AttributeError, NameError, KeyError, IndexError)):
            return None  # a bug of ours, never a refusal
        markers = ("not support", "NYI", "nsupported", "only supports")
        if isinstance(exc, NotImplementedError) or any(m in first for m in markers):
            return f"flex_attention refused: {first}"
        return None


@register
class FlexDynamicBackend(FlexBackend):
    spec = dataclasses.replace(
        FlexBackend.spec, name="flex-dynamic",
        # Bounds-checked loads (IS_DIVISIBLE unknown): a tenth slower on a GPU.
        cost=Cost(cpu=KernelCost(pairs="visible", efficiency_fwd=0.5, efficiency_bwd=0.25),
                  cuda=KernelCost(pairs="visible", efficiency_fwd=0.36, efficiency_bwd=0.25), compiles=True),
        summary=("torch FlexAttention compiled with dynamic=True: one kernel for every sequence length after "
                 "at most two compiles (a bounds-checked kernel, unlike flex's per-shape one)"),
        # The workload's tensors would be captured, hence symbolic under dynamic=True: not mapped.
        capabilities=dataclasses.replace(FlexBackend.capabilities, workload_axes=frozenset()))
    dynamic = True

    def compile_key(self, case: Case) -> str:
        return compile_key(self.name, case, (case.offset,))

    def compiles_before_sharing(self, case: Case) -> int:
        """Two with a block mask (its int lengths specialised, then dynamic), else one."""
        return 2 if workload.has_mask(case) else 1


def compile_key(backend: str, case: Case, lengths: tuple[int, ...]) -> str:
    key = "|".join(str(v) for v in (backend, case.device, case.dtype, case.batch, *lengths, case.heads,
                                    case.kv_heads, case.head_dim, case.causal, case.window, case.needs_grad))
    workload_part = "|".join(f"{axis}={getattr(case, axis)}" for axis in ("doc_lens", "doc_kv_lens",
                                                                          "kv_lens", "softcap", "alibi",
                                                                          "head_dim_v")
                             if getattr(case, axis))
    return f"{key}|{workload_part}" if workload_part else key
