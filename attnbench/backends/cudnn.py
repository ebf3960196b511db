"""`cudnn`: cuDNN's SDPA graph through its own frontend (docs/backends.md#cudnn); `graph.execute` alone is
timed. Read from nvidia-cudnn-frontend 1.32.0 (node/diagonal_band_mask.h, node/sdpa_support_surface.h,
test/python/sdpa/ fp16_ref.py):

- Tensors (B, H, S, D) by strides over token-major memory, as the ragged form needs; native GQA.
- `diagonal_alignment=BOTTOM_RIGHT`: off = seq_len_kv − seq_len_q per sequence, as docs/conventions.md;
  `diagonal_band_right_bound=R` keeps j ≤ i + off + R (inclusive); `diagonal_band_left_bound=L` keeps
  j > i + off − L (exclusive: window W is L = W + 1).
- ALiBi: `use_alibi_mask`, slope_h·(j − i) with the graph's heads' slopes (cudnn_frontend_utils.h get_alibi_slope),
  only with right_bound 0 and top-left, so mapped only where every sequence has Sq == Sk.
- Pinned to the first of cuDNN's backend plans (the 1.32 frontend ranks its own CuTe DSL engines in the same list).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends import packing
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    device_problem,
    first_line,
    import_problem,
    warm_up,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.cudnn_graph import (
    Built,
    Runner,
    attention_function,
    built,
    handle_for,
)
from attnbench.backends.cudnn_layout import DTYPES, Layout, layout, route
from attnbench.backends.kernel_names import CUDNN_SDPA, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import HONOURED, NOT_APPLICABLE, Answer, Limit, forward_backward, unset

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

MODULE = "cudnn"
BINDING = "cudnn._compiled_module"
# The ranked plan list with `select_plan` and `selected_engine` that pinning relies on.
MIN_FRONTEND = (1, 32)
# Bottom-right causal masks at any length (sdpa_support_surface.h).
MIN_BACKEND = 90600

# The 1.32 pygraph's sdpa / sdpa_backward forward every keyword to the C++ binding's methods: held against
# those too.
MASK_KEYWORDS = ("diagonal_alignment", "diagonal_band_left_bound", "diagonal_band_right_bound",
                 "use_alibi_mask")
LENGTH_KEYWORDS = ("use_padding_mask", "seq_len_q", "seq_len_kv", "max_total_seq_len_q",
                   "max_total_seq_len_kv")
PAGED_KEYWORDS = ("paged_attention_k_table", "paged_attention_v_table", "paged_attention_max_seq_len_kv")
SDPA_KEYWORDS = ("name", "attn_scale", "generate_stats", *MASK_KEYWORDS, *LENGTH_KEYWORDS, *PAGED_KEYWORDS)
SDPA_BACKWARD_KEYWORDS = ("name", "attn_scale", *MASK_KEYWORDS, *LENGTH_KEYWORDS,
                          "use_deterministic_algorithm")
GRAPH_CALLS = (
    LibraryCall(MODULE, "pygraph",
                keywords=("io_data_type", "intermediate_data_type", "compute_data_type", "handle")),
    LibraryCall(MODULE, "pygraph.tensor", positional=("self",),
                keywords=("dim", "stride", "data_type", "name")),
    LibraryCall(MODULE, "pygraph.sdpa", positional=("self", "q", "k", "v"), keywords=SDPA_KEYWORDS),
    LibraryCall(MODULE, "pygraph.sdpa_backward", positional=("self", "q", "k", "v", "o", "dO", "stats"),
                keywords=SDPA_BACKWARD_KEYWORDS),
    LibraryCall(BINDING, "backend_graph.sdpa", positional=("self", "q", "k", "v"),
                keywords=SDPA_KEYWORDS, optional=True),
    LibraryCall(BINDING, "backend_graph.sdpa_backward",
                positional=("self", "q", "k", "v", "o", "dO", "stats"), keywords=SDPA_BACKWARD_KEYWORDS,
                optional=True),
    LibraryCall(MODULE, "pygraph.validate", positional=("self",)),
    LibraryCall(MODULE, "pygraph.build_operation_graph", positional=("self",)),
    LibraryCall(MODULE, "pygraph.create_execution_plans", positional=("self", "heuristics")),
    LibraryCall(MODULE, "pygraph.get_execution_plan_count", positional=("self",)),
    LibraryCall(MODULE, "pygraph.select_plan", positional=("self", "index")),
    LibraryCall(MODULE, "pygraph.get_plan_name_at_index", positional=("self", "index")),
    LibraryCall(MODULE, "pygraph.check_support", positional=("self",)),
    LibraryCall(MODULE, "pygraph.build_plans", positional=("self",)),
    LibraryCall(MODULE, "pygraph.get_workspace_size", positional=("self",)),
    LibraryCall(MODULE, "pygraph.execute", positional=("self", "tensor_dict", "workspace"),
                keywords=("handle",)),
    LibraryCall(MODULE, "Tensor.set_output", positional=("self", "value")),
    LibraryCall(MODULE, "Tensor.set_dim", positional=("self", "dim")),
    LibraryCall(MODULE, "Tensor.set_stride", positional=("self", "stride")),
    LibraryCall(MODULE, "Tensor.set_data_type", positional=("self", "dtype")),
    LibraryCall(MODULE, "Tensor.set_ragged_offset", positional=("self", "ragged_offset")),
)


def cudnn_module() -> Any:
    """The `cudnn` module, torch imported first (the frontend uses torch's libcudnn when it has none)."""
    import torch  # noqa: F401

    return importlib.import_module(MODULE)


@register
class CudnnBackend(Backend):
    spec = BackendSpec(
        name="cudnn",
        # By analogy with SDPA→cuDNN (the same engines), not fitted.
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.6, efficiency_bwd=0.45)),
        summary=("cuDNN's SDPA graph through its own frontend (nvidia-cudnn-frontend): bottom-right masks, "
                 "windows, ragged, padded and paged K/V; fp16/bf16, native GQA, fwd and bwd"),
        library="nvidia-cudnn-frontend",
        install_hint=("pip install nvidia-cudnn-frontend  (or 'attnbench[cudnn]'; the cuDNN library itself "
                      "comes with a CUDA build of torch)"),
        capabilities=Capabilities(
            devices=("cuda",), kernel_names=per_device(cuda=CUDNN_SDPA),
            workload_axes=frozenset({"documents", "kv_lengths", "page_size", "alibi", "head_dim_v"})),
        limits=(Limit(field="dtype", allowed=tuple(DTYPES),
                      reason="{dtype} is not supported (cuDNN's SDPA takes float16 or bfloat16)"),
                unset("softcap",
                      "cuDNN's SDPA graph has no soft-cap (only a score_mod callback, which cuDNN refuses "
                      "together with masks)")),
        determinism=forward_backward(
            Answer(NOT_APPLICABLE, "cuDNN's frontend offers a deterministic option for sdpa_backward only"),
            Answer(HONOURED, "sdpa_backward(use_deterministic_algorithm=True)")))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return GRAPH_CALLS

    def availability(self, device: str) -> str | None:
        problem = import_problem(cudnn_module, "nvidia-cudnn-frontend", "cudnn")
        if problem:
            return problem
        cudnn = cudnn_module()
        version = str(getattr(cudnn, "__version__", "0"))
        if version_tuple(version) < MIN_FRONTEND:
            need = ".".join(map(str, MIN_FRONTEND))
            return f"nvidia-cudnn-frontend {version} is older than {need}, whose graph API attnbench maps"
        problem = device_problem(device, self.capabilities.devices,
                                 "needs CUDA (cuDNN's SDPA has no CPU engine)")
        if problem:
            return problem
        import torch

        if device == "cuda":
            cap = torch.cuda.get_device_capability()
            if cap < (8, 0):
                return f"cuDNN's SDPA needs compute capability ≥ 8.0 (this GPU: {cap[0]}.{cap[1]})"
        try:
            backend = int(cudnn.backend_version())
        except Exception as exc:  # no libcudnn
            return f"the cuDNN library does not load for the frontend ({first_line(exc)})"
        if backend < MIN_BACKEND:
            return (f"cuDNN {backend_string(backend)} is older than {backend_string(MIN_BACKEND)} "
                    "(bottom-right causal masks at any length)")
        return None

    def unsupported(self, case: Case) -> str | None:
        if reason := super().unsupported(case) or packing.documents_in_pages(case, "cuDNN"):
            return reason
        if case.page_size is not None and case.needs_grad:
            return "cuDNN's sdpa_backward takes no page tables: a paged cache is forward only"
        if case.alibi:
            if (case.tp or 1) > 1:
                return ("cuDNN's ALiBi slopes are fixed for the graph's query heads; a tensor-parallel share "
                        "needs the whole model's slopes: alibi with tp is not mapped")
            if not case.causal:
                return "cuDNN takes ALiBi only with a causal mask (diagonal_band_right_bound must be 0)"
            if case.kv_lens is not None or (case.doc_lens is None and case.seq_len != case.kv_seq_len):
                return ("cuDNN refuses ALiBi with bottom-right alignment, and its top-left causal mask is "
                        "docs/conventions.md's only where every sequence has as many queries as keys")
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
        first_call_s = warm_up(call, lay.inputs, case.needs_grad)  # a first execute's lazy work
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
        if any(cls.__name__ == "cudnnGraphNotSupportedError" for cls in type(exc).__mro__):
            return f"cuDNN refused: {first_line(exc)}"
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """(1, 32, 0) from "1.32.0"."""
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
