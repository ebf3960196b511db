"""What a measurement records about its GPU right after the timing.

Each CUDA record carries `throttled` and, in `extra`, `sm_clock_mhz`, `power_w`, `clock_event_reasons` and
`other_gpu_processes` (or `gpu_state_error`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from attnbench.gpu.harness import harness_holds
from attnbench.gpu.judge import judged
from attnbench.gpu.read import Reader, default_reader
from attnbench.gpu.state import GpuId, GpuState, GpuStateError, torch_gpu


@dataclass(frozen=True)
class GpuSample:
    """The GPU right after one timing: its SM clock, power draw, clock event reasons, other processes, and
    whether any of it made the timing not the GPU's own (`throttled`, attnbench.gpu.judge)."""

    sm_clock_mhz: int | None = None
    power_w: float | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    other_processes: int | None = None  # how many processes not this run's were on the GPU
    throttled: bool | None = None
    error: str | None = None  # nothing could be read, and why

    @classmethod
    def of(cls, state: GpuState) -> GpuSample:
        """The sample a judged (light) read gives."""
        return cls(state.sm_clock_mhz, state.power_draw_w, state.clock_event_reasons, state.other_process_count,
                   state.throttled)

    def record_fields(self) -> dict[str, Any]:
        """The record's `throttled` and its `extra` entries (only `extra.gpu_state_error` when nothing was read)."""
        if self.error is not None:
            return {"extra": {"gpu_state_error": self.error}}
        reasons = None if self.clock_event_reasons is None else list(self.clock_event_reasons)
        return {"throttled": self.throttled,
                "extra": {"sm_clock_mhz": self.sm_clock_mhz, "clock_event_reasons": reasons,
                          "other_gpu_processes": self.other_processes, "power_w": self.power_w}}



def measurement_sample(gpu: GpuId, reader: Reader | None = None) -> GpuSample:
    """Read and judge the GPU right after a timing, from the measuring process (which holds a context on it);
    the harness that started it, where it said it holds one there too, is not another process."""
    try:
        state = (reader or default_reader()).read(gpu, full=False)
        state = judged(state, os.getpid(), holds_context=True, harness=harness_holds(gpu), parent_pid=os.getppid())
    except GpuStateError as exc:
        return GpuSample(error=str(exc))
    except Exception as exc:  # never costs the measurement: the record says what could not be read
        return GpuSample(error=f"{type(exc).__name__}: {exc}")
    return GpuSample.of(state)


def record_sample(fields: dict[str, Any], device: str, reader: Reader | None = None,
                  gpu: GpuId | None = None) -> None:
    """Put a measurement's GPU sample into its record fields (`throttled`, and `extra`); nothing on CPU."""
    if device != "cuda":
        return
    if gpu is None:
        import torch

        gpu = torch_gpu(torch.cuda.current_device())
    sample = measurement_sample(gpu, reader).record_fields()
    fields.setdefault("extra", {}).update(sample["extra"])
    if "throttled" in sample:
        fields["throttled"] = sample["throttled"]
