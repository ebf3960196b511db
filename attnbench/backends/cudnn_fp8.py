"""`cudnn-fp8`: cuDNN's FP8 SDPA forward (nvidia-cudnn-frontend 1.32 `graph.sdpa_fp8`;
docs/backends.md#cudnn-fp8) over the cudnn backend's layouts and masks. From the binding and
test/python/sdpa/fp8.py, fp8_ref.py: every factor a (1, 1, 1, 1) float tensor (per-tensor only); bounds named
`left_bound` / `right_bound`; returns [O, Stats, Amax_S, Amax_O]; P·scale_s rounded to the input's FP8 type,
P·V times descale_s and descale_v; O float16 (test_mhas_v2.py). """

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Prepared, warm_up
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.cudnn import (
    MODULE,
    CudnnBackend,
    backend_string,
    cudnn_module,
)
from attnbench.backends.cudnn_graph import Built, handle_for, pin_backend
from attnbench.backends.cudnn_layout import Operand, Spec, layout
from attnbench.backends.registry import register
from attnbench.backends.spec import NOT_APPLICABLE, always
from attnbench.core.quant import Numerics

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Scales

BINDING = "cudnn._compiled_module"
IO = {"float8_e4m3fn": "FP8_E4M3", "float8_e5m2": "FP8_E5M2"}
OUT = "HALF"
# scale_s: helpers.get_fp8_scale_factor(1.0, dtype).
S_SCALE = {"float8_e4m3fn": 64.0, "float8_e5m2": 8192.0}
# The frontend's FP8 test: "SDPA FP8 requires cuDNN 9.14.0 or higher".
MIN_FP8_BACKEND = 91400
FACTORS = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
AMAX = ("amax_s", "amax_o")
# sdpa's keyword → sdpa_fp8's
RENAMED = {"diagonal_band_left_bound": "left_bound", "diagonal_band_right_bound": "right_bound"}
FP8_KEYWORDS = ("name", "attn_scale", "generate_stats", "diagonal_alignment", "left_bound", "right_bound",
                "use_alibi_mask", "use_padding_mask", "seq_len_q", "seq_len_kv", "max_total_seq_len_q",
                "max_total_seq_len_kv", "paged_attention_k_table", "paged_attention_v_table",
                "paged_attention_max_seq_len_kv")
FP8_CALLS = (
    LibraryCall(MODULE, "pygraph.sdpa_fp8", positional=("self", "q", "k", "v", *FACTORS),
                keywords=FP8_KEYWORDS),
    LibraryCall(BINDING, "backend_graph.sdpa_fp8", positional=("self", "q", "k", "v", *FACTORS),
                keywords=FP8_KEYWORDS, optional=True),
)
CACHE_SIZE = 16
_CACHE: OrderedDict[tuple[Any, ...], Built] = OrderedDict()


def fp8_spec(spec: Spec, fmt: str) -> Spec:
    """The cudnn spec in FP8: Q, K, V in `fmt`, O float16, factor and amax operands,
    sdpa_fp8's bound names."""
    operands = dict(spec.operands)
    for role in ("q", "k", "v"):
        operands[role] = dataclasses.replace(operands[role], dtype=IO[fmt])
    operands["o"] = dataclasses.replace(operands["o"], dtype=OUT)
    for role in (*FACTORS, *AMAX):
        operands[role] = Operand((1, 1, 1, 1), (1, 1, 1, 1), "FLOAT")
    keywords = tuple((RENAMED.get(key, key), value) for key, value in spec.keywords)
    return Spec(IO[fmt], tuple(operands.items()), keywords, training=False)


def factor_values(scales: Scales, fmt: str) -> dict[str, float]:
    """The six factors by operand: the per-tensor descales, P's scale and its inverse, O's 1."""
    def value(t: Any) -> float:
        return float(t.reshape(()))

    return {"descale_q": value(scales.q), "descale_k": value(scales.k), "descale_v": value(scales.v),
            "descale_s": 1.0 / S_SCALE[fmt], "scale_s": S_SCALE[fmt], "scale_o": 1.0}


def build_fp8(cudnn: Any, spec: Spec, handle: Any) -> Built:
    """Declare the sdpa_fp8 graph of `spec`, plan it and pin cuDNN's backend."""
    dtype = cudnn.data_type
    graph = cudnn.pygraph(io_data_type=getattr(dtype, spec.io), intermediate_data_type=dtype.FLOAT,
                          compute_data_type=dtype.FLOAT, handle=handle)
    operands = dict(spec.operands)
    tensors: dict[str, Any] = {}
    used = {operands[r].ragged for r in ("q", "k", "v", "o")} - {None}
    used |= {"seq_len_q", "seq_len_kv", "k_table", "v_table", "q", "k", "v", *FACTORS}
    for role, operand in operands.items():  # runtime tensors first: ragged ones point at them
        if role in used:
            tensors[role] = graph.tensor(dim=list(operand.dims), stride=list(operand.strides),
                                         data_type=getattr(dtype, operand.dtype), name=role)
    for role in ("q", "k", "v"):
        if operands[role].ragged is not None:
            tensors[role].set_ragged_offset(tensors[operands[role].ragged])
    keywords = dict(spec.keywords)
    keywords["diagonal_alignment"] = getattr(cudnn.diagonal_alignment, keywords["diagonal_alignment"])
    if "use_padding_mask" in keywords:
        keywords["seq_len_q"], keywords["seq_len_kv"] = tensors["seq_len_q"], tensors["seq_len_kv"]
    if "k_table" in tensors:
        keywords["paged_attention_k_table"] = tensors["k_table"]
        keywords["paged_attention_v_table"] = tensors["v_table"]
    o, _, amax_s, amax_o = graph.sdpa_fp8(*(tensors[r] for r in ("q", "k", "v", *FACTORS)), name="sdpa_fp8",
                                          generate_stats=False, **keywords)
    for role, t in (("o", o), ("amax_s", amax_s), ("amax_o", amax_o)):
        operand = operands[role]
        t.set_output(True).set_dim(list(operand.dims)).set_stride(list(operand.strides))
        t.set_data_type(getattr(dtype, operand.dtype))
        if operand.ragged is not None:
            t.set_ragged_offset(tensors[operand.ragged])
        tensors[role] = t
    plan, plan_s, compile_s = pin_backend(cudnn, graph)
    return Built(graph, tensors, plan, plan_s, compile_s)


def built_fp8(cudnn: Any, spec: Spec, handle: Any, device: Any) -> tuple[Built, bool]:
    """The FP8 graph for `spec`, cached per process; and whether it was cached."""
    key = (id(cudnn), str(device), id(handle), spec)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key], True
    _CACHE[key] = build_fp8(cudnn, spec, handle)
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return _CACHE[key], False


def clear_cache() -> None:
    _CACHE.clear()


@register
class CudnnFp8Backend(CudnnBackend):
    spec = dataclasses.replace(
        CudnnBackend.spec, name="cudnn-fp8",
        summary=("cuDNN's FP8 SDPA forward (graph.sdpa_fp8) on attnbench's quantized inputs: e4m3/e5m2 Q, K "
                 "and V, per-tensor descales, float16 out; the cudnn backend's masks and layouts"),
        capabilities=dataclasses.replace(CudnnBackend.capabilities, quantized=frozenset({
            "qkv:float8_e4m3fn", "qkv:float8_e5m2", "scale:tensor"}), quant_reasons={
            **{f"scale:{g}": ("cuDNN's sdpa_fp8 takes one descale per tensor ((1, 1, 1, 1) descale_q/k/v in "
                              "the frontend's FP8 tests): per-head and per-block factors are not mapped")
               for g in ("head", "block")},
            **{f"kv:{fmt}": ("cuDNN's sdpa_fp8 takes Q, K and V in one FP8 type: an FP8 K/V cache under "
                             "bf16 queries is not its input") for fmt in IO},
        }),
        determinism=always(NOT_APPLICABLE,
                           "forward only here: cuDNN's frontend offers a deterministic option for "
                           "sdpa_backward only"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (*super().library_calls(), *FP8_CALLS)

    def availability(self, device: str) -> str | None:
        reason = super().availability(device)
        if reason or device != "cuda":
            return reason
        import torch

        cap = torch.cuda.get_device_capability()
        if cap < (9, 0):
            return ("cuDNN's FP8 SDPA needs Hopper or later (compute capability ≥ 9.0; "
                    f"this GPU: {cap[0]}.{cap[1]})")
        version = int(cudnn_module().backend_version())
        if version < MIN_FP8_BACKEND:
            return (f"cuDNN {backend_string(version)} is older than "
                    f"{backend_string(MIN_FP8_BACKEND)} (FP8 SDPA)")
        return None

    def unsupported(self, case: Case) -> str | None:
        if not case.quantized:
            return "cudnn-fp8 runs FP8 cases only (the cudnn backend runs float16 and bfloat16)"
        if case.head_dim_v is not None:
            return "attnbench maps cuDNN's FP8 SDPA with one head size for Q/K and V"
        return super().unsupported(case.unquantized)

    def numerics(self, case: Case) -> Numerics | None:
        fmt = case.dtype
        return Numerics(source=f"cuDNN's FP8 SDPA (P·{S_SCALE[fmt]:g} to {fmt}, test/python/sdpa/fp8_ref.py)",
                        p_format=fmt, p_scale=S_SCALE[fmt], out_dtype="float16")

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,  # type: ignore[override]
                scales: Scales | None = None) -> Prepared:
        import torch

        assert scales is not None, "cudnn-fp8 runs quantized cases only"
        cudnn = cudnn_module()
        fmt = case.dtype
        # The cudnn layout via float32 copies, stored back in FP8: exact both ways.
        lay = layout(case.unquantized, q.float(), k.float(), v.float())
        inputs = tuple(t.to(q.dtype) for t in lay.inputs)
        spec = fp8_spec(lay.spec, fmt)
        handle = handle_for(cudnn, q.device)
        graph, cached = built_fp8(cudnn, spec, handle, q.device)
        workspace = torch.empty(max(1, graph.graph.get_workspace_size()), dtype=torch.uint8, device=q.device)
        fixed = {graph.tensors[role]: t for role, t in lay.runtime.items() if role in graph.tensors}
        for role, value in factor_values(scales, fmt).items():
            fixed[graph.tensors[role]] = torch.full((1, 1, 1, 1), value, dtype=torch.float32, device=q.device)
        for role in AMAX:
            fixed[graph.tensors[role]] = torch.zeros((1, 1, 1, 1), dtype=torch.float32, device=q.device)
        t = graph.tensors
        execute = graph.graph.execute

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = torch.empty(lay.out_shape, dtype=torch.float16, device=q.device)
            execute({**fixed, t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: out}, workspace, handle=handle)
            return out

        first_call_s = warm_up(call, inputs, False)
        extra: dict[str, Any] = {
            "plan_ms": 0.0 if cached else graph.plan_s * 1e3,
            "compile_s": (0.0 if cached else graph.compile_s) + first_call_s,
            "graph_cache": "hit" if cached else "built", "cudnn_plan": graph.plan,
            "cudnn_backend_version": (version := backend_string(int(cudnn.backend_version()))),
            "workspace_bytes": int(workspace.numel()),
        }
        words = self.kernel_name(cudnn, case.unquantized, lay, graph, None).split(" sdpa (", 1)[1]
        return Prepared(
            inputs=inputs,
            call=call,
            kernel=f"cudnn-frontend {cudnn.__version__} / cuDNN {version} sdpa_fp8 ({fmt}, "
                   f"per-tensor descales, scale_s {S_SCALE[fmt]:g}, float16 out, {words}",
            to_canonical=lay.to_canonical,
            extra=extra,
        )
