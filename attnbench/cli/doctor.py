"""`attnbench doctor`: what this machine can run — devices, versions,
and every backend with its reason and fix."""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.gpu.describe import describe
from attnbench.gpu.read import INSTALL_HINT
from attnbench.gpu.state import GpuState
from attnbench.records.env import RunEnv

if TYPE_CHECKING:
    from attnbench.cli.probes import Probes

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
    # attnbench.backends.conformance's verdict: state ("ok", "mismatch", "n/a", "unchecked"), summary, and
    # each call.
    conformance: dict[str, Any] = field(default_factory=dict)
    # Backend.kernels(): where the library's compiled kernels would load from (FlashInfer's), when it says.
    kernels: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diagnosis:
    """Everything doctor found; `healthy` is what its exit code reports."""

    device: str
    environment: dict[str, Any]
    backends: list[BackendHealth]
    sdpa_kernels: dict[str, str] = field(default_factory=dict)
    probes: str | None = None  # where the backends' answers were reused from (cli.probes), when they were

    @property
    def gpu_state(self) -> list[dict[str, Any]]:
        """Each GPU's state from env.json's "gpu_state" (CUDA only; empty on CPU)."""
        return RunEnv.from_dict(self.environment).gpu_state or []

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
                "gpu_advice": gpu_advice(self.gpu_state), "probes": self.probes}


def diagnose(device: str, probes: Probes | None = None) -> Diagnosis:
    """Inspect this machine for `device` ("cpu" or "cuda", already resolved); each backend is asked through
    `probes` (default: asked now, nothing reused or stored)."""
    from attnbench.backends.registry import default_registry
    from attnbench.cli.probes import Probes
    from attnbench.run.env import collect_env
    from attnbench.sweep.suite import load_suite

    probes = probes or Probes(device)
    registry = default_registry()
    suite = load_suite(DEFAULT_SUITE, expand=False)  # only its backends: its cases are the tests' to check
    default = set(suite.model.backends or registry.names())
    backends = []
    for name in registry.names():
        backend = registry.get(name)
        reason = probes.availability(backend)
        if reason is None:
            state = "ok"
        elif device not in backend.capabilities.devices:
            state = "n/a"
            if "CUDA" not in reason:
                reason = f"{' and '.join(backend.capabilities.devices)} only; {reason}"
        else:
            state = "missing"
        fix = backend.install_hint if state == "missing" and backend.version() is None else None
        conformance = probes.conformance(backend)
        if state == "ok" and conformance["state"] == "mismatch":  # a run would skip it with this reason
            state, reason = "mismatch", conformance["summary"]
            fix = f"install a {backend.library} version attnbench's adapter knows, or update attnbench"
        backends.append(BackendHealth(name, state, backend.library, backend.version(), reason, fix,
                                      name in default, conformance, backend.kernels() or {}))
    environment = collect_env(device, torch_part=probes.torch_facts())
    probes.save()
    return Diagnosis(device, environment, backends, sdpa_kernel_usability(device), probes.note())


def sdpa_kernel_usability(device: str) -> dict[str, str]:
    """Whether SDPA's flash, efficient and cuDNN kernels accept a typical bf16 causal call here (MHA, and GQA
    as enable_gqa), and why not: a kernel may take one and refuse the other."""
    if device != "cuda":
        return {kernel: "no: CUDA only" for kernel in SDPA_KERNELS}
    import torch

    q = torch.zeros(1, 8, 256, 128, device="cuda", dtype=torch.bfloat16)
    kv_gqa = torch.zeros(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16)
    verdicts = {}
    for kernel, check in SDPA_KERNELS.items():
        probe = getattr(torch.backends.cuda, check, None)
        if probe is None:
            verdicts[kernel] = "unknown: this torch has no torch.backends.cuda." + check
            continue
        mha, mha_why = _usable(probe, torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, True, False))
        gqa, gqa_why = _usable(probe,
                               torch.backends.cuda.SDPAParams(q, kv_gqa, kv_gqa, None, 0.0, True, True))
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
    env = RunEnv.from_dict(diagnosis.environment)
    lines = [f"attnbench {env.attnbench} · python {env.python} · {env.platform}",
             f"torch {env.torch} · CUDA {env.cuda or 'none'} · cuDNN {env.cudnn or 'none'}",
             f"CPU: {env.cpu} ({env.cpu_count} cores)"]
    if env.gpus:
        for index, gpu in enumerate(env.gpus):
            lines.append(f"GPU {index}: {gpu['name']} · compute capability {gpu['capability']} · "
                         f"{gpu['memory_bytes'] / 2**30:.0f} GiB · driver {env.driver or 'unknown'}")
    else:
        lines.append("GPU: none visible to torch")
    lines.append(f"device attnbench would use: {diagnosis.device}")
    lines += gpu_lines(diagnosis.gpu_state)  # clocks, throttling, other processes; lock advice
    lines.append("")
    lines.append("SDPA kernels on this device: " + ", ".join(f"{k} {v}"
                                                             for k, v in diagnosis.sdpa_kernels.items()))
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
        if b.kernels:
            lines.append(f"{'':<{width}}  kernels      {b.kernels['state']}: {b.kernels['summary']}")
    lines.append("")
    if diagnosis.probes:
        lines.append(diagnosis.probes)
    if diagnosis.healthy:
        lines.append(f"ready: every backend of the default suite ({DEFAULT_SUITE}) that exists for "
                     f"{diagnosis.device} can run here")
    else:
        names = ", ".join(b.name for b in diagnosis.problems)
        lines.append(f"not ready: the default suite ({DEFAULT_SUITE}) names {names}, which "
                     "cannot run here (see fix)")
    return lines


# ---- the GPU's state: what it means for the timings, and how to lock the clocks
# ------------------------------

def lock_commands(state: GpuState) -> list[str]:
    """The nvidia-smi commands (as root) that lock this GPU's clocks at their maximum,
    and the ones that undo it."""
    gpu = state.nvml_index if state.nvml_index is not None else state.uuid or state.index
    sm = state.sm_clock_max_mhz or "<max SM MHz>"
    mem = state.memory_clock_max_mhz or "<max memory MHz>"
    return [f"sudo nvidia-smi -i {gpu} -pm 1    # persistence mode: settings stay between processes",
            f"sudo nvidia-smi -i {gpu} --lock-gpu-clocks={sm},{sm}    # -lgc; a lower clock the GPU can hold "
            f"under load also avoids power capping",
            f"sudo nvidia-smi -i {gpu} --lock-memory-clocks={mem},{mem}    # -lmc, where the GPU supports it",
            f"sudo nvidia-smi -i {gpu} --reset-gpu-clocks; sudo nvidia-smi -i {gpu} --reset-memory-clocks"
            f"    # -rgc, -rmc: undo"]


def gpu_warnings(state: GpuState) -> list[str]:
    """Warnings about a GPU whose numbers would not be the GPU's own, each a sentence."""
    index = state.index
    if state.error:
        hint = f" ({INSTALL_HINT}, or put nvidia-smi on PATH)" if "no NVML" in state.error else ""
        return [f"GPU {index}: its state (clocks, throttling, other processes) is not "
                f"recorded: {state.error}{hint}"]
    warnings = []
    if state.clocks_locked is not True:
        verdict = "are not locked" if state.clocks_locked is False else "may not be locked"
        warnings.append(f"GPU {index}: its SM clocks {verdict} ({state.clocks_lock_evidence}); boost and "
                        f"power management move them between runs, and the timings with them")
    if state.throttle_reasons:
        warnings.append(f"GPU {index}: throttled now ({', '.join(state.throttle_reasons)})")
    if state.other_process_count:
        listed = ", ".join(f"{p.pid} {p.name or '?'}" for p in state.other_processes or ())
        warnings.append(f"GPU {index}: {state.other_process_count} other process(es) on it ({listed}): "
                        f"their work shares the GPU with the measurements")
    if state.pid_namespace_differs:
        warnings.append(f"GPU {index}: NVML's process ids are not this process's (a container?): other "
                        f"processes are counted, not named")
    if state.persistence_mode is False:
        warnings.append(f"GPU {index}: persistence mode is off: the driver unloads between processes and "
                        f"clock settings do not stay")
    if state.mig:
        warnings.append(f"GPU {index}: MIG is on: the numbers are one slice's, not the whole GPU's")
    return warnings


def needs_lock(state: GpuState) -> bool:
    """Whether doctor should print the lock commands:
    the state was read and the clocks are not known locked."""
    return not state.error and state.clocks_locked is not True


def gpu_lines(stored: list[dict[str, Any]]) -> list[str]:
    """Each GPU's state (env.json's "gpu_state" entries), its warnings and, where clocks float,
    the lock commands."""
    lines = []
    for state in map(GpuState.from_dict, stored):
        lines.append(describe(state))
        lines += [f"warning: {warning}" for warning in gpu_warnings(state)]
        if needs_lock(state):
            lines.append("  to lock the clocks (as root; the last line undoes it):")
            lines += [f"    {command}" for command in lock_commands(state)]
    return lines


def gpu_advice(stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same for `doctor --json`: per GPU, its warnings and the lock commands when they apply."""
    states = list(map(GpuState.from_dict, stored))
    return [{"index": s.index, "clocks_locked": s.clocks_locked, "warnings": gpu_warnings(s),
             "lock_commands": lock_commands(s) if needs_lock(s) else []} for s in states]
