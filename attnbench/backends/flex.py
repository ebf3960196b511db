"""`flex`: PyTorch's FlexAttention, compiled, with a block mask made from GUIDE.md's mask (Case.allowed).

flex_attention only runs fused under torch.compile (eager materialises every score), so it is compiled
once per process with dynamic=False; each new shape recompiles, which `prepare` triggers with a warm
call so that compilation never lands in the timed region. Layout is canonical; GQA/MQA is enable_gqa.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any, Callable

from attnbench.backends.base import Backend, Prepared, first_line
from attnbench.conformance import LibraryCall
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

# A mask materialised eagerly costs about this many bytes per (query, key) pair (bool mask plus the
# int64 index arithmetic of the window term): 12 GB at 32K tokens, 47 GB at 64K. Where that would take
# more than MASK_EAGER_LIMIT bytes on a CPU, or more than MASK_FREE_SHARE of a GPU's free memory, the block
# mask is built by a compiled create_block_mask, which never materialises it. Not always compiled: on an
# H200 (torch 2.11) the compiled build took 19.5 s at 4K (first compile) and did not finish in 120 s at
# 16K, where the eager one takes about a second.
MASK_BYTES_PER_PAIR = 11
MASK_EAGER_LIMIT = 256 << 20
MASK_FREE_SHARE = 0.25
# Every case is a new shape (dynamic=False) or a new mask_mod, hence a recompile: without a higher
# limit, torch._dynamo would silently fall back to eager flex_attention after 8 of them.
RECOMPILE_LIMIT = 1024
_compiled: Callable[..., Any] | None = None
_compiled_mask: Callable[..., Any] | None = None
# What the calls below pass (attnbench.conformance holds these against the installed torch):
# FlexBackend.prepare's `flex(q, k, v, block_mask=, scale=, enable_gqa=)`, and flex_block_mask's call.
FLEX_ATTENTION_CALL = LibraryCall("torch.nn.attention.flex_attention", "flex_attention",
                                  positional=("query", "key", "value"), keywords=("block_mask", "scale", "enable_gqa"))
CREATE_BLOCK_MASK_CALL = LibraryCall("torch.nn.attention.flex_attention", "create_block_mask",
                                     positional=("mask_mod", "B", "H", "Q_LEN", "KV_LEN"), keywords=("device",))


def compiled_flex_attention() -> Callable[..., Any]:
    """torch.compile(flex_attention, dynamic=False), made once per process."""
    global _compiled
    if _compiled is None:
        import torch
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention

        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, name):
                setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
        # The compiled backward donates its saved buffers by default, which forbids retain_graph=True;
        # the correctness check and the `bwd` mode reuse one forward graph, so keep the buffers.
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


def compiled_create_block_mask() -> Callable[..., Any]:
    """torch.compile(create_block_mask), as PyTorch recommends in place of its `_compile=True` flag."""
    global _compiled_mask
    if _compiled_mask is None:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask

        compiled_flex_attention()  # the same recompile limits
        _compiled_mask = torch.compile(create_block_mask, dynamic=False)
    return _compiled_mask


def mask_is_compiled(case: Case, device_type: str, free_bytes: int | None = None) -> bool:
    """Compile the block mask's construction once the eager mask would be large: above MASK_EAGER_LIMIT on
    a CPU, above MASK_FREE_SHARE of the free memory on a GPU (`free_bytes`)."""
    eager = case.seq_len * case.kv_seq_len * MASK_BYTES_PER_PAIR
    if device_type == "cuda" and free_bytes is not None:
        return eager > MASK_FREE_SHARE * free_bytes
    return eager > MASK_EAGER_LIMIT


def flex_block_mask(case: Case, device: torch.device | str) -> tuple[Any, dict[str, Any]]:
    """create_block_mask from Case.allowed (off = KV_LEN - Q_LEN, causal and window), None when unmasked,
    and how it was built: `mask_build` ("compiled" or "eager") and `mask_build_s` (compile included)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    if not case.has_mask:
        return None, {}

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return case.allowed(q_idx, kv_idx)

    kind = torch.device(device).type
    free = torch.cuda.mem_get_info(torch.device(device))[0] if kind == "cuda" else None
    compiled = mask_is_compiled(case, kind, free)
    build = compiled_create_block_mask() if compiled else create_block_mask
    start = time.perf_counter()
    block_mask = build(mask_mod, None, None, case.seq_len, case.kv_seq_len, device=device)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return block_mask, {"mask_build": "compiled" if compiled else "eager", "mask_build_s": time.perf_counter() - start}


@register
class FlexBackend(Backend):
    name = "flex"
    summary = "torch FlexAttention (torch.compile, dynamic=False) with a block mask from the case's mask"

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (FLEX_ATTENTION_CALL, CREATE_BLOCK_MASK_CALL)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch

        flex = compiled_flex_attention()
        block_mask, mask_extra = flex_block_mask(case, q.device)
        gqa = case.kv_heads != case.heads
        scale = case.head_dim ** -0.5

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa)

        # Compiled in the grad mode that is timed (the runner checks in that mode too): grad mode is part
        # of Dynamo's guards, so a call in the other mode would compile a second graph.
        start = time.perf_counter()
        leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in (q, k, v))
        with torch.set_grad_enabled(case.needs_grad):
            out = call(*leaves)  # compiles forward (and, below, backward) for this shape now
            if case.needs_grad:
                torch.autograd.grad(out, leaves, torch.ones_like(out))
        if out.is_cuda:
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        sparsity = None if block_mask is None else float(block_mask.sparsity())
        if sparsity is not None and not 0 <= sparsity <= 100:
            sparsity = None  # torch reports nonsense (e.g. -10823%) when Q_LEN is below one 128-row block
        where = "Inductor C++" if q.device.type == "cpu" else "Inductor Triton"
        return Prepared(
            inputs=(q, k, v),
            call=call,
            kernel=(f"torch {self.version()} flex_attention compiled ({where}, dynamic=False"
                    f"{', block_mask' if block_mask is not None else ', no mask'}{', enable_gqa' if gqa else ''})"),
            extra={"compile_s": compile_s, "sparsity_percent": sparsity, **mask_extra},
        )

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        """FlexAttention's own refusals (unsupported dtype, shape or device) as the skip reason."""
        first = first_line(exc)
        markers = ("not support", "NYI", "nsupported", "only supports")
        if isinstance(exc, NotImplementedError) or any(m in first for m in markers):
            return f"flex_attention refused: {first}"
        return None
