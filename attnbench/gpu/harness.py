"""Which CUDA contexts on a GPU are this run's own harness: the parent of a measuring worker names its GPUs.

The worker samples its GPU right after each timing; the parent (which may hold a context there too, from a
library's availability probe) is not another user of the GPU and must not make the record `throttled`.
"""

from __future__ import annotations

import os

from attnbench.gpu.state import GpuId

# A measuring worker's parent (the harness) names, in this variable, the GPUs (by torch UUID) where it holds a
# CUDA context itself: on those the worker does not count it as another process.
HARNESS_GPUS_VAR = "ATTNBENCH_HARNESS_GPUS"


def contexts_held_here() -> list[str]:
    """UUIDs of the GPUs where this process holds a CUDA context (none is created to find out)."""
    import torch

    if not torch.cuda.is_initialized():
        return []
    held = []
    for index in range(torch.cuda.device_count()):
        try:
            if torch._C._cuda_hasPrimaryContext(index):
                held.append(str(torch.cuda.get_device_properties(index).uuid))
        except (AttributeError, RuntimeError):  # an older torch: nothing known, nothing discounted
            continue
    return held


def harness_holds(gpu: GpuId | None) -> bool:
    """Whether this process's parent (the harness) said it holds a context on `gpu`. Parent and worker both
    spell the UUID as torch gives it (contexts_held_here, torch_gpu)."""
    named = os.environ.get(HARNESS_GPUS_VAR, "").split(",")
    return gpu is not None and bool(gpu.uuid) and gpu.uuid in named
