"""From a measurement's raw outcome to its record: what a run's records share, and the numbers derived from the
samples and the case (docs/conventions.md "Work")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from attnbench.core import counting
from attnbench.core.interval import Interval, median_interval, run_interval, summarize, two_modes
from attnbench.core.peaks import MeasuredRoofs, peak_for, roofs_peak
from attnbench.core.units import clipped
from attnbench.records.parts import SetupParts, part_of
from attnbench.records.record import judged
from attnbench.records.results import Record
from attnbench.timing.sampling import STOPS
from attnbench.timing.timers import Samples, TimingSettings

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case

MAX_REASON = 600


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    suite: str
    device_name: str | None = None
    # --peak-tflops / --peak-bandwidth
    peak_tflops: float | None = None
    peak_bandwidth_gbs: float | None = None
    # The calibration's, for extra.percent_of_measured_peak.
    measured_tflops: tuple[tuple[str, float], ...] = ()
    measured_bandwidth_gbs: float | None = None
    # A CPU's, measured at the run's start.
    roofs: MeasuredRoofs | None = None


def make_record(info: RunInfo, case: Case, backend: str, status: str, reason: str | None, fields: dict[str, Any],
                timer: str | None = None) -> Record:
    """`timer` is named only where samples were taken; a timing beyond the GPU's datasheet is `implausible`
    (records.record.judged)."""
    if reason is not None:
        reason = clipped(reason, MAX_REASON)
    return judged(Record(
        run_id=info.run_id, suite=info.suite, timestamp=now(), backend=backend, device_name=info.device_name,
        case_id=case.case_id, status=status, reason=reason,
        timer=timer if status in ("ok", "mismatch", "wrong_kernel") else None,
        **case.fields(), **fields,
    ))


def unmeasured(info: RunInfo, case: Case, backend: Backend, status: str, reason: str) -> Record:
    """A record with no numbers: skipped before it ran, or lost with a worker."""
    return make_record(info, case, backend.name, status, reason, work_fields(case, backend))


def work_fields(case: Case, backend: Backend) -> dict[str, Any]:
    return {"memory_estimate_bytes": backend.estimate_memory(case), "flops": counting.flops(case),
            "bytes_moved": backend.bytes_moved(case)}


@dataclass(frozen=True)
class Rates:
    tflops: float
    bandwidth_gbs: float


def throughput(case: Case, backend: Backend, median_ms: float) -> Rates:
    seconds = median_ms * 1e-3
    return Rates(counting.flops(case) / seconds / 1e12, backend.bytes_moved(case) / seconds / 1e9)


def timing_fields(samples: list[float], settings: TimingSettings, device: str,
                  window_medians: list[float] | None = None, stop: str | None = None) -> dict[str, Any]:
    """The interval is the run's (core.interval.run_interval) over `window_medians` (None: one window); `stop`:
    the timer's."""
    stats = summarize(samples)
    windows = window_medians if window_medians else [stats.median]
    made = run_interval(samples, windows, device, settings.confidence)
    within = median_interval(samples, settings.confidence)
    few = within.level < settings.confidence and made.windows < 2
    return {
        "time_ms": stats.median, "time_ms_iqr": stats.iqr, "time_ms_min": stats.minimum, "samples": len(samples),
        "times_ms": list(samples), "ci_low_ms": made.interval.low, "ci_high_ms": made.interval.high,
        "ci_source": "windows", "ci_level": made.interval.level, "stop": stop_of(samples, settings, within, stop),
        "noisy": few or made.windows_part > settings.precision,
    }


def stop_of(samples: list[float], settings: TimingSettings, interval: Interval, stop: str | None = None) -> str:
    """Why sampling stopped: as the timer says, else as the samples show."""
    if stop in STOPS:
        return stop
    if len(samples) >= settings.max_samples:
        return "max_samples"
    if interval.level >= settings.confidence and interval.half_width() <= settings.precision:
        return "precision"
    return "budget"


def bimodal_extra(samples: list[float]) -> dict[str, Any]:
    modes = two_modes(list(samples))
    if modes is None:
        return {}
    return {"bimodal": {"low_ms": modes.low, "high_ms": modes.high, "high_share": round(modes.high_share, 3)}}


def timing_extra(samples: Samples, timer_extra: dict[str, Any]) -> dict[str, Any]:
    """`bimodal`, warm-up, and the timer's own entries."""
    extra = bimodal_extra(list(samples.times))
    if samples.warmup_calls is not None:
        extra.update(warmup_ms=samples.warmup_ms, warmup_calls=samples.warmup_calls,
                     warmup_steady=samples.steady)
    extra.update(timer_extra)
    return extra


def percent_of_peak(case: Case, tflops: float, bandwidth_gbs: float, info: RunInfo,
                    fp32_math: str | None = None) -> tuple[float | None, dict[str, Any]]:
    """Percent of the roof (one query row: bandwidth; else the dtype's dense rate, on a CPU the run's measured
    roofs), and the `extra` saying which and whence; `above_roof` over 100%, which a wrong roof allows (far over a
    datasheet's, the timing is wrong: records.record.judged)."""
    if case.device == "cpu":
        peak = roofs_peak(info.roofs, case.dtype, info.peak_tflops, info.peak_bandwidth_gbs)
    else:
        peak = peak_for(info.device_name, case.dtype, info.peak_tflops, info.peak_bandwidth_gbs, fp32_math)
    if case.memory_bound:
        roof, achieved, source, bound = peak.bandwidth_gbs, bandwidth_gbs, peak.bandwidth_source, "memory"
    else:
        roof, achieved, source, bound = peak.tflops, tflops, peak.tflops_source, "compute"
    extra: dict[str, Any] = {"peak_bound": bound, "peak_source": source if roof else None}
    percent = 100.0 * achieved / roof if roof else None
    if roof:
        extra["peak"] = roof
    if percent is not None and percent > 100.0:
        extra["above_roof"] = True
    measured = (info.measured_bandwidth_gbs if bound == "memory"
                else dict(info.measured_tflops).get(case.dtype))
    if measured:
        extra.update(measured_peak=measured, percent_of_measured_peak=100.0 * achieved / measured)
    return percent, extra


def setup_fields(setup_s: float, extra: dict[str, Any]) -> SetupParts:
    """In ms: `setup_ms` is all of `prepare`; its parts are those `prepare` reports in `extra`."""
    setup = part_of(SetupParts, extra)
    parts = {name: float(value) * scale for name, value, scale in (
        ("mask_build", setup.mask_build_s, 1e3), ("compile", setup.compile_s, 1e3), ("plan", setup.plan_ms, 1.0))
        if value is not None}
    parts["other"] = max(0.0, setup_s * 1e3 - sum(parts.values()))
    return SetupParts(setup_ms=setup_s * 1e3, setup_parts=parts)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def pooled(record: Record, case: Case, backend: Backend, samples: list[float], settings: TimingSettings,
           info: RunInfo, rounds: list[dict[str, Any]]) -> Record:
    """`record` with its later rounds' samples joined, all derived from them made again (its plausibility too)."""
    import dataclasses

    fields = timing_fields(samples, settings, case.device, [r["median_ms"] for r in rounds])
    rates = throughput(case, backend, fields["time_ms"])
    fields.update(tflops=rates.tflops, bandwidth_gbs=rates.bandwidth_gbs)
    extra = dict(record.extra)
    extra.pop("bimodal", None)
    extra.update(bimodal_extra(samples))
    fields["percent_of_peak"], peak_extra = percent_of_peak(case, fields["tflops"], fields["bandwidth_gbs"], info,
                                                            record.checked.fp32_math)
    extra.update(peak_extra, rounds=rounds)
    return judged(dataclasses.replace(record, **fields, extra=extra))

