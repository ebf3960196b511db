"""Which reader (NVML, else nvidia-smi), and a judged snapshot of each GPU for env.json."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from typing import Any, Protocol

from attnbench.gpu.judge import judged
from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.smi import SmiReader
from attnbench.gpu.state import GpuId, GpuState, GpuStateError, torch_gpu

INSTALL_HINT = "pip install 'attnbench[nvml]'"


class Reader(Protocol):
    source: str

    def read(self, gpu: GpuId, full: bool) -> GpuState: ...

    def driver(self) -> str | None: ...


_READER: Reader | None = None
_READER_PROBLEM: str | None = None


def default_reader() -> Reader:
    global _READER, _READER_PROBLEM
    if _READER is not None:
        return _READER
    if _READER_PROBLEM is not None:
        raise GpuStateError(_READER_PROBLEM)
    try:
        import pynvml

        pynvml.nvmlInit()
        _READER = NvmlReader(pynvml)
        return _READER
    except ImportError:
        why = f"nvidia-ml-py is not installed ({INSTALL_HINT})"
    except Exception as exc:  # pynvml.NVMLError: no libnvidia-ml, a driver mismatch
        why = f"NVML did not start ({type(exc).__name__}: {exc})"
    if shutil.which("nvidia-smi"):
        _READER = SmiReader()
        return _READER
    _READER_PROBLEM = f"no NVML: {why}; and no nvidia-smi on PATH"
    raise GpuStateError(_READER_PROBLEM)


def snapshot(gpu: GpuId, reader: Reader | None = None, holds_context: bool = False) -> GpuState:
    """On failure, the reason under `error`."""
    source = driver = None
    try:
        reader = reader or default_reader()
        source, driver = reader.source, reader.driver()
        state = reader.read(gpu, full=True)
        return judged(replace(state, driver=driver), os.getpid(), holds_context)
    except GpuStateError as exc:
        return GpuState(gpu.index, source=source, driver=driver, error=str(exc))
    except Exception as exc:  # a driver surprise is recorded, never stops a run
        return GpuState(gpu.index, source=source, driver=driver, error=f"{type(exc).__name__}: {exc}")


def gpu_states(reader: Reader | None = None, gpus: list[GpuId] | None = None) -> list[GpuState]:
    if gpus is None:
        import torch

        gpus = [torch_gpu(index) for index in range(torch.cuda.device_count())]
    return [snapshot(gpu, reader) for gpu in gpus]


def env_fields(device: str) -> dict[str, Any]:
    """env.json's "gpu_state" on CUDA; nothing on CPU."""
    return {"gpu_state": [state.to_dict() for state in gpu_states()]} if device == "cuda" else {}
