"""A record's parts as typed values, each key declared once (Record takes its flat fields from here)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

Part = TypeVar("Part")


def part_of(kind: type[Part], extra: dict[str, Any] | None) -> Part:
    """`kind` filled from `extra`'s keys of its fields' names."""
    extra = extra or {}
    return kind(**{f.name: extra.get(f.name) for f in fields(kind)})  # type: ignore[arg-type]


def entries_of(part: object) -> dict[str, Any]:
    """`part`'s stored `extra` entries: its fields that are not None, in order."""
    found = {f.name: getattr(part, f.name) for f in fields(part)}  # type: ignore[arg-type]
    return {name: value for name, value in found.items() if value is not None}


def unset(spec: Field) -> Any:
    return spec.default_factory() if spec.default is MISSING else spec.default  # type: ignore[misc]


def carried(part: Part) -> Part | None:
    """`part`, or None where each of its fields holds its default."""
    held = any(getattr(part, f.name) != unset(f) for f in fields(part))  # type: ignore[arg-type]
    return part if held else None


def read_part(kind: type[Part], flat: Callable[[str], Any], names: frozenset[str],
              extra: dict[str, Any] | None) -> Part | None:
    """`kind` from a record: its fields in `names` by `flat`, the rest from `extra` (or its `NESTED` entry)."""
    extra = extra or {}
    if kind in NESTED:
        extra = extra.get(NESTED[kind]) or {}
    return carried(kind(**{f.name: flat(f.name) if f.name in names else extra.get(f.name)  # type: ignore[arg-type]
                           for f in fields(kind)}))


@dataclass(frozen=True)
class Timing:
    """The samples and what the run made of them."""

    time_ms: float | None = None
    time_ms_iqr: float | None = None
    time_ms_min: float | None = None
    samples: int = 0
    times_ms: list[float] = field(default_factory=list)
    timer: str | None = None
    # ci_source: "windows" (core.interval.run_interval); older: "samples" or "run-to-run noise".
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    ci_level: float | None = None
    ci_source: str | None = None
    stop: str | None = None  # why sampling stopped: "precision", "budget" or "max_samples"
    noisy: bool = False


@dataclass(frozen=True)
class GpuReading:
    """The GPU's state after the timing (gpu.sample); `throttled` alone is a flat field."""

    # CUDA: the GPU was slowed or shared (attnbench.gpu.judge); None where not sampled.
    throttled: bool | None = None
    sm_clock_mhz: int | None = None
    power_w: float | None = None
    clock_event_reasons: list[str] | None = None
    other_gpu_processes: int | None = None
    gpu_state_error: str | None = None
    gpu: str | None = None
    gpu_name: str | None = None


@dataclass(frozen=True)
class Memory:
    peak_memory_bytes: int | None = None
    memory_method: str | None = None
    memory_estimate_bytes: int | None = None


@dataclass(frozen=True)
class Correctness:
    """The verdict's numbers."""

    max_abs_error: float | None = None
    error_bound: float | None = None
    rows_checked: int | None = None
    grad_checked: bool = False
    # None where not compared (attnbench.verify.repeat).
    repeatable: bool | None = None


@dataclass(frozen=True)
class Kernels:
    """The backend's kernel and what the profiled call ran."""

    kernel: str | None = None
    kernels: list[dict[str, Any]] | None = None
    kernels_reason: str | None = None
    kernels_source: str | None = None
    attention_share: float | None = None
    overhead: str | None = None
    trace: str | None = None


@dataclass(frozen=True)
class Integrity:
    integrity: list[str] | None = None  # the guards the measurement passed


@dataclass(frozen=True)
class Implausibility:
    """How many times each datasheet roof a GPU timing read (record.judged), and the verdict replaced."""

    compute: float | None = None
    memory: float | None = None
    was: str | None = None

    def roofs(self) -> dict[str, float]:
        return {name: value for name, value in (("compute", self.compute), ("memory", self.memory))
                if value is not None}


class Determinism(enum.StrEnum):
    """A backend's answer to `deterministic: true` (Backend.deterministic's sentence begins with it)."""

    HONOURED = "honoured"
    NOT_APPLICABLE = "not applicable"
    REFUSED = "refused"


@dataclass(frozen=True)
class DeterminismAnswer:
    kind: Determinism | None  # None: a sentence of none of the three
    reason: str  # the sentence as stored

    @classmethod
    def of(cls, text: object) -> DeterminismAnswer | None:
        """None when the run did not ask."""
        if text is None:
            return None
        return cls(next((k for k in Determinism if str(text).startswith(k.value)), None), str(text))


@dataclass(frozen=True)
class TimingParts:
    """The timer's work besides the samples."""

    warmup_ms: float | None = None
    check_ms: float | None = None
    check_sampled: bool | None = None
    check_call_ms: float | None = None
    sustain: dict[str, Any] | None = None
    phases_ms: dict[str, float] | None = None
    reference_s: float | None = None
    rounds: list[dict[str, Any]] | None = None
    bimodal: dict[str, float] | None = None


@dataclass(frozen=True)
class SetupParts:
    """One-time work outside the timed call."""

    setup_ms: float | None = None
    setup_parts: dict[str, float] | None = None
    compile_s: float | None = None
    mask_build_s: float | None = None
    plan_ms: float | None = None
    kernels_compiled: int | None = None
    cache_hits: int | None = None
    jit_built: list[str] | None = None


@dataclass(frozen=True)
class CorrectnessParts:
    """The check's detail."""

    error_vs_original: dict[str, Any] | None = None
    kernel_error: dict[str, Any] | None = None
    quantized: str | None = None
    repeat_max_diff: float | None = None
    repeat_tensor: str | None = None
    naive_relative_error: float | None = None
    reference_scale: float | None = None
    fp32_math: str | None = None
    dtype_limited: bool | None = None


@dataclass(frozen=True)
class EnergyParts:
    """Energy per call and per token from the sustained loop."""

    energy_mj: float | None = None
    joules_per_token: float | None = None
    energy_throttled: bool | None = None


@dataclass(frozen=True)
class RoofParts:
    """The roof the record was placed against, and whether its timing beat it."""

    peak: float | None = None
    peak_bound: str | None = None
    peak_source: str | None = None
    percent_of_measured_peak: float | None = None
    above_roof: bool | None = None


# The parts held as one `extra` entry, by its key.
NESTED: dict[type, str] = {Implausibility: "implausible"}
