"""What a measurement records about its GPU right after the timing, and those samples' span over a run."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from attnbench.gpu.harness import harness_holds
from attnbench.gpu.judge import judged
from attnbench.gpu.read import Reader, default_reader
from attnbench.gpu.state import REASONS, GpuId, GpuState, GpuStateError, torch_gpu


@dataclass(frozen=True)
class GpuSample:
    sm_clock_mhz: int | None = None
    power_w: float | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    other_processes: int | None = None  # not this run's
    throttled: bool | None = None
    error: str | None = None  # why nothing could be read

    @classmethod
    def of(cls, state: GpuState) -> GpuSample:
        return cls(state.sm_clock_mhz, state.power_draw_w, state.clock_event_reasons,
                   state.other_process_count, state.throttled)

    def record_fields(self) -> dict[str, Any]:
        """`throttled` and the `extra` entries (only `gpu_state_error` when nothing was read)."""
        if self.error is not None:
            return {"extra": {"gpu_state_error": self.error}}
        reasons = None if self.clock_event_reasons is None else list(self.clock_event_reasons)
        return {"throttled": self.throttled,
                "extra": {"sm_clock_mhz": self.sm_clock_mhz, "clock_event_reasons": reasons,
                          "other_gpu_processes": self.other_processes, "power_w": self.power_w}}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> GpuSample | None:
        """None for a record without one (CPU, or not timed)."""
        extra = record.get("extra") or {}
        if "gpu_state_error" in extra:
            return cls(error=str(extra["gpu_state_error"]))
        if not {"sm_clock_mhz", "clock_event_reasons", "other_gpu_processes"} & set(extra):
            return None
        reasons = extra.get("clock_event_reasons")
        return cls(extra.get("sm_clock_mhz"), extra.get("power_w"),
                   None if reasons is None else tuple(reasons), extra.get("other_gpu_processes"),
                   record.get("throttled"))


def measurement_sample(gpu: GpuId, reader: Reader | None = None) -> GpuSample:
    """Read and judged from the measuring process;
    a harness that holds a context there is not another process."""
    try:
        state = (reader or default_reader()).read(gpu, full=False)
        state = judged(state, os.getpid(), holds_context=True, harness=harness_holds(gpu),
                       parent_pid=os.getppid())
    except GpuStateError as exc:
        return GpuSample(error=str(exc))
    except Exception as exc:  # never costs the measurement
        return GpuSample(error=f"{type(exc).__name__}: {exc}")
    return GpuSample.of(state)


def sampled_parts(device: str, reader: Reader | None = None, gpu: GpuId | None = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record's fields (`throttled`) and `extra` entries of the GPU's state now; nothing on CPU."""
    if device != "cuda":
        return {}, {}
    if gpu is None:
        import torch

        gpu = torch_gpu(torch.cuda.current_device())
    sample = measurement_sample(gpu, reader).record_fields()
    extra = sample.pop("extra")
    return sample, extra


def record_sample(fields: dict[str, Any], device: str, reader: Reader | None = None,
                  gpu: GpuId | None = None) -> None:
    """`sampled_parts` written into a record's fields."""
    top, extra = sampled_parts(device, reader, gpu)
    if extra:
        fields.setdefault("extra", {}).update(extra)
    fields.update(top)


@dataclass(frozen=True)
class RunSpan:
    gpu: str | None  # extra.gpu when the run used several GPUs
    timings: int  # records with a sample (read or not)
    sm_clock_mhz: tuple[int, int] | None  # lowest and highest
    power_w: tuple[float, float] | None
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> timings that showed it
    shared: int = 0
    throttled: int = 0
    unread: int = 0


def run_span(records: Iterable[dict[str, Any]]) -> list[RunSpan]:
    """One per GPU the records were timed on; empty when none has a sample."""
    by_gpu: dict[str | None, list[GpuSample]] = {}
    for record in records:
        sample = GpuSample.from_record(record)
        if sample is not None:
            gpu = (record.get("extra") or {}).get("gpu")
            by_gpu.setdefault(None if gpu is None else str(gpu), []).append(sample)
    return [_span(gpu, samples) for gpu, samples in by_gpu.items()]


def _span(gpu: str | None, samples: list[GpuSample]) -> RunSpan:
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
    power = [s.power_w for s in samples if s.power_w is not None]
    seen = Counter(name for s in samples for name in s.clock_event_reasons or ())
    order = {name: n for n, name in enumerate(REASONS.values())}
    reasons = dict(sorted(seen.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))
    return RunSpan(gpu, len(samples), (min(clocks), max(clocks)) if clocks else None,
                   (min(power), max(power)) if power else None, reasons,
                   sum(1 for s in samples if s.other_processes), sum(1 for s in samples if s.throttled),
                   sum(1 for s in samples if s.error is not None))
