"""JAX's `jax.nn.dot_product_attention`: `jax` (implementation='xla', the CPU path) and `jax-cudnn` (pinned to
implementation='cudnn', so that where cuDNN cannot run the call raises and is skipped with JAX's reason, never
falling back to XLA). The jit compile is setup; the timed call ends with `block_until_ready()` (dispatch is
asynchronous). Which kernel ran comes from the compiled HLO text."""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from attnbench.backends import runtimes
from attnbench.backends.base import Backend, Cost, KernelCost, Prepared, library_refusal
from attnbench.backends.conformance import LibraryCall
from attnbench.backends.registry import register
from attnbench.core.counting import MemoryCost

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

JAX_CALL = LibraryCall("jax.nn", "dot_product_attention", positional=("query", "key", "value"),
                       keywords=("mask", "is_causal", "local_window_size", "implementation"))
HLO_OPS = re.compile(r"=\s*\S+\s+(dot|fusion|custom-call|reduce|exponential|divide|select)\(")


class _Jax(Backend):
    library = "jax"
    install_hint = "pip install 'attnbench[jax]'"
    implementation: ClassVar[str]
    workload_axes = frozenset({"documents", "kv_lengths"})

    def availability(self, device: str) -> str | None:
        from attnbench.backends.base import device_problem, import_problem

        return (device_problem(device, self.devices, f"JAX's {self.implementation} attention does not run on {device}")
                or import_problem(lambda: __import__("jax"), "jax", "jax"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return (JAX_CALL,)

    def deterministic(self, case: Case) -> str:
        if self.implementation == "cudnn":
            return ("refused: attnbench does not set XLA's GPU determinism flag (--xla_gpu_deterministic_ops) for "
                    "JAX's cuDNN attention")
        return runtimes.deterministic("JAX", case)

    def unsupported(self, case: Case) -> str | None:
        if case.needs_grad:
            return runtimes.FORWARD_ONLY.format(runtime="JAX")
        if case.softcap is not None:
            return "jax.nn.dot_product_attention has no softcap"
        return runtimes.unmapped(case, self.name)

    def skip_reason(self, exc: BaseException, caught: list[warnings.WarningMessage]) -> str | None:
        return library_refusal(exc, "JAX", ("cuDNN", "cudnn", "Unsupported", "not supported"),
                               (ValueError, NotImplementedError, RuntimeError))

    def arguments(self, case: Case) -> tuple[dict[str, Any], Any, str]:
        """The keyword arguments for the conventions' (docs/conventions.md) mask, the boolean mask array (or None), and how it was given.
        JAX's is_causal and local_window_size count from the top-left corner: they are the conventions' (docs/conventions.md) only when
        Sq == Sk in one dense sequence; otherwise the mask is passed as a boolean array built here."""
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
        # BTNH / BSKH: a transpose of the canonical (B, H, S, D), copied into that layout outside the timed call.
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
        extra.update(hlo_kernels(compiled))
        return Prepared(inputs=(), call=call, to_tensor=to_tensor, to_canonical=lambda out: out.transpose(1, 2),
                        kernel=f"jax {jax.__version__} dot_product_attention implementation={self.implementation!r} "
                               f"({how}{', GQA native' if case.kv_heads != case.heads else ''})",
                        memory="rss", extra=extra)


def hlo_kernels(compiled: Any) -> dict[str, Any]:
    """The compiled HLO's entry-computation ops (dots, fusions, cuDNN custom calls) as kernel entries, and XLA's own
    memory analysis of the executable (its temporary buffer: the logits where they are materialised)."""
    text = compiled.as_text()
    counts: dict[str, int] = {}
    for line in text.splitlines():
        found = HLO_OPS.search(line)
        if found:
            target = re.search(r'custom_call_target="([^"]+)"', line)
            name = f"custom-call {target.group(1)}" if target else found.group(1)
            counts[name] = counts.get(name, 0) + 1
    extra: dict[str, Any] = {"kernels": [runtimes.kernel_entry(n, c, None, None) for n, c in counts.items()],
                             "kernels_source": "compiled HLO text (XLA)"}
    try:
        analysis = compiled.memory_analysis()
        extra["xla_temp_bytes"] = int(analysis.temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend of XLA reports it
        pass
    return extra


@register
class JaxXla(_Jax):
    name = "jax"
    summary = "jax.nn.dot_product_attention, implementation='xla' (materialises the logits in float32)"
    implementation = "xla"
    devices = ("cpu",)
    cost = Cost(cpu=KernelCost("dense", 0.5, 0.0, 4.0), memory=MemoryCost(score_copies_fwd=2))


@register
class JaxCudnn(_Jax):
    name = "jax-cudnn"
    summary = "jax.nn.dot_product_attention pinned to implementation='cudnn' (GPU; unverified here)"
    implementation = "cudnn"
    devices = ("cuda",)
    cost = Cost(cuda=KernelCost("visible", 0.45, 0.0))
