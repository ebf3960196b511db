"""The environment a run happened in, for env.json."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import attnbench
from attnbench.gpu import read as gpu_read

# Libraries whose versions matter beside the backends' own (Backend.library): PyTorch, its compiler, the inputs'.
UNDERLYING = ("torch", "triton", "numpy")


def libraries() -> tuple[str, ...]:
    from attnbench.backends.registry import default_registry

    registry = default_registry()
    libraries = (registry.get(name).library for name in registry.names())
    return tuple(dict.fromkeys([*UNDERLYING[:2], *libraries, *UNDERLYING[2:]]))


def cpu_only_torch() -> bool:
    """A CPU-only torch by its version tag (2.13.0+cpu), known without importing it."""
    try:
        return importlib.metadata.version("torch").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def resolve_device(requested: str) -> str:
    """"auto": "cuda" when present, else "cpu"; "cuda" without one is a user error."""
    if requested == "cpu" or (requested == "auto" and cpu_only_torch()):
        return "cpu"
    import torch

    from attnbench.core.errors import AttnbenchError

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise AttnbenchError("--device cuda: no CUDA device is available here (torch "
                             f"{torch.__version__}, built with CUDA {torch.version.cuda}); use --device cpu or auto")
    if requested not in ("cpu", "cuda"):
        raise AttnbenchError(f"--device {requested}: unknown device; allowed: auto, cpu, cuda")
    return requested


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return cpu_name()


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in libraries():
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def git_commit() -> str | None:
    root = Path(attnbench.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def torch_facts() -> dict[str, Any]:
    import torch

    from attnbench.run.devices import physical_gpu

    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append({"name": props.name, "capability": f"{props.major}.{props.minor}",
                         "memory_bytes": props.total_memory,
                         "physical_id": physical_gpu(index, os.environ.get("CUDA_VISIBLE_DEVICES"))})
    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads(), "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None, "gpus": gpus}


def collect_env(device: str, torch_part: dict[str, Any] | None = None) -> dict[str, Any]:
    """`torch_part`: torch_facts() if already known."""
    facts = torch_facts() if torch_part is None else torch_part
    gpus = facts["gpus"]
    return {
        "attnbench": attnbench.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "slurm": slurm_job(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch": facts["torch"],
        "torch_threads": facts["torch_threads"],
        "cuda": facts["cuda"],
        "cudnn": facts["cudnn"],
        "gpu_count": len(gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": gpus,
        "driver": nvidia_driver() if gpus else None,
        "libraries": library_versions(),
        "git_commit": git_commit(),
        "device": device,
        "device_name": device_name(device),
        **gpu_read.env_fields(device),  # "gpu_state" per visible GPU on CUDA
    }


def slurm_job(environ: dict[str, str] | None = None) -> dict[str, str | None] | None:
    source = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in source:
        return None
    variables = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID",
                 "array_task_id": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME"}
    return {field: source.get(variable) for field, variable in variables.items()}
