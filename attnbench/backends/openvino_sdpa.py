"""OpenVINO's `ScaledDotProductAttention` (opset13) on its CPU plugin, the case's dtype as inference precision
(else float32 graphs run in bf16 where the CPU has it). The timed call is one `infer()` over shared input
memory; kernels come from the plugin's PERF_COUNT exec_types."""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any

from attnbench.backends import runtimes
from attnbench.backends.base import (
    Backend,
    BackendSpec,
    Capabilities,
    Cost,
    KernelCost,
    Prepared,
    expand_kv,
    library_refusal,
)
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.registry import register
from attnbench.backends.spec import Limit, unset
from attnbench.core.counting import MemoryCost
from attnbench.timing.bracket import OWN_RUNTIME

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.timing.profile import Profile

OV_CALL = LibraryCall("openvino.opset13", "scaled_dot_product_attention",
                      positional=("query", "key", "value", "attention_mask"), keywords=("causal",))
PRECISION = {"float32": "f32", "bfloat16": "bf16"}


@register
class OpenVinoSdpa(Backend):
    spec = BackendSpec(
        name="openvino",
        summary=("OpenVINO's ScaledDotProductAttention op on its CPU plugin (its own SDPA node); K/V "
                 "repeated for GQA, broadcast for MQA"),
        library="openvino",
        install_hint="pip install 'attnbench[openvino]'",
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.5, efficiency_bwd=0.0, score_passes_fwd=1.0),
                  memory=MemoryCost(expands_kv=True)),
        capabilities=Capabilities(
            devices=("cpu",), workload_axes=frozenset({"documents", "kv_lengths"}),
            # A Snippets "Subgraph jit_<isa>_f32 (ScaledDotProductAttention)" beside the Multiply and
            # Transpose split off.
            kernel_names={"cpu": (r"\(ScaledDotProductAttention\)$",)}, runs_on=OWN_RUNTIME),
        limits=(runtimes.forward_only_limit("OpenVINO"),
                # a bf16 run answered wrongly through int16 views: not mapped until checked
                Limit(field="dtype", allowed=("float32",),
                      reason="attnbench maps float32 onto OpenVINO only, not {dtype} yet"),
                unset("softcap", "OpenVINO's ScaledDotProductAttention has no softcap"),
                *runtimes.unmapped("openvino")),
        determinism=runtimes.answers("OpenVINO"))

    def availability(self, device: str) -> str | None:
        from attnbench.backends.base import device_problem, import_problem

        return (device_problem(device, self.capabilities.devices, "attnbench maps OpenVINO's CPU plugin only")
                or import_problem(lambda: __import__("openvino"), "openvino", "openvino"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (OV_CALL,)

    def estimate_memory(self, case: Case) -> int:
        """The declared estimate, without repeated K/V where one KV head is broadcast."""
        from dataclasses import replace

        from attnbench.core import counting

        memory = self.cost.memory if broadcast_refused(case) else replace(self.cost.memory, expands_kv=False)
        return counting.memory_estimate(case, memory)

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "OpenVINO", ("Check '", "not supported", "Unsupported"), (RuntimeError,))

    def mask_of(self, case: Case) -> tuple[Any, bool, str]:
        """The boolean attention_mask (or None), the causal flag, and how; OpenVINO's causal is top-left."""
        keep = runtimes.keep_mask(case)
        if keep is None:
            return None, False, "no mask"
        if case.causal and case.window is None and runtimes.native_causal(case):
            return None, True, "causal"
        return keep[:, None], False, "boolean attention_mask"

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import numpy as np
        import openvino as ov
        import openvino.opset13 as ops
        import torch

        mask, causal, how = self.mask_of(case)
        expanded = broadcast_refused(case)
        tensors = [q, *((expand_kv(k, case), expand_kv(v, case)) if expanded else (k, v))]
        kind = ov.Type.bf16 if case.dtype == "bfloat16" else ov.Type.f32
        # bf16 has no NumPy dtype: int16 views given to OpenVINO as bf16.
        arrays = [runtimes.as_numpy(t.detach().contiguous().view(torch.int16) if case.dtype == "bfloat16"
                                    else t)
                  for t in tensors]
        params = [ops.parameter(list(a.shape), kind) for a in arrays]
        if mask is not None:
            params.append(ops.parameter(list(mask.shape), ov.Type.boolean))
            arrays.append(np.ascontiguousarray(mask))
        node = ops.scaled_dot_product_attention(*params[:3], params[3] if mask is not None else None,
                                                causal=causal)
        model = ov.Model([node], params, self.name)
        threads = runtimes.run_threads()
        config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": PRECISION[case.dtype]}
        core = ov.Core()
        compiled = core.compile_model(model, "CPU", config)
        request = compiled.create_infer_request()
        for index, (param, array) in enumerate(zip(params, arrays, strict=False)):
            tensor = (ov.Tensor(array, list(array.shape), param.get_element_type())
                      if case.dtype == "bfloat16" and index < 3 else ov.Tensor(array, shared_memory=True))
            request.set_input_tensor(index, tensor)

        held = (arrays, tensors)  # the memory the request's input tensors share: kept alive with the call

        def call() -> Any:
            assert held
            request.infer()
            return request.get_output_tensor(0)

        # a copy: the request's output is overwritten by the next call
        def to_tensor(out: Any) -> torch.Tensor:
            data = np.array(out.data, copy=True)
            t = torch.from_numpy(data)
            return t.view(torch.bfloat16) if case.dtype == "bfloat16" and t.dtype == torch.int16 else t

        extra: dict[str, Any] = {"threads": threads, "runtime": f"openvino {ov.__version__} CPU plugin",
                                 "inference_precision": PRECISION[case.dtype],
                                 "inputs": "OpenVINO tensors sharing the tensors' memory"}
        notes = ""
        if expanded:
            notes += ", K/V repeated per query head"
        if case.kv_heads == 1 < case.heads:
            notes += ", one KV head broadcast"
        return Prepared(inputs=(), call=call, to_tensor=to_tensor,
                        kernel=f"openvino {ov.__version__} ScaledDotProductAttention (CPU, {how}{notes})",
                        kv_expanded=expanded, memory="rss", extra=extra,
                        profile=lambda: perf_counters(core, model, config, arrays, params))


def broadcast_refused(case: Case) -> bool:
    """Whether K/V must be repeated: the op broadcasts NumPy's way
    (scaled_dot_product_attention_shape_inference.hpp), so one KV head broadcasts, 2..heads-1 do not (a rank-5
    query would, off the fused SDPA node)."""
    return case.kv_heads not in (1, case.heads)


def perf_counters(core: Any, model: Any, config: dict[str, Any], arrays: list[Any],
                  params: list[Any]) -> Profile:
    """The plugin's counters of one warm call: "<node_type> <exec_type>
    (<node name>)", the name's counter dropped."""
    import openvino as ov

    compiled = core.compile_model(model, "CPU", {**config, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    tensors = [ov.Tensor(a, list(a.shape), p.get_element_type()) for a, p in zip(arrays, params,
                                                                                 strict=False)]
    request.infer(tensors)  # the first call of a compiled model pays its one-time work
    request.infer(tensors)
    rows: dict[str, list[float]] = {}
    for p in request.get_profiling_info():
        if p.real_time.total_seconds() > 0:
            name = f"{p.node_type} {p.exec_type} ({re.sub(r'_[0-9]+$', '', p.node_name)})"
            rows.setdefault(name, []).append(p.real_time.total_seconds() * 1e3)
    return runtimes.runtime_profile(rows, "OpenVINO CPU plugin performance counters (PERF_COUNT)")
