"""JAX's `jax.nn.dot_product_attention`: `jax` (implementation='xla') and `jax-cudnn` (pinned to 'cudnn': a
refusal is JAX's skip reason, never an XLA fallback). The timed call ends with `block_until_ready()`; kernels
come from jax.profiler, each HLO op named by its fused computation's root op."""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends import runtimes
from attnbench.backends.base import Backend, BackendSpec, Capabilities, Cost, KernelCost, Prepared, library_refusal
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.kernel_names import JAX_CUDNN_FMHA, per_device
from attnbench.backends.registry import register
from attnbench.backends.spec import REFUSED, Limit, always, unset
from attnbench.core.axes import HALF_DTYPES
from attnbench.core.counting import MemoryCost
from attnbench.timing.bracket import OWN_RUNTIME
from attnbench.timing.memory import DeviceStats

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

JAX_CALL = LibraryCall("jax.nn", "dot_product_attention", positional=("query", "key", "value"),
                       keywords=("mask", "is_causal", "local_window_size", "implementation"))
# JAX's cap for cuDNN's flash attention (Hopper on; 128 before).
CUDNN_MAX_HEAD_DIM = 256
# One HLO instruction: its name and opcode (a tuple's shape holds spaces), the fused computation it calls, if
# any.
HLO_LINE = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(?:\([^=]*?\)|\S+)\s+([\w\-]+)\(")
HLO_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")


def jax_limits(name: str, *implementation: Limit) -> tuple[Limit, ...]:
    """Forward only, no soft-cap, the implementation's refusals in JAX's words, then the unmapped axes."""
    return (runtimes.forward_only_limit("JAX"),
            unset("softcap", "jax.nn.dot_product_attention has no softcap"), *implementation,
            *runtimes.unmapped(name))


class _Jax(Backend):
    spec = BackendSpec(
        library="jax",
        install_hint="pip install 'attnbench[jax]'",
        # XLA runs the call on its own stream; block_until_ready returns when it is done.
        capabilities=Capabilities(workload_axes=frozenset({"documents", "kv_lengths"}), runs_on=OWN_RUNTIME))
    implementation: ClassVar[str]

    def availability(self, device: str) -> str | None:
        from attnbench.backends.base import device_problem, import_problem

        return (device_problem(device, self.capabilities.devices,
                               f"JAX's {self.implementation} attention does not run on {device}")
                or import_problem(lambda: __import__("jax"), "jax", "jax"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (JAX_CALL,)

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "JAX",
                               ("cuDNN", "cudnn", "Unsupported", "not supported", "head dim must be"),
                               (ValueError, NotImplementedError, RuntimeError))

    def arguments(self, case: Case) -> tuple[dict[str, Any], Any, str]:
        """The mask's keywords, boolean array (or None), and how it was given. JAX's is_causal and
        local_window_size are top-left: docs/conventions.md's only where Sq == Sk in one dense sequence."""
        kwargs: dict[str, Any] = {"implementation": self.implementation}
        keep = runtimes.keep_mask(case)
        if keep is None:
            return kwargs, None, "no mask"
        if runtimes.native_causal(case):
            how = []
            if case.causal:
                kwargs["is_causal"] = True
                how.append("is_causal")
            if case.window is not None:
                kwargs["local_window_size"] = self.window_of(case)
                how.append(f"local_window_size {kwargs['local_window_size']}")
            return kwargs, None, ", ".join(how)
        return kwargs, keep[:, None], "boolean mask"

    def window_of(self, case: Case) -> tuple[int, int]:
        return (case.window, 0) if case.causal else (case.window, case.window)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import jax
        import jax.numpy as jnp
        import torch

        kwargs, mask, how = self.arguments(case)
        # BTNH / BSKH, copied.
        device = jax.devices("cpu" if case.device == "cpu" else "gpu")[0]
        arrays = [jax.device_put(jax.dlpack.from_dlpack(t.detach().transpose(1, 2).contiguous()), device)
                  for t in (q, k, v)]
        if mask is not None:
            arrays.append(jax.device_put(jnp.asarray(mask), device))

        def attend(q: Any, k: Any, v: Any, mask: Any = None) -> Any:
            return jax.nn.dot_product_attention(q, k, v, mask=mask, **kwargs)

        compiled = jax.jit(attend).lower(*arrays).compile()  # setup: a refusal (cuDNN's) raises here

        def call() -> Any:
            return compiled(*arrays).block_until_ready()

        def to_tensor(out: Any) -> torch.Tensor:
            return torch.from_dlpack(out)

        extra: dict[str, Any] = {"threads": len(device.client.devices()) and runtimes.run_threads(),
                                 "runtime": f"jax {jax.__version__} {device.platform} ({device.device_kind})",
                                 "inputs": "jax arrays from DLPack (BTNH copy made outside the timed call)"}
        extra["threads_note"] = "XLA's CPU client uses its own thread pool (set at import, not per call)"
        try:  # XLA's temp buffer: the logits, where materialised
            extra["xla_temp_bytes"] = int(compiled.memory_analysis().temp_size_in_bytes)
        except Exception:  # not every backend of XLA reports it
            pass
        labels = hlo_labels(compiled.as_text())
        # On a GPU, XLA's allocator's own accounting: host RSS is not device memory.
        memory = "rss" if case.device == "cpu" else DeviceStats(device.memory_stats, f"jax {jax.__version__} "
                                                                "Device.memory_stats()")
        return Prepared(inputs=(), call=call, to_tensor=to_tensor,
                        to_canonical=lambda out: out.transpose(1, 2),
                        kernel=f"jax {jax.__version__} dot_product_attention "
                               f"implementation={self.implementation!r} "
                               f"({how}{', GQA native' if case.kv_heads != case.heads else ''})",
                        memory=memory, extra=extra, profile=lambda: jax_profile(call, labels))


def hlo_labels(text: str) -> dict[str, str]:
    """Each entry instruction of the compiled HLO as "<name>
    (<root opcode, custom-call target or opcode>)"."""
    roots: dict[str, str] = {}
    entry: dict[str, tuple[str, str | None, str]] = {}
    computation, is_entry = "", False
    for line in text.splitlines():
        header = HLO_COMPUTATION.match(line)
        if header:
            computation, is_entry = header.group(2), bool(header.group(1))
            continue
        found = HLO_LINE.match(line)
        if not found:
            continue
        root, name, opcode = found.groups()
        if root:
            roots[computation] = opcode
        if is_entry and opcode != "parameter":
            calls = re.search(r"calls=%?([\w.\-]+)", line)
            target = re.search(r'custom_call_target="([^"]+)"', line)
            entry[name] = (opcode, calls.group(1) if calls else None, target.group(1) if target else opcode)
    return {name: f"{name} ({roots.get(calls, opcode) if calls else what})"
            for name, (opcode, calls, what) in entry.items()}


def jax_profile(call: Any, labels: dict[str, str]) -> Any:
    """One call under JAX's profiler: each HLO op's time (events with an `hlo_op`), named by `labels`."""
    import glob
    import os
    import tempfile

    from jax import profiler

    with tempfile.TemporaryDirectory() as folder:
        with profiler.trace(folder):
            call()
        found = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        data = profiler.ProfileData.from_file(found[0]) if found else None
    rows: dict[str, list[float]] = {}
    for plane in data.planes if data is not None else ():
        for line in plane.lines:
            for event in line.events:
                op = dict(event.stats).get("hlo_op")
                if op and event.duration_ns > 0:
                    rows.setdefault(labels.get(str(op), str(op)), []).append(event.duration_ns / 1e6)
    return runtimes.runtime_profile(rows, "JAX profiler (jax.profiler, XLA's HLO ops)")


@register
class JaxXla(_Jax):
    spec = dataclasses.replace(
        _Jax.spec, name="jax",
        summary="jax.nn.dot_product_attention, implementation='xla' (materialises the logits in float32)",
        # jax/_src/nn/functions.py: XLA's CPU compiler has no float16 dot at F16_F16_F32.
        limits=jax_limits("jax", Limit(field="dtype", refused=("float16",), on="cpu", reason=(
            "XLA's CPU compiler refuses float16 here: \"The precision 'F16_F16_F32' is not "
            "supported by dot_general on CPU\""))),
        determinism=runtimes.answers("JAX"),
        cost=Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.5, efficiency_bwd=0.0, score_passes_fwd=4.0),
                  memory=MemoryCost(score_copies_fwd=2)),
        # XLA's CPU executable has no attention op: YNNPACK fusions and fusions rooted in dot, reduce,
        # exponential, divide.
        capabilities=dataclasses.replace(
            _Jax.capabilities, devices=("cpu",),
            kernel_names={"cpu": (r"^ynn_fusion", r"\((dot|exponential|reduce|divide)\)$")}))
    implementation = "xla"


@register
class JaxCudnn(_Jax):
    spec = dataclasses.replace(
        _Jax.spec, name="jax-cudnn",
        summary="jax.nn.dot_product_attention pinned to implementation='cudnn' (GPU; unverified here)",
        # check_layout and check_is_flash_attention (jax/_src/cudnn/fused_attention_stablehlo.py).
        limits=jax_limits(
            "jax-cudnn",
            Limit(field="dtype", allowed=HALF_DTYPES, reason=(
                "JAX's cuDNN attention takes fp16/bf16 only, not {dtype}: \"Q must be "
                "fp16/bf16/fp8_e4m3fn/fp8_e5m2\"")),
            Limit(field="head_dim", at_most=CUDNN_MAX_HEAD_DIM, multiple_of=8, reason=(
                "JAX's cuDNN attention refuses head_dim {head_dim}: \"The head dim must be <= "
                f"{CUDNN_MAX_HEAD_DIM} and a multiple of 8\" ({CUDNN_MAX_HEAD_DIM} "
                "from Hopper on, 128 before)")),
            Limit(field="causal", allowed=(True,), when="window", reason=(
                "JAX's cuDNN attention refuses a window without causal: \"cuDNN "
                "doesn't support right window\""))),
        determinism=always(REFUSED, "attnbench does not set XLA's GPU determinism flag "
                           "(--xla_gpu_deterministic_ops) for JAX's cuDNN attention"),
        capabilities=dataclasses.replace(_Jax.capabilities, devices=("cuda",),
                                         kernel_names=per_device(cuda=JAX_CUDNN_FMHA)),
        cost=Cost(cuda=KernelCost(pairs="visible", efficiency_fwd=0.45, efficiency_bwd=0.0)))
    implementation = "cudnn"
