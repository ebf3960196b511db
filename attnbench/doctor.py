"""`attnbench doctor`: what this machine can run — devices, versions, and every backend with its reason and fix."""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from attnbench import gpustate

DEFAULT_SUITE = "long"
SDPA_KERNELS = {"flash": "can_use_flash_attention", "efficient": "can_use_efficient_attention",
                "cudnn": "can_use_cudnn_attention"}


@dataclass(frozen=True)
class BackendHealth:
    """One backend on this machine: `ok`, `n/a` (not made for this device), `missing` (fixable) or
    `mismatch` (its library is installed, but not with the signatures the adapter calls)."""

    name: str
    state: str
    library: str
    version: str | None
    reason: str | None
    fix: str | None
    in_default_suite: bool
    # attnbench.conformance's verdict: state ("ok", "mismatch", "n/a", "unchecked"), summary, and each call.
    conformance: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diagnosis:
    """Everything doctor found; `healthy` is what its exit code reports."""

    device: str
    environment: dict[str, Any]
    backends: list[BackendHealth]
    sdpa_kernels: dict[str, str] = field(default_factory=dict)

    @property
    def gpu_state(self) -> list[dict[str, Any]]:
        """Each GPU's state from env.json's "gpu_state" (CUDA only; empty on CPU)."""
        return self.environment.get("gpu_state") or []

    @property
    def problems(self) -> list[BackendHealth]:
        """Backends the default suite names that could run on this device but cannot now."""
        return [b for b in self.backends if b.in_default_suite and b.state in ("missing", "mismatch")]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "healthy": self.healthy, "environment": self.environment,
                "backends": [asdict(b) for b in self.backends], "sdpa_kernels": self.sdpa_kernels,
                "gpu_advice": gpustate.doctor_json(self.gpu_state)}


def diagnose(device: str) -> Diagnosis:
    """Inspect this machine for `device` ("cpu" or "cuda", already resolved)."""
    from attnbench.conformance import check_backend
    from attnbench.env import collect_env
    from attnbench.registry import default_registry
    from attnbench.suite import load_suite

    registry = default_registry()
    suite = load_suite(DEFAULT_SUITE)
    default = set(suite.model.backends or registry.names())
    backends = []
    for name in registry.names():
        backend = registry.get(name)
        reason = backend.availability(device)
        if reason is None:
            state = "ok"
        elif device not in backend.devices:
            state = "n/a"
            if "CUDA" not in reason:
                reason = f"{' and '.join(backend.devices)} only; {reason}"
        else:
            state = "missing"
        fix = backend.install_hint if state == "missing" and backend.version() is None else None
        conformance = check_backend(backend)
        if state == "ok" and conformance.state == "mismatch":  # a run would skip it with this reason
            state, reason = "mismatch", conformance.summary
            fix = f"install a {backend.library} version attnbench's adapter knows, or update attnbench"
        backends.append(BackendHealth(name, state, backend.library, backend.version(), reason, fix, name in default,
                                      conformance.to_dict()))
    return Diagnosis(device, collect_env(device), backends, sdpa_kernel_usability(device))


def sdpa_kernel_usability(device: str) -> dict[str, str]:
    """Whether SDPA's flash, efficient and cuDNN kernels accept a typical bf16 causal call here (MHA, and GQA
    as enable_gqa), and why not. On an H200 the efficient kernel takes MHA and refuses GQA: one GQA probe
    alone called it unusable."""
    import torch

    if device != "cuda":
        return {kernel: "no: CUDA only" for kernel in SDPA_KERNELS}
    q = torch.zeros(1, 8, 256, 128, device="cuda", dtype=torch.bfloat16)
    kv_gqa = torch.zeros(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    verdicts = {}
    for kernel, check in SDPA_KERNELS.items():
        probe = getattr(torch.backends.cuda, check, None)
        if probe is None:
            verdicts[kernel] = "unknown: this torch has no torch.backends.cuda." + check
            continue
        mha, mha_why = _usable(probe, torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, True, False))
        gqa, gqa_why = _usable(probe, torch.backends.cuda.SDPAParams(q, kv_gqa, kv_gqa, None, 0.0, True, True))
        if mha and gqa:
            verdicts[kernel] = "yes"
        elif mha:
            verdicts[kernel] = f"yes (MHA; GQA no: {gqa_why})"
        else:
            verdicts[kernel] = f"no: {mha_why}"
    return verdicts


def _usable(probe: Any, params: Any) -> tuple[bool, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        usable = probe(params, True)
    why = "; ".join(dict.fromkeys(str(w.message).strip() for w in caught))
    return bool(usable), why or "PyTorch gave no reason here (it may print one on stderr)"


def format_text(diagnosis: Diagnosis) -> list[str]:
    """Plain lines for a terminal or a bug report."""
    env = diagnosis.environment
    lines = [f"attnbench {env.get('attnbench')} · python {env.get('python')} · {env.get('platform')}",
             f"torch {env.get('torch')} · CUDA {env.get('cuda') or 'none'} · cuDNN {env.get('cudnn') or 'none'}",
             f"CPU: {env.get('cpu')} ({env.get('cpu_count')} cores)"]
    if env.get("gpus"):
        for index, gpu in enumerate(env["gpus"]):
            lines.append(f"GPU {index}: {gpu['name']} · compute capability {gpu['capability']} · "
                         f"{gpu['memory_bytes'] / 2**30:.0f} GiB · driver {env.get('driver') or 'unknown'}")
    else:
        lines.append("GPU: none visible to torch")
    lines.append(f"device attnbench would use: {diagnosis.device}")
    lines += gpustate.doctor_lines(diagnosis.gpu_state)  # clocks, throttling, other processes; lock advice
    lines.append("")
    lines.append("SDPA kernels on this device: " + ", ".join(f"{k} {v}" for k, v in diagnosis.sdpa_kernels.items()))
    lines.append("")
    width = max(len(b.name) for b in diagnosis.backends)
    for b in diagnosis.backends:
        version = f"{b.library} {b.version}" if b.version else f"{b.library} not installed"
        head = f"{b.name:<{width}}  {b.state:<7}  {version}"
        lines.append(head + (f" — {b.reason}" if b.reason else ""))
        if b.fix:
            lines.append(f"{'':<{width}}  fix:     {b.fix}")
        if b.conformance:
            lines.append(f"{'':<{width}}  conformance  {b.conformance['summary']}")
    lines.append("")
    if diagnosis.healthy:
        lines.append(f"ready: every backend of the default suite ({DEFAULT_SUITE}) that exists for "
                     f"{diagnosis.device} can run here")
    else:
        names = ", ".join(b.name for b in diagnosis.problems)
        lines.append(f"not ready: the default suite ({DEFAULT_SUITE}) names {names}, which cannot run here (see fix)")
    return lines
