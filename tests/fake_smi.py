"""A stand-in for running nvidia-smi that prints what it printed on an idle NVIDIA H200 (tests/data/gpu), and that
H200 as torch names it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnbench.gpu.state import GpuId
from tests.fake_nvml import H200_BUS, H200_UUID

DATA = Path(__file__).parent / "data" / "gpu"
QUERY = (DATA / "nvidia-smi-query.csv").read_text()  # `nvidia-smi --query-gpu=... --format=csv`, idle H200
APPS = (DATA / "nvidia-smi-apps.csv").read_text()  # `--query-compute-apps=...`: header only, no process
# torch's view of the same GPU: its uuid without NVML's prefix, its PCI address.
H200 = GpuId(0, H200_UUID[len("GPU-"):], H200_BUS)


def smi(query: str = QUERY, apps: str = APPS, calls: list[list[str]] | None = None) -> Callable[[list[str]], str]:
    """Runs 'nvidia-smi' by printing the recorded outputs (`calls` collects the arguments asked for)."""
    def run(args: list[str]) -> str:
        if calls is not None:
            calls.append(args)
        return apps if args[0].startswith("--query-compute-apps") else query
    return run
