"""A record's `extra` as typed parts, each key declared once; None where the record states none."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
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
    implausible: dict[str, Any] | None = None
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
