"""ONNX Runtime's CPU attention ops (docs/backends.md, "Runtimes beyond PyTorch"): `Attention` (opset 23),
`com.microsoft.MultiHeadAttention` and `GroupQueryAttention`, each a one-node graph. The timed call runs the
session over IOBinding with pre-placed OrtValues; kernels come from ORT's session profiling, "<op_name>
(<provider>)"."""

from __future__ import annotations

import functools
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends import runtimes
from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared, library_refusal
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.registry import register
from attnbench.backends.spec import Limit, unset
from attnbench.core.counting import MemoryCost
from attnbench.timing.bracket import OWN_RUNTIME
from attnbench.timing.memory import call_measuring_peak

if TYPE_CHECKING:
    import numpy as np
    import torch

    from attnbench.core.case import Case
    from attnbench.timing.profile import Profile

MS = "com.microsoft"
# The session's run (model_run) outside every node: its own entry in `kernels`.
SESSION_REST = "session run outside its nodes"
REFUSALS = ("Could not find an implementation", "NOT_IMPLEMENTED", "INVALID_ARGUMENT", "not supported")
GQA = "ONNX Runtime's GroupQueryAttention"
NUMPY_DTYPES = ("float32", "float16")
# group_query_attention_helper.h; its query_seqlens input lifts it where the release has one.
BATCH_RULE = "batch_size must be 1 when sequence_length > 1 and past context is given"
CALLS = (
    LibraryCall("onnxruntime", "InferenceSession", positional=("path_or_bytes", "sess_options"),
                keywords=("providers",)),
    LibraryCall("onnxruntime", "OrtValue.ortvalue_from_numpy", positional=("numpy_obj",)),
    LibraryCall("onnx.helper", "make_node", positional=("op_type", "inputs", "outputs"),
                keywords=("domain",)),
)


@dataclass(frozen=True)
class OpSchema:
    """A com.microsoft op's inputs in order and attributes, as the installed release declares them."""

    version: str
    inputs: tuple[str, ...]
    attributes: frozenset[str]


# GroupQueryAttention's first seven inputs, which every release has.
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length")


@functools.cache
def contrib_schema(op: str) -> OpSchema:
    """The installed schema of com.microsoft `op`;
    without ONNX Runtime the oldest one (no rule assumed lifted)."""
    try:
        import onnxruntime
        from onnxruntime.capi import onnxruntime_pybind11_state as capi
    except ImportError:
        return OpSchema("(not installed)", GQA_INPUTS, frozenset())
    for schema in capi.get_all_operator_schema():
        if schema.name == op and schema.domain == MS:
            return OpSchema(onnxruntime.__version__, tuple(i.name for i in schema.inputs),
                            frozenset(schema.attributes))
    return OpSchema(onnxruntime.__version__, GQA_INPUTS, frozenset())


ORT = "ONNX Runtime"
ORT_COST = Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.5, efficiency_bwd=0.0, score_passes_fwd=3.0),
                memory=MemoryCost(score_copies_fwd=2, expands_kv=False))
# Registered by the op's CPU kernel (1.32); another dtype runs between inserted Cast nodes.
KERNEL_DTYPES = ("float32", "float16")


def op_spec(op: str, workload_axes: set[str], *, name: str, summary: str, cost: Cost = ORT_COST,
            kernel_dtypes: tuple[str, ...] = KERNEL_DTYPES, limits: tuple[Limit, ...] = ()) -> BackendSpec:
    """An ONNX Runtime backend's spec: CPU only, its op's node the attention kernel, its work in the session's
    run (the CUDA provider's on a stream of its own unless given torch's); `limits` before ONNX Runtime's
    own."""
    return BackendSpec(
        name=name, summary=summary, library="onnxruntime",
        install_hint="pip install 'attnbench[onnxruntime]'", cost=cost, determinism=runtimes.answers(ORT),
        capabilities=Capabilities(devices=("cpu",), workload_axes=frozenset(workload_axes),
                                  kernel_names={"cpu": (rf"^{op} \(CPUExecutionProvider\)",)},
                                  runs_on=OWN_RUNTIME),
        limits=(*limits, runtimes.forward_only_limit(ORT),
                Limit(field="dtype", allowed=NUMPY_DTYPES,  # NumPy has no bfloat16
                      reason=f"attnbench maps float32 and float16 onto {ORT}'s {op} only, not {{dtype}}"),
                Limit(field="dtype", allowed=kernel_dtypes,
                      reason=(f"{ORT}'s CPU kernel of {op} registers {' and '.join(kernel_dtypes)} only, not "
                              "{dtype} (a {dtype} graph would run it between Cast nodes)")),
                *runtimes.unmapped(name)))


class _Ort(Backend):
    op: ClassVar[str]
    domain: ClassVar[str] = ""

    def availability(self, device: str) -> str | None:
        from attnbench.backends.base import device_problem, import_problem

        return (device_problem(device, self.capabilities.devices,
                               "ONNX Runtime's CUDA provider is not mapped yet (CPU only)")
                or import_problem(lambda: __import__("onnxruntime"), "onnxruntime", "onnxruntime")
                or import_problem(lambda: __import__("onnx"), "onnx", "onnx"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return CALLS

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "ONNX Runtime", REFUSALS, (Exception,))

    def graph_inputs(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                     ) -> tuple[dict[str, np.ndarray], dict[str, Any], str, bool]:
        """The named NumPy inputs, the node's attributes, how the mask was given,
        whether K/V were expanded."""
        raise NotImplementedError

    def output_shape(self, case: Case) -> tuple[int, ...]:
        return (case.batch, case.seq_len, case.heads * case.head_dim)

    def to_canonical(self, case: Case) -> Any:
        def back(out: torch.Tensor) -> torch.Tensor:
            return out.view(case.batch, case.seq_len, case.heads, case.head_dim).transpose(1, 2)
        return back

    def model_bytes(self, case: Case, inputs: dict[str, np.ndarray], attributes: dict[str, Any]) -> bytes:
        return _positional_model(self, inputs, attributes, list(inputs))

    def extra_outputs(self) -> tuple[str, ...]:
        return ()

    def session(self, model: bytes, threads: int, profile_dir: str | None = None) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if profile_dir is not None:
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(profile_dir, "ort")
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import numpy as np
        import onnxruntime as ort
        import torch

        inputs, attributes, how, expanded = self.graph_inputs(case, q, k, v)
        model = self.model_bytes(case, inputs, attributes)
        threads = runtimes.run_threads()
        session = self.session(model, threads)
        binding = session.io_binding()
        placed = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in inputs.items()}
        for name, value in placed.items():
            binding.bind_ortvalue_input(name, value)
        out = ort.OrtValue.ortvalue_from_shape_and_type(list(self.output_shape(case)),
                                                        np.dtype(case.dtype).type)
        binding.bind_ortvalue_output("out", out)
        for name in self.extra_outputs():
            binding.bind_output(name, "cpu")

        held = (inputs, placed)  # the memory the OrtValues are views of: kept alive with the call

        def call() -> Any:
            assert held
            session.run_with_iobinding(binding)
            return out

        def to_tensor(value: Any) -> torch.Tensor:  # a copy: the bound output is overwritten by the next call
            return torch.from_numpy(value.numpy().copy())

        extra: dict[str, Any] = {"threads": threads,
                                 "runtime": f"onnxruntime {ort.__version__} CPUExecutionProvider",
                                 "inputs": "pre-placed OrtValues over the tensors' memory (IOBinding)"}
        op = f"{self.domain}.{self.op}" if self.domain else self.op
        return Prepared(inputs=(), call=call, to_tensor=to_tensor, to_canonical=self.to_canonical(case),
                        kernel=f"onnxruntime {ort.__version__} {op} (CPU EP, {how})",
                        kv_expanded=expanded, memory="rss", extra=extra,
                        profile=lambda: self.profile(case, model, inputs, threads))

    def profile(self, case: Case, model: bytes, inputs: dict[str, np.ndarray], threads: int) -> Profile:
        """ORT's session profiling of one call on a session of its own:
        node kernels, SESSION_REST, the peak."""
        with tempfile.TemporaryDirectory() as folder:
            session = self.session(model, threads, folder)
            measured = call_measuring_peak(lambda: session.run(None, inputs), "cpu", memory="rss")
            path = session.end_profiling()
            with open(path) as trace:
                events = json.load(trace)
        nodes: dict[str, list[float]] = {}
        total = 0.0
        for event in events:
            if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time"):
                args = event.get("args", {})
                name = f"{args.get('op_name', '?')} ({args.get('provider', '?')})"
                nodes.setdefault(name, []).append(event.get("dur", 0) / 1e3)
            elif event.get("cat") == "Session" and event.get("name") == "model_run":
                total += event.get("dur", 0) / 1e3
        rest = total - sum(sum(ms) for ms in nodes.values())
        if rest > 0:
            nodes[SESSION_REST] = [rest]
        return runtimes.runtime_profile(nodes, "onnxruntime session profiling",
                                        kernel_path=runtimes.path_evidence(measured.peak, case))


def bshd(t: torch.Tensor) -> np.ndarray:
    """(B, H, S, D) as ORT's contrib ops' (B, S, H·D), copied."""
    b, h, s, d = t.shape
    return runtimes.as_numpy(t.transpose(1, 2).reshape(b, s, h * d))


@register
class OrtAttention(_Ort):
    op = "Attention"
    spec = op_spec(op, {"softcap", "documents", "kv_lengths"}, name="onnxruntime", summary=(
        "ONNX Runtime's standard Attention op (opset 23), CPU execution provider; materialises the scores"))

    def graph_inputs(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                     ) -> tuple[dict[str, np.ndarray], dict[str, Any], str, bool]:
        inputs = {"Q": runtimes.as_numpy(q), "K": runtimes.as_numpy(k), "V": runtimes.as_numpy(v)}
        attributes: dict[str, Any] = {}
        if case.softcap is not None:
            attributes["softcap"] = float(case.softcap)
        how = "no mask"
        keep = runtimes.keep_mask(case)
        if keep is not None and case.causal and case.window is None and runtimes.native_causal(case):
            attributes["is_causal"] = 1
            how = "is_causal"
        elif keep is not None:
            inputs["attn_mask"] = self.mask_of(case, keep)
            how = "boolean attn_mask"
        return inputs, attributes, how + (f", q_num_heads {case.heads} over kv_num_heads {case.kv_heads}"
                                          if case.kv_heads != case.heads else ""), False

    def mask_of(self, case: Case, keep: np.ndarray) -> np.ndarray:
        """The mask as the op's boolean attn_mask, broadcast over heads (R, 1, Sq, Sk)."""
        return keep[:, None]

    def output_shape(self, case: Case) -> tuple[int, ...]:
        return (case.batch, case.heads, case.seq_len, case.head_dim)

    def to_canonical(self, case: Case) -> Any:
        return lambda out: out


@register
class OrtMultiHeadAttention(_Ort):
    op = "MultiHeadAttention"
    spec = op_spec(
        op, {"documents", "kv_lengths"}, name="onnxruntime-mha",
        summary=("ONNX Runtime's com.microsoft.MultiHeadAttention, CPU EP: tiled MlasFlashAttention when "
                 "unmasked, else unfused; no GQA (K/V repeated)"),
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.5, efficiency_bwd=0.0, score_passes_fwd=1.0),
                  memory=MemoryCost(score_copies_fwd=1, expands_kv=True)),
        kernel_dtypes=("float32",),
        limits=(unset("softcap", "com.microsoft.MultiHeadAttention has no softcap attribute"),))
    domain = MS

    def graph_inputs(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                     ) -> tuple[dict[str, np.ndarray], dict[str, Any], str, bool]:
        import numpy as np

        from attnbench.backends.base import expand_kv

        expanded = case.kv_heads != case.heads
        inputs = {"query": bshd(q), "key": bshd(expand_kv(k, case)), "value": bshd(expand_kv(v, case))}
        keep = runtimes.keep_mask(case)
        how = "no mask"
        if keep is not None:  # additive (B or 1, 1, Sq, Sk): the op's causal flag is top-left
            kind = np.dtype(case.dtype).type
            bias = np.where(keep, kind(0), kind(-np.inf))[:, None].astype(kind)
            inputs = {**inputs, "bias": None, "key_padding_mask": None,  # type: ignore[dict-item]
                      "attention_bias": bias}
            how = "additive attention_bias"
        return ({n: a for n, a in inputs.items() if a is not None}, {"num_heads": case.heads},
                how + (", K/V repeated per query head" if expanded else ""), expanded)

    def model_bytes(self, case: Case, inputs: dict[str, np.ndarray], attributes: dict[str, Any]) -> bytes:
        order = ["query", "key", "value", "bias", "key_padding_mask", "attention_bias"]
        used = [n for n in order if n in inputs]
        last = order.index(used[-1])
        self._names = [n if n in inputs else "" for n in order[: last + 1]]
        return _positional_model(self, inputs, attributes, self._names)


@register
class OrtGroupQueryAttention(_Ort):
    op = "GroupQueryAttention"
    spec = op_spec(
        op, {"softcap"}, name="onnxruntime-gqa",
        summary=("ONNX Runtime's com.microsoft.GroupQueryAttention, CPU EP: native GQA, local window, "
                 "softcap; keys before the queries as its past K/V"),
        cost=Cost(cpu=KernelCost(pairs="causal", efficiency_fwd=0.5, efficiency_bwd=0.0,
                                 score_passes_fwd=2.0),
                  memory=MemoryCost(score_copies_fwd=1)))
    domain = MS

    def unsupported(self, case: Case) -> str | None:
        """ORT's rules for the op, in its words
        (contrib_ops/cpu/bert/group_query_attention_helper.h, its schema)."""
        schema = contrib_schema(self.op)
        if case.head_dim % 8:
            return f"{GQA} refuses head_dim {case.head_dim}: \"head_size must be a multiple of 8\""
        if case.kv_seq_len < case.seq_len:
            return f"{GQA} needs at least as many keys as queries (its queries are the last of its keys)"
        if not case.causal and "causal" not in schema.attributes:
            return (f"{GQA} of onnxruntime {schema.version} is always causal (its "
                    "schema has no causal attribute)")
        if not case.causal and case.window is not None:
            return f"{GQA} refuses a window without causal: \"local_window_size must be -1 when causal is 0\""
        if self.needs_query_seqlens(case) and not (case.causal and "query_seqlens" in schema.inputs):
            return f"{GQA} refuses batch {case.batch} with a cached prefix: \"{BATCH_RULE}\"" + (
                "" if case.causal else " (its query_seqlens, which lifts the rule, requires causal)")
        return super().unsupported(case)

    @staticmethod
    def needs_query_seqlens(case: Case) -> bool:
        """Whether the case is ORT's batched chunk
        (batch > 1, several queries after keys): needs query_seqlens."""
        return case.batch > 1 and 1 < case.seq_len < case.kv_seq_len

    def extra_outputs(self) -> tuple[str, ...]:
        return ("present_key", "present_value")

    def graph_inputs(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                     ) -> tuple[dict[str, np.ndarray], dict[str, Any], str, bool]:
        import numpy as np

        past = case.kv_seq_len - case.seq_len  # bottom-right: the first keys are the cache
        inputs = {"query": bshd(q), "key": bshd(k[:, :, past:]), "value": bshd(v[:, :, past:]),
                  "past_key": runtimes.as_numpy(k[:, :, :past]),
                  "past_value": runtimes.as_numpy(v[:, :, :past]),
                  "seqlens_k": np.full((case.batch,), case.kv_seq_len - 1, dtype=np.int32),
                  "total_sequence_length": np.array([case.kv_seq_len], dtype=np.int32)}
        attributes: dict[str, Any] = {"num_heads": case.heads, "kv_num_heads": case.kv_heads}
        how = "causal" if case.causal else "causal 0"
        if not case.causal:
            attributes["causal"] = 0
        if case.window is not None:  # keeps distance 0 and the W - 1 before: docs/conventions.md's W is W + 1
            attributes["local_window_size"] = self.window_of(case.window)
            how += f", local_window_size {attributes['local_window_size']}"
        if case.softcap is not None:
            attributes["softcap"] = float(case.softcap)
        if past:
            how += f", {past} keys as past K/V"
        if self.needs_query_seqlens(case) and "query_seqlens" in contrib_schema(self.op).inputs:
            inputs["query_seqlens"] = np.full((case.batch,), case.seq_len, dtype=np.int32)
            how += f", query_seqlens {case.seq_len} per entry (its batched chunks)"
        return inputs, attributes, how, False

    def model_bytes(self, case: Case, inputs: dict[str, np.ndarray], attributes: dict[str, Any]) -> bytes:
        """Positional inputs in the schema's order: an absent optional one is an empty name."""
        order = contrib_schema(self.op).inputs
        last = max(order.index(name) for name in inputs)
        return _positional_model(self, inputs, attributes,
                                 [n if n in inputs else "" for n in order[: last + 1]])

    def window_of(self, window: int) -> int:
        return window + 1


def _positional_model(backend: _Ort, inputs: dict[str, np.ndarray], attributes: dict[str, Any],
                      names: list[str]) -> bytes:
    """A one-node model whose node takes `names` in order ('' for an optional input left out)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
             np.dtype(np.int32): TensorProto.INT32,
             np.dtype(bool): TensorProto.BOOL}
    outputs = ["out", *backend.extra_outputs()]
    node = helper.make_node(backend.op, names, outputs, domain=backend.domain, **attributes)
    graph = helper.make_graph(
        [node], backend.name,
        [helper.make_tensor_value_info(n, types[a.dtype], list(a.shape)) for n, a in inputs.items()],
        # the query's type
        [helper.make_tensor_value_info(n, types[inputs[names[0]].dtype], None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(MS, 1)])
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    return model.SerializeToString()
