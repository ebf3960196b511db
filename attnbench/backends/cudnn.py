"""`cudnn`: cuDNN's SDPA operation graph, built and run through cuDNN's own Python frontend (nvidia-cudnn-frontend).

PyTorch's `sdpa-cudnn` reaches one slice of cuDNN's attention (dense, top-left causal, what SDPA's arguments say);
this adapter builds the graph a cuDNN user builds (`cudnn.pygraph()`, `graph.sdpa(...)`, `graph.sdpa_backward(...)`)
and times `graph.execute(variant_pack, workspace)` alone. What it maps, read from nvidia-cudnn-frontend 1.32.0
(include/cudnn_frontend/utils/attn_score_modifiers.h sliding_window_mask, node/diagonal_band_mask.h,
node/sdpa_support_surface.h; its test/python/sdpa/fp16_ref.py reference says the same):

- Layout: the graph's tensors are (B, H, S, D) with explicit strides. attnbench hands them over token-major, (B, S, H,
  D) in memory (strides (S·H·D, D, H·D, 1)): the layout a model holds and the one cuDNN's packed (ragged) form needs.
  K/V keep their own heads (native GQA: query head h reads KV head h // (H/KVH), as cuDNN's reference expands them).
- Masks: `diagonal_alignment=BOTTOM_RIGHT` aligns the diagonal per sequence at seq_len_kv − seq_len_q (GUIDE.md's
  off); `diagonal_band_right_bound=R` keeps keys j ≤ i + off + R (inclusive: causal is R = 0, a two-sided window
  R = W); `diagonal_band_left_bound=L` keeps j > i + off − L (exclusive: L is a length counting the diagonal, so
  GUIDE.md's window W is L = W + 1).
- Packed documents: a ragged (THD) graph, one cuDNN batch entry per document, each tensor's `ragged_offset` the
  element offset of its sequences (cu_seqlens · heads · head_dim, int64) with `use_padding_mask` and per-sequence
  `seq_len_q` / `seq_len_kv`. Ragged cache lengths: the contiguous (B, Sk) cache with `use_padding_mask` and each
  request's `seq_len_kv`. A paged cache: `paged_attention_k_table` / `_v_table` (B, 1, pages, 1) int32 from the shared
  shuffled table over the pool viewed as (pages, KVH, page_size, D), with `paged_attention_max_seq_len_kv`
  (forward only: `sdpa_backward` has no page tables).
- ALiBi: `use_alibi_mask` adds slope_h·(j − i) after the scale with the slopes of the graph's query heads
  (cudnn_frontend_utils.h get_alibi_slope: the paper's recipe, GUIDE.md's slopes for those heads). cuDNN takes it
  only with right_bound 0 and refuses it with bottom-right alignment, so it runs top-left causal, which is GUIDE.md's
  mask (and, up to a per-query constant, its −slope·|i + off − j|) only where every sequence has as many queries as
  keys: only there is it mapped.
- No soft-cap (the graph has only a score_mod callback, which cuDNN refuses together with masks).

Pinned: the 1.32 frontend ranks its own Python (CuTe DSL) engines beside cuDNN's backend plans; attnbench selects
the first backend plan (`select_plan`, strict: a decline raises) so the record's kernel is cuDNN's, or the case is
skipped with cuDNN's own reason. Building and planning the graph is setup (`extra.plan_ms`, `extra.compile_s`);
graphs are cached per shape within the process.
"""

from __future__ import annotations

import importlib
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from attnbench import workload
from attnbench.backends import packing
from attnbench.backends.base import (
    Backend,
    Cost,
    KernelCost,
    Prepared,
    Unsupported,
    first_line,
)
from attnbench.backends.flash import warm_up
from attnbench.conformance import LibraryCall
from attnbench.registry import register

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

MODULE = "cudnn"
BINDING = "cudnn._compiled_module"
# The unified graph of nvidia-cudnn-frontend 1.32 (a ranked plan list over cuDNN's backend and the frontend's own
# engines, `select_plan`, `selected_engine`) is what the pinning below relies on.
MIN_FRONTEND = (1, 32)
# Bottom-right causal masks at any length need cuDNN 9.6 (sdpa_support_surface.h: below it, lengths must be
# multiples of 64 and a window needs Sq == Sk).
MIN_BACKEND = 90600
# The heuristic modes cuDNN's own SDPA samples and tests plan with.
HEURISTICS = ("A", "FALLBACK")
# Built graphs kept per process (each holds its cuDNN plans, not its workspace).
CACHE_SIZE = 32

# What prepare's calls pass (attnbench.conformance holds them against the installed frontend). The 1.32 pygraph's
# sdpa / sdpa_backward capture every keyword and forward it, at lowering, to the C++ binding's methods of the same
# name: the keywords are held against those (optional: absent where pygraph is itself the binding).
MASK_KEYWORDS = ("diagonal_alignment", "diagonal_band_left_bound", "diagonal_band_right_bound", "use_alibi_mask")
LENGTH_KEYWORDS = ("use_padding_mask", "seq_len_q", "seq_len_kv", "max_total_seq_len_q", "max_total_seq_len_kv")
PAGED_KEYWORDS = ("paged_attention_k_table", "paged_attention_v_table", "paged_attention_max_seq_len_kv")
SDPA_KEYWORDS = ("name", "attn_scale", "generate_stats", *MASK_KEYWORDS, *LENGTH_KEYWORDS, *PAGED_KEYWORDS)
SDPA_BACKWARD_KEYWORDS = ("name", "attn_scale", *MASK_KEYWORDS, *LENGTH_KEYWORDS)
GRAPH_CALLS = (
    LibraryCall(MODULE, "pygraph", keywords=("io_data_type", "intermediate_data_type", "compute_data_type", "handle")),
    LibraryCall(MODULE, "pygraph.tensor", positional=("self",), keywords=("dim", "stride", "data_type", "name")),
    LibraryCall(MODULE, "pygraph.sdpa", positional=("self", "q", "k", "v"), keywords=SDPA_KEYWORDS),
    LibraryCall(MODULE, "pygraph.sdpa_backward", positional=("self", "q", "k", "v", "o", "dO", "stats"),
                keywords=SDPA_BACKWARD_KEYWORDS),
    LibraryCall(BINDING, "backend_graph.sdpa", positional=("self", "q", "k", "v"),
                keywords=SDPA_KEYWORDS, optional=True),
    LibraryCall(BINDING, "backend_graph.sdpa_backward", positional=("self", "q", "k", "v", "o", "dO", "stats"),
                keywords=SDPA_BACKWARD_KEYWORDS, optional=True),
    LibraryCall(MODULE, "pygraph.validate", positional=("self",)),
    LibraryCall(MODULE, "pygraph.build_operation_graph", positional=("self",)),
    LibraryCall(MODULE, "pygraph.create_execution_plans", positional=("self", "heuristics")),
    LibraryCall(MODULE, "pygraph.get_execution_plan_count", positional=("self",)),
    LibraryCall(MODULE, "pygraph.select_plan", positional=("self", "index")),
    LibraryCall(MODULE, "pygraph.get_plan_name_at_index", positional=("self", "index")),
    LibraryCall(MODULE, "pygraph.check_support", positional=("self",)),
    LibraryCall(MODULE, "pygraph.build_plans", positional=("self",)),
    LibraryCall(MODULE, "pygraph.get_workspace_size", positional=("self",)),
    LibraryCall(MODULE, "pygraph.execute", positional=("self", "tensor_dict", "workspace"), keywords=("handle",)),
    LibraryCall(MODULE, "Tensor.set_output", positional=("self", "value")),
    LibraryCall(MODULE, "Tensor.set_dim", positional=("self", "dim")),
    LibraryCall(MODULE, "Tensor.set_stride", positional=("self", "stride")),
    LibraryCall(MODULE, "Tensor.set_data_type", positional=("self", "dtype")),
    LibraryCall(MODULE, "Tensor.set_ragged_offset", positional=("self", "ragged_offset")),
)

DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16"}


def cudnn_module() -> Any:
    """The `cudnn` module (looked up in sys.modules first, so a test can stand one in). torch is imported first: the
    frontend finds the libcudnn torch loaded when it has none of its own."""
    import torch  # noqa: F401

    return importlib.import_module(MODULE)


# ---- the mapping --------------------------------------------------------------------------------------------------
def mask_arguments(case: Case) -> dict[str, Any]:
    """cuDNN's masking keywords for GUIDE.md's mask (the alignment by its enum member's name).

    causal → right_bound 0; a window W → left_bound W + 1 (cuDNN's left bound is exclusive); without causal the
    window is two-sided, right_bound W. Bottom-right alignment, except with ALiBi, which cuDNN takes top-left only
    (unsupported() admits it only where top-left is the same mask).
    """
    args: dict[str, Any] = {"diagonal_alignment": "TOP_LEFT" if case.alibi else "BOTTOM_RIGHT"}
    if case.causal:
        args["diagonal_band_right_bound"] = 0
    elif case.window is not None:
        args["diagonal_band_right_bound"] = case.window
    if case.window is not None:
        args["diagonal_band_left_bound"] = case.window + 1
    if case.alibi:
        args["use_alibi_mask"] = True
    return args


def token_major_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of (B, H, S, D) dims held token-major, as (B, S, H, D) in memory."""
    b, h, s, d = dims
    return (s * h * d, d, h * d, 1)


def to_token_major(t: torch.Tensor) -> torch.Tensor:
    """Canonical (B, H, S, D) to (B, S, H, D) memory, contiguous (a differentiable copy)."""
    return t.transpose(1, 2).contiguous()


def route(case: Case) -> str:
    """How the case's sequences reach cuDNN: "paged", "ragged" (packed documents), "padded" (ragged cache lengths
    in the contiguous cache) or "dense"."""
    if case.page_size is not None:
        return "paged"
    if case.doc_lens is not None:
        return "ragged"
    if case.kv_lens is not None:
        return "padded"
    return "dense"


@dataclass(frozen=True)
class Operand:
    """One tensor of the graph: its dims and strides as cuDNN reads them, its data type's name, and the name of
    the operand holding its ragged offsets (None: not ragged)."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    ragged: str | None = None


@dataclass(frozen=True)
class Spec:
    """Everything a built graph depends on (the cache key): operands by role, the keywords of the sdpa node.
    Runtime values (lengths, offsets, page tables) are not in it: they travel in the variant pack."""

    io: str
    operands: tuple[tuple[str, Operand], ...]
    keywords: tuple[tuple[str, Any], ...]
    training: bool

    def operand(self, role: str) -> Operand:
        return dict(self.operands)[role]

    def has(self, role: str) -> bool:
        return role in dict(self.operands)


@dataclass
class Layout:
    """A case laid out for cuDNN: the spec, the native inputs, the runtime tensors of the variant pack, and how
    outputs are allocated and turned back into canonical (B, H, Sq, Dv)."""

    spec: Spec
    inputs: tuple[torch.Tensor, ...]
    runtime: dict[str, torch.Tensor]
    out_shape: tuple[int, ...]
    stats_shape: tuple[int, ...]
    to_canonical: Callable[[torch.Tensor], torch.Tensor]
    words: list[str] = field(default_factory=list)


def layout(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Layout:
    """The graph's operands for `case` and its inputs in cuDNN's layout (made by differentiable ops)."""
    import torch

    io = DTYPES[case.dtype]
    h, kvh, d, dv = case.heads, case.kv_heads, case.head_dim, case.v_dim
    device = q.device
    keywords: dict[str, Any] = {"attn_scale": case.head_dim ** -0.5, **mask_arguments(case)}
    operands: dict[str, Operand] = {}
    runtime: dict[str, torch.Tensor] = {}
    how = route(case)
    words: list[str] = []

    def lengths(q_lens: tuple[int, ...], kv_lens: tuple[int, ...]) -> None:
        keywords["use_padding_mask"] = True
        for role, values in (("seq_len_q", q_lens), ("seq_len_kv", kv_lens)):
            operands[role] = Operand((len(values), 1, 1, 1), (1, 1, 1, 1), "INT32")
            runtime[role] = packing.int32(values, device).view(-1, 1, 1, 1)

    if how == "ragged":
        seqs = packing.varlen(case)
        n, sq, sk = seqs.sequences, seqs.max_q, seqs.max_k
        # contiguous: packing's reshape is a view of the canonical memory where it can be (one batch row), and
        # cuDNN reads memory at the declared strides, not the tensor's
        inputs = tuple(t.contiguous() for t in (packing.pack_q(q), packing.pack_kv(k, case), packing.pack_kv(v, case)))
        lens = tuple(b - a for a, b in zip(seqs.cu_q, seqs.cu_q[1:]))
        lengths(lens, seqs.kv_lens)
        keywords["max_total_seq_len_q"], keywords["max_total_seq_len_kv"] = seqs.cu_q[-1], seqs.cu_k[-1]
        for role, cu, width in (("q", seqs.cu_q, h * d), ("k", seqs.cu_k, kvh * d), ("v", seqs.cu_k, kvh * dv),
                                ("o", seqs.cu_q, h * dv), ("stats", seqs.cu_q, h)):
            operands[f"{role}_offset"] = Operand((n + 1, 1, 1, 1), (1, 1, 1, 1), "INT64")
            runtime[f"{role}_offset"] = ragged_offsets(cu, width, device)
        dims = {"q": (n, h, sq, d), "k": (n, kvh, sk, d), "v": (n, kvh, sk, dv), "o": (n, h, sq, dv),
                "stats": (n, h, sq, 1)}
        for role, dim in dims.items():
            operands[role] = Operand(dim, token_major_strides(dim), "FLOAT" if role == "stats" else io,
                                     ragged=f"{role}_offset")
        total_q = seqs.cu_q[-1]
        out_shape, stats_shape = (total_q, h, dv), (total_q, h, 1)
        to_canonical: Callable[[torch.Tensor], torch.Tensor] = lambda out: packing.unpack_out(out, case)  # noqa: E731
        words.append(f"ragged, {n} sequences")
    else:
        b, sq, sk = case.batch, case.seq_len, case.kv_seq_len
        native_q = to_token_major(q)
        if how == "paged":
            pages = workload.pages(case)
            pools = tuple(workload.to_pages(t, pages) for t in (k, v))  # (pages, P, KVH, D)
            inputs = (native_q, *pools)
            num, p = pages.num_pages, pages.page_size
            kv_dims = {"k": (num, kvh, p, d), "v": (num, kvh, p, dv)}  # each page read as (KVH, P, D)
            table = packing.block_table(pages, device)  # (B, pages) int32, unused entries → page 0 (never read)
            width = table.shape[1]
            for role in ("k_table", "v_table"):
                operands[role] = Operand((b, 1, width, 1), (width, width, 1, 1), "INT32")
                runtime[role] = table.view(b, 1, width, 1)
            keywords["paged_attention_max_seq_len_kv"] = sk
            lengths((sq,) * b, workload.request_kv_lens(case))
            words.append(f"paged K/V, pages of {p}")
        else:
            inputs = (native_q, to_token_major(k), to_token_major(v))
            kv_dims = {"k": (b, kvh, sk, d), "v": (b, kvh, sk, dv)}
            if how == "padded":
                lengths((sq,) * b, workload.request_kv_lens(case))
                words.append("padding mask (each request's kv length)")
        dims = {"q": (b, h, sq, d), **kv_dims, "o": (b, h, sq, dv)}
        for role, dim in dims.items():
            operands[role] = Operand(dim, token_major_strides(dim), io)
        operands["stats"] = Operand((b, h, sq, 1), (h * sq, sq, 1, 1), "FLOAT")
        out_shape, stats_shape = (b, sq, h, dv), (b, h, sq, 1)
        to_canonical = lambda out: out.transpose(1, 2)  # noqa: E731
    spec = Spec(io, tuple(operands.items()), tuple(keywords.items()), case.needs_grad)
    return Layout(spec, inputs, runtime, out_shape, stats_shape, to_canonical, words)


def ragged_offsets(cu: tuple[int, ...], width: int, device: Any) -> torch.Tensor:
    """cuDNN's ragged offsets: the element offset of each sequence's first token (cu_seqlens · elements per token),
    (N + 1, 1, 1, 1) int64."""
    import torch

    return torch.tensor([c * width for c in cu], dtype=torch.int64, device=device).view(-1, 1, 1, 1)


# ---- building and pinning the graphs ------------------------------------------------------------------------------
@dataclass
class Built:
    """A built, pinned graph and its tensors by role."""

    graph: Any
    tensors: dict[str, Any]
    plan: str
    plan_s: float
    compile_s: float


_CACHE: OrderedDict[tuple[Any, ...], Built] = OrderedDict()


def clear_cache() -> None:
    """Forget every built graph (tests swap the `cudnn` module)."""
    _CACHE.clear()


def built(cudnn: Any, spec: Spec, backward: bool, handle: Any, device: Any) -> tuple[Built, bool]:
    """The forward (or backward) graph for `spec`, from this process's cache or built now; and whether it was
    cached."""
    key = (id(cudnn), str(device), id(handle), spec, backward)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    result = build_graph(cudnn, spec, backward, handle)
    _CACHE[key] = result
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return result, False


def build_graph(cudnn: Any, spec: Spec, backward: bool, handle: Any) -> Built:
    """Declare the sdpa (or sdpa_backward) graph of `spec`, plan it and pin cuDNN's backend."""
    dtype = cudnn.data_type
    graph = cudnn.pygraph(io_data_type=getattr(dtype, spec.io), intermediate_data_type=dtype.FLOAT,
                          compute_data_type=dtype.FLOAT, handle=handle)
    operands = dict(spec.operands)
    tensors: dict[str, Any] = {}

    def declare(role: str, operand: Operand) -> Any:
        t = graph.tensor(dim=list(operand.dims), stride=list(operand.strides),
                         data_type=getattr(dtype, operand.dtype), name=role)
        tensors[role] = t
        return t

    def shape_output(role: str, t: Any, operand: Operand) -> None:
        t.set_output(True).set_dim(list(operand.dims)).set_stride(list(operand.strides))
        t.set_data_type(getattr(dtype, operand.dtype))
        if operand.ragged is not None:
            t.set_ragged_offset(tensors[operand.ragged])
        tensors[role] = t

    inputs = ("q", "k", "v", "o", "dO", "stats") if backward else ("q", "k", "v")
    outputs = ("q", "k", "v") if backward else ("o", "stats") if spec.training else ("o",)
    used = {operands["o" if r == "dO" else r].ragged for r in (*inputs, *outputs)} - {None}
    used |= {"seq_len_q", "seq_len_kv"} | (set() if backward else {"k_table", "v_table"})
    for role, operand in operands.items():  # the runtime tensors first: the ragged ones point at them
        if role in used:
            declare(role, operand)
    for role in inputs:
        operand = operands["o" if role == "dO" else role]
        t = declare(role, operand)
        if operand.ragged is not None:
            t.set_ragged_offset(tensors[operand.ragged])
    keywords = dict(spec.keywords)
    keywords["diagonal_alignment"] = getattr(cudnn.diagonal_alignment, keywords["diagonal_alignment"])
    if "use_padding_mask" in keywords:
        keywords["seq_len_q"], keywords["seq_len_kv"] = tensors["seq_len_q"], tensors["seq_len_kv"]
    if backward:
        keywords.pop("paged_attention_max_seq_len_kv", None)  # unsupported() keeps pages out of backward
        dq, dk, dv = graph.sdpa_backward(*(tensors[r] for r in inputs), name="sdpa_backward", **keywords)
        for role, t in (("dQ", dq), ("dK", dk), ("dV", dv)):
            shape_output(role, t, operands[role[1].lower()])
    else:
        if "k_table" in tensors:
            keywords["paged_attention_k_table"] = tensors["k_table"]
            keywords["paged_attention_v_table"] = tensors["v_table"]
        o, stats = graph.sdpa(tensors["q"], tensors["k"], tensors["v"], name="sdpa",
                              generate_stats=spec.training, **keywords)
        shape_output("o", o, operands["o"])
        if spec.training:
            shape_output("stats", stats, operands["stats"])
    plan, plan_s, compile_s = pin_backend(cudnn, graph)
    return Built(graph, tensors, plan, plan_s, compile_s)


def pin_backend(cudnn: Any, graph: Any) -> tuple[str, float, float]:
    """Plan `graph` and pin the first of cuDNN's backend plans; build it. Returns its name, the seconds spent
    planning and building.

    The 1.32 frontend ranks its own Python engines in the same list (`selected_engine` is None for a backend
    entry); a graph only they serve is not cuDNN's SDPA and is skipped with the backend's reason.
    """
    start = time.perf_counter()
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([getattr(cudnn.heur_mode, mode) for mode in HEURISTICS])
    count = graph.get_execution_plan_count()
    for index in range(count):
        graph.select_plan(index)  # strict: build_plans raises instead of moving on to another plan
        if graph.selected_engine is None:
            break
    else:
        declined = getattr(graph, "_backend_declined", None)  # the frontend's record of the backend's refusal
        others = ", ".join(graph.get_plan_name_at_index(i) for i in range(count))
        raise Unsupported("cuDNN's backend has no plan for this graph"
                          + (f" ({first_line(declined)})" if declined is not None else "")
                          + f"; only the frontend's own engines offered one ({others}), which is not cuDNN's SDPA")
    graph.check_support()
    planned = time.perf_counter()
    graph.build_plans()
    return graph.get_plan_name_at_index(index), planned - start, time.perf_counter() - planned


# ---- running them -------------------------------------------------------------------------------------------------
class Runner:
    """Executes the built graphs: the forward into a fresh output (and softmax stats when training), the backward
    into fresh gradients. Nothing but `graph.execute` and the outputs' allocation happens per call."""

    def __init__(self, cudnn: Any, lay: Layout, forward: Built, backward: Built | None, workspace: torch.Tensor,
                 handle: Any, padded: bool) -> None:
        self.lay, self.fwd, self.bwd = lay, forward, backward
        self.workspace, self.handle, self.padded = workspace, handle, padded
        self.fixed_fwd = {forward.tensors[role]: t for role, t in lay.runtime.items() if role in forward.tensors}
        self.fixed_bwd = ({backward.tensors[role]: t for role, t in lay.runtime.items() if role in backward.tensors}
                          if backward is not None else {})

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        import torch

        t = self.fwd.tensors
        out = torch.empty(self.lay.out_shape, dtype=q.dtype, device=q.device)
        pack = {**self.fixed_fwd, t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: out}
        stats = None
        if "stats" in t:
            stats = torch.empty(self.lay.stats_shape, dtype=torch.float32, device=q.device)
            pack[t["stats"]] = stats
        self.fwd.graph.execute(pack, self.workspace, handle=self.handle)
        return out, stats

    def backward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
                 stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        assert self.bwd is not None
        t = self.bwd.tensors
        # With a padding mask the keys past a request's length are not cuDNN's to write: their gradient is zero.
        alloc = torch.zeros_like if self.padded else torch.empty_like
        dq, dk, dv = torch.empty_like(q), alloc(k), alloc(v)
        pack = {**self.fixed_bwd, t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: out, t["dO"]: dout.contiguous(),
                t["stats"]: stats, t["dQ"]: dq, t["dK"]: dk, t["dV"]: dv}
        self.bwd.graph.execute(pack, self.workspace, handle=self.handle)
        return dq, dk, dv


def attention_function() -> Any:
    """The autograd Function over a Runner: forward saves O and the softmax stats, backward runs sdpa_backward."""
    import torch

    class CudnnSdpa(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, runner: Runner, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out, stats = runner.forward(q, k, v)
            ctx.runner = runner
            ctx.save_for_backward(q, k, v, out, stats)
            return out

        @staticmethod
        def backward(ctx: Any, dout: torch.Tensor) -> tuple[None, torch.Tensor, torch.Tensor, torch.Tensor]:
            q, k, v, out, stats = ctx.saved_tensors
            return (None, *ctx.runner.backward(q, k, v, out, dout, stats))

    return CudnnSdpa


_HANDLES: dict[tuple[int, str, int], Any] = {}


def handle_for(cudnn: Any, device: Any) -> Any:
    """A cuDNN handle on torch's current stream of `device` (CUDA events time that stream); None off CUDA."""
    if getattr(device, "type", str(device)) != "cuda":
        return None
    import torch

    stream = torch.cuda.current_stream(device).cuda_stream
    key = (id(cudnn), str(device), stream)
    if key not in _HANDLES:
        handle = cudnn.create_handle()
        cudnn.set_stream(handle, stream)
        _HANDLES[key] = handle
    return _HANDLES[key]


@register
class CudnnBackend(Backend):
    name = "cudnn"
    # By analogy with SDPA→cuDNN (the same cuDNN engines), not yet fitted: its forward reached 630 TFLOP/s at 16K on
    # the H200, ~0.6 of the ~989 TFLOP/s dense bf16 peak; its backward ~0.45 (532 TFLOP/s fwd+bwd).
    cost = Cost(cuda=KernelCost("visible", 0.6, 0.45))
    summary = ("cuDNN's SDPA graph through its own frontend (nvidia-cudnn-frontend): bottom-right masks, windows, "
               "ragged, padded and paged K/V; fp16/bf16, native GQA, fwd and bwd")
    library = "nvidia-cudnn-frontend"
    devices = ("cuda",)
    install_hint = ("pip install nvidia-cudnn-frontend  (or 'attnbench[cudnn]'; the cuDNN library itself comes with "
                    "a CUDA build of torch)")
    workload_axes = frozenset({"documents", "kv_lengths", "page_size", "alibi", "head_dim_v"})

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return GRAPH_CALLS

    def availability(self, device: str) -> str | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cudnn = cudnn_module()
        except ImportError as exc:
            return f"nvidia-cudnn-frontend is not installed (cannot import cudnn: {first_line(exc)})"
        except Exception as exc:  # noqa: BLE001 - a frontend that fails to import any other way is not usable
            return f"cudnn does not import here ({type(exc).__name__}: {first_line(exc)})"
        version = str(getattr(cudnn, "__version__", "0"))
        if version_tuple(version) < MIN_FRONTEND:
            need = ".".join(map(str, MIN_FRONTEND))
            return f"nvidia-cudnn-frontend {version} is older than {need}, whose graph API attnbench maps"
        if device not in self.devices:
            return "needs CUDA (cuDNN's SDPA has no CPU engine)"
        import torch

        if device == "cuda":
            if not torch.cuda.is_available():
                return "needs CUDA (torch.cuda.is_available() is False)"
            cap = torch.cuda.get_device_capability()
            if cap < (8, 0):
                return f"cuDNN's SDPA needs compute capability ≥ 8.0 (this GPU: {cap[0]}.{cap[1]})"
        try:
            backend = int(cudnn.backend_version())
        except Exception as exc:  # noqa: BLE001 - RuntimeError "Unable to find symbol cudnnGetVersion": no libcudnn
            return f"the cuDNN library does not load for the frontend ({first_line(exc)})"
        if backend < MIN_BACKEND:
            return (f"cuDNN {backend_string(backend)} is older than {backend_string(MIN_BACKEND)} (bottom-right "
                    "causal masks at any length)")
        return None

    def unsupported(self, case: Case) -> str | None:
        if case.dtype not in DTYPES:
            return f"{case.dtype} is not supported (cuDNN's SDPA takes float16 or bfloat16)"
        if case.softcap is not None:
            return ("cuDNN's SDPA graph has no soft-cap (only a score_mod callback, which cuDNN refuses together "
                    "with masks)")
        if reason := packing.documents_in_pages(case, "cuDNN"):
            return reason
        if case.page_size is not None and case.needs_grad:
            return "cuDNN's sdpa_backward takes no page tables: a paged cache is forward only"
        if case.alibi:
            if (case.tp or 1) > 1:
                return ("cuDNN's ALiBi slopes are fixed for the graph's query heads; a tensor-parallel share needs "
                        "the whole model's slopes: alibi with tp is not mapped")
            if not case.causal:
                return "cuDNN takes ALiBi only with a causal mask (diagonal_band_right_bound must be 0)"
            if case.kv_lens is not None or (case.doc_lens is None and case.seq_len != case.kv_seq_len):
                return ("cuDNN refuses ALiBi with bottom-right alignment, and its top-left causal mask is GUIDE.md's "
                        "only where every sequence has as many queries as keys")
        return None

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch

        cudnn = cudnn_module()
        lay = layout(case, q, k, v)
        handle = handle_for(cudnn, q.device)
        fwd, fwd_cached = built(cudnn, lay.spec, False, handle, q.device)
        bwd, bwd_cached = built(cudnn, lay.spec, True, handle, q.device) if case.needs_grad else (None, True)
        sizes = [b.graph.get_workspace_size() for b in (fwd, bwd) if b is not None]
        workspace = torch.empty(max(sizes), dtype=torch.uint8, device=q.device)
        runner = Runner(cudnn, lay, fwd, bwd, workspace, handle, padded=route(case) in ("padded", "paged"))
        if case.needs_grad:
            apply = attention_function().apply

            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return apply(runner, q, k, v)
        else:
            def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return runner.forward(q, k, v)[0]

        new = [b for b, cached in ((fwd, fwd_cached), (bwd, bwd_cached)) if b is not None and not cached]
        first_call_s = warm_up(call, lay.inputs, case.needs_grad)  # any lazy work of a first execute, outside timing
        extra: dict[str, Any] = {
            "plan_ms": sum(b.plan_s for b in new) * 1e3,
            "compile_s": sum(b.compile_s for b in new) + first_call_s,
            "graph_cache": "hit" if not new else "built",
            "cudnn_plan": fwd.plan,
            "cudnn_backend_version": backend_string(int(cudnn.backend_version())),
            "workspace_bytes": int(workspace.numel()),
        }
        if bwd is not None:
            extra["cudnn_backward_plan"] = bwd.plan
        return Prepared(
            inputs=lay.inputs,
            call=call,
            kernel=self.kernel_name(cudnn, case, lay, fwd, bwd),
            to_canonical=lay.to_canonical,
            extra=extra,
        )

    def kernel_name(self, cudnn: Any, case: Case, lay: Layout, fwd: Built, bwd: Built | None) -> str:
        """`cudnn-frontend <ver> / cuDNN <ver> sdpa (<mask>, <layout>, ..., plan <name>)`."""
        keywords = dict(lay.spec.keywords)
        right = keywords.get("diagonal_band_right_bound")
        left = keywords.get("diagonal_band_left_bound")
        align = "bottom-right" if keywords["diagonal_alignment"] == "BOTTOM_RIGHT" else "top-left"
        if case.causal:
            words = [f"{align} causal"]
        elif right is not None:
            words = [f"{align} two-sided"]
        else:
            words = ["no mask"]
        if left is not None or (right is not None and right != 0):
            words.append(f"window (left_bound={left}, right_bound={right})")
        words += lay.words
        if case.alibi:
            words.append("alibi")
        if case.kv_heads != case.heads:
            words.append(f"native GQA {case.heads}/{case.kv_heads}")
        if case.head_dim_v is not None:
            words.append(f"d_qk {case.head_dim} / d_v {case.v_dim}")
        words.append(f"plan {fwd.plan}" + (f", backward plan {bwd.plan}" if bwd is not None else ""))
        backend = backend_string(int(cudnn.backend_version()))
        name = "sdpa + sdpa_backward" if bwd is not None else "sdpa"
        return f"cudnn-frontend {cudnn.__version__} / cuDNN {backend} {name} ({', '.join(words)})"

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        """cuDNN's own refusal: the frontend raises cudnnGraphNotSupportedError for a graph it or the backend does
        not support (anything else is an error)."""
        if any(cls.__name__ == "cudnnGraphNotSupportedError" for cls in type(exc).__mro__):
            return f"cuDNN refused: {first_line(exc)}"
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """(1, 32, 0) from "1.32.0" (a pre-release tail ignored)."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def backend_string(version: int) -> str:
    """cuDNN 9's version number as text: 91900 → "9.19.0"."""
    return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
