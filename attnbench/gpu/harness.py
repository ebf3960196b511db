"""Which CUDA contexts on a GPU are this run's own harness: the measuring worker's parent is not another user
of the GPU and must not make a record `throttled`."""

from __future__ import annotations

import os

from attnbench.gpu.state import GpuId

# The GPUs (torch UUIDs) where the worker's parent holds a context.
HARNESS_GPUS_VAR = "ATTNBENCH_HARNESS_GPUS"


def contexts_held_here() -> list[str]:
    """UUIDs of the GPUs where this process holds a CUDA context (none is created)."""
    import torch

    if not torch.cuda.is_initialized():
        return []
    held = []
    for index in range(torch.cuda.device_count()):
        try:
            if torch._C._cuda_hasPrimaryContext(index):
                held.append(str(torch.cuda.get_device_properties(index).uuid))
        except (AttributeError, RuntimeError):  # an older torch: nothing discounted
            continue
    return held


def harness_holds(gpu: GpuId | None) -> bool:
    """Whether the parent named `gpu` (both spell the UUID as torch does)."""
    named = os.environ.get(HARNESS_GPUS_VAR, "").split(",")
    return gpu is not None and bool(gpu.uuid) and gpu.uuid in named
