"""cuDNN's SDPA graph built, pinned to cuDNN's backend plan, cached per shape in the process, and run."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Unsupported, first_line

if TYPE_CHECKING:
    import torch


from attnbench.backends.cudnn_layout import Layout, Operand, Spec

# The heuristic modes cuDNN's SDPA samples plan with.
HEURISTICS = ("A", "FALLBACK")
CACHE_SIZE = 32


@dataclass
class Built:

    graph: Any
    tensors: dict[str, Any]
    plan: str
    plan_s: float
    compile_s: float


_CACHE: OrderedDict[tuple[Any, ...], Built] = OrderedDict()


def clear_cache() -> None:
    """Forget every built graph (tests swap the `cudnn` module)."""
    _CACHE.clear()


def deterministic_asked() -> bool:
    """Whether PyTorch's deterministic mode is on (attnbench.verify.determinism)."""
    import torch

    return torch.are_deterministic_algorithms_enabled()


def built(cudnn: Any, spec: Spec, backward: bool, handle: Any, device: Any) -> tuple[Built, bool]:
    """The forward (or backward) graph for `spec`, cached per process; and whether it was cached."""
    key = (id(cudnn), str(device), id(handle), spec, backward, deterministic_asked() if backward else False)
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
    declared = _Declared(graph, dtype, dict(spec.operands))
    inputs = ("q", "k", "v", "o", "dO", "stats") if backward else ("q", "k", "v")
    if backward:
        outputs = ("q", "k", "v")
    elif spec.training:
        outputs = ("o", "stats")
    else:
        outputs = ("o",)
    declared.inputs(inputs, outputs, backward)
    keywords = dict(spec.keywords)
    keywords["diagonal_alignment"] = getattr(cudnn.diagonal_alignment, keywords["diagonal_alignment"])
    if "use_padding_mask" in keywords:
        keywords["seq_len_q"] = declared.tensors["seq_len_q"]
        keywords["seq_len_kv"] = declared.tensors["seq_len_kv"]
    if backward:
        _sdpa_backward(declared, inputs, keywords)
    else:
        _sdpa_forward(declared, spec.training, keywords)
    plan, plan_s, compile_s = pin_backend(cudnn, graph)
    return Built(graph, declared.tensors, plan, plan_s, compile_s)


class _Declared:

    def __init__(self, graph: Any, dtype: Any, operands: dict[str, Operand]) -> None:
        self.graph, self.dtype, self.operands = graph, dtype, operands
        self.tensors: dict[str, Any] = {}

    def declare(self, role: str, operand: Operand) -> Any:
        t = self.graph.tensor(dim=list(operand.dims), stride=list(operand.strides),
                              data_type=getattr(self.dtype, operand.dtype), name=role)
        self.tensors[role] = t
        return t

    def output(self, role: str, t: Any, operand: Operand) -> None:
        t.set_output(True).set_dim(list(operand.dims)).set_stride(list(operand.strides))
        t.set_data_type(getattr(self.dtype, operand.dtype))
        if operand.ragged is not None:
            t.set_ragged_offset(self.tensors[operand.ragged])
        self.tensors[role] = t

    def inputs(self, inputs: tuple[str, ...], outputs: tuple[str, ...], backward: bool) -> None:
        """The runtime tensors first (ragged inputs point at them), then the inputs."""
        operands = self.operands
        used = {operands["o" if r == "dO" else r].ragged for r in (*inputs, *outputs)} - {None}
        used |= {"seq_len_q", "seq_len_kv"} | (set() if backward else {"k_table", "v_table"})
        for role, operand in operands.items():
            if role in used:
                self.declare(role, operand)
        for role in inputs:
            operand = operands["o" if role == "dO" else role]
            t = self.declare(role, operand)
            if operand.ragged is not None:
                t.set_ragged_offset(self.tensors[operand.ragged])


def _sdpa_backward(declared: _Declared, inputs: tuple[str, ...], keywords: dict[str, Any]) -> None:
    keywords.pop("paged_attention_max_seq_len_kv", None)  # unsupported() keeps pages out of backward
    if deterministic_asked():  # attnbench.verify.determinism: the backward's own option
        keywords["use_deterministic_algorithm"] = True
    tensors = declared.tensors
    dq, dk, dv = declared.graph.sdpa_backward(*(tensors[r] for r in inputs), name="sdpa_backward", **keywords)
    for role, t in (("dQ", dq), ("dK", dk), ("dV", dv)):
        declared.output(role, t, declared.operands[role[1].lower()])


def _sdpa_forward(declared: _Declared, training: bool, keywords: dict[str, Any]) -> None:
    tensors = declared.tensors
    if "k_table" in tensors:
        keywords["paged_attention_k_table"] = tensors["k_table"]
        keywords["paged_attention_v_table"] = tensors["v_table"]
    o, stats = declared.graph.sdpa(tensors["q"], tensors["k"], tensors["v"], name="sdpa",
                                   generate_stats=training, **keywords)
    declared.output("o", o, declared.operands["o"])
    if training:
        declared.output("stats", stats, declared.operands["stats"])


def pin_backend(cudnn: Any, graph: Any) -> tuple[str, float, float]:
    """Plan `graph`, pin and build the first backend plan (`selected_engine` None: the frontend's own engines
    are not cuDNN's SDPA); its name and the seconds planning and building."""
    start = time.perf_counter()
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([getattr(cudnn.heur_mode, mode) for mode in HEURISTICS])
    count = graph.get_execution_plan_count()
    for index in range(count):
        graph.select_plan(index)  # strict: build_plans raises
        if graph.selected_engine is None:
            break
    else:
        declined = getattr(graph, "_backend_declined", None)  # the frontend's record of the backend's refusal
        others = ", ".join(graph.get_plan_name_at_index(i) for i in range(count))
        raise Unsupported("cuDNN's backend has no plan for this graph"
                          + (f" ({first_line(declined)})" if declined is not None else "")
                          + f"; only the frontend's own engines offered one ({others}), "
                            "which is not cuDNN's SDPA")
    graph.check_support()
    planned = time.perf_counter()
    graph.build_plans()
    return graph.get_plan_name_at_index(index), planned - start, time.perf_counter() - planned


class Runner:
    """Runs the built graphs into fresh outputs: `graph.execute` and the allocation only."""

    def __init__(self, cudnn: Any, lay: Layout, forward: Built, backward: Built | None,
                 workspace: torch.Tensor, handle: Any, padded: bool) -> None:
        self.lay, self.fwd, self.bwd = lay, forward, backward
        self.workspace, self.handle, self.padded = workspace, handle, padded
        self.fixed_fwd = {forward.tensors[role]: t for role, t in lay.runtime.items()
                          if role in forward.tensors}
        self.fixed_bwd = ({backward.tensors[role]: t for role, t in lay.runtime.items()
                           if role in backward.tensors}
                          if backward is not None else {})

    def forward(self, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
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

    def backward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 dout: torch.Tensor, stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        import torch

        assert self.bwd is not None
        t = self.bwd.tensors
        # With a padding mask cuDNN does not write keys past a request's length: zero gradients.
        alloc = torch.zeros_like if self.padded else torch.empty_like
        dq, dk, dv = torch.empty_like(q), alloc(k), alloc(v)
        pack = {**self.fixed_bwd, t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: out, t["dO"]: dout.contiguous(),
                t["stats"]: stats, t["dQ"]: dq, t["dK"]: dk, t["dV"]: dv}
        self.bwd.graph.execute(pack, self.workspace, handle=self.handle)
        return dq, dk, dv


def attention_function() -> Any:
    """The autograd Function over a Runner: forward saves O and the stats, backward runs sdpa_backward."""
    import torch

    class CudnnSdpa(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, runner: Runner, q: torch.Tensor, k: torch.Tensor,
                    v: torch.Tensor) -> torch.Tensor:
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
    """A cuDNN handle on torch's current stream (the timed one); None off CUDA."""
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
