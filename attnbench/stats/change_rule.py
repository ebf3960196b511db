"""When `compare` calls a change: the pace judged first, then each backend and each measurement against it.
The rules are docs/verdicts.md's; every threshold is in attnbench.core.policy."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from attnbench.core.policy import FAMILY_ALPHA, MIN_BACKEND_CASES, PRIOR_RATIOS
from attnbench.records.record import Record

MAD_TO_SD = 1.4826  # a normal distribution's standard deviation over its median absolute deviation
MEDIAN_ERROR = math.sqrt(math.pi / 2)  # the median's standard error over the mean's, for normal data


def observed_spread(ratios: list[float]) -> float:
    """The robust spread of the log ratios (1.4826 × their MAD); 0 for fewer than two."""
    if len(ratios) < 2:
        return 0.0
    logs = [math.log(r) for r in ratios]
    middle = statistics.median(logs)
    return MAD_TO_SD * statistics.median(abs(x - middle) for x in logs)


def spread_of(ratios: list[float], prior: float) -> float:
    """The ratios' spread pooled with `prior` weighed as PRIOR_RATIOS ratios:
    sqrt((w·prior² + (n-1)·observed²) / (w + n - 1))."""
    n = len(ratios)
    observed = observed_spread(ratios)
    return math.sqrt((PRIOR_RATIOS * prior ** 2 + max(0, n - 1) * observed ** 2) / (PRIOR_RATIOS + max(0, n - 1)))


def bar(judged: int) -> float:
    """The spreads a departure must exceed with `judged` judged at once: the two-sided normal quantile at
    FAMILY_ALPHA / judged (Bonferroni)."""
    return statistics.NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * max(1, judged)))


def beyond(ratio: float, threshold: float) -> bool:
    """Whether a ratio is a change beyond the threshold either way."""
    return ratio > 1 + threshold or ratio < 1 / (1 + threshold)


@dataclass(frozen=True)
class Pace:
    """The run's pace and whether it is a finding: beyond the threshold and beyond `bar` × its error."""

    value: float  # the median NEW/BASE ratio
    error: float  # standard error in log
    finding: bool

    @property
    def departure(self) -> float:
        """How many errors the pace is from 1."""
        return abs(math.log(self.value)) / max(self.error, 1e-12)


def judge_pace(ratios: list[float], spread: float, pace_noise: float, threshold: float) -> Pace | None:
    """The pace of `ratios` judged against the device's pace noise; None without ratios."""
    if not ratios:
        return None
    value = statistics.median(ratios)
    error = math.hypot(pace_noise, MEDIAN_ERROR * spread / math.sqrt(len(ratios)))
    finding = beyond(value, threshold) and abs(math.log(value)) > bar(1) * error
    return Pace(value, error, finding)


@dataclass(frozen=True)
class MachinePace:
    """NEW's median window of the reference workload over BASE's (attnbench.run.pace_probe), with its standard
    error in log."""

    value: float
    error: float


def machine_pace(base: dict[str, Any] | None, new: dict[str, Any] | None) -> MachinePace | None:
    """From two runs' env.json `pace_probe`; None unless both timed the same workload in two windows or more."""
    if not base or not new or base.get("workload") != new.get("workload"):
        return None
    sides = [[w for w in side.get("windows_ms") or [] if w and w > 0] for side in (base, new)]
    if min(map(len, sides)) < 2:
        return None
    medians = [statistics.median(windows) for windows in sides]
    error = math.hypot(*(MEDIAN_ERROR * observed_spread(windows) / math.sqrt(len(windows)) for windows in sides))
    return MachinePace(medians[1] / medians[0], error)


@dataclass(frozen=True)
class BackendShift:
    """A backend's across-the-board change: its ratios' geometric mean over the pace judged against."""

    backend: str
    geomean: float  # over the pace judged against
    cases: int
    changed: bool

    @property
    def slower(self) -> bool:
        return self.changed and self.geomean > 1


def backend_shifts(ratios: dict[str, list[float]], judged_pace: float, spreads: dict[str, float], shared_noise: float,
                   threshold: float) -> list[BackendShift]:
    """Each backend's shift, judged from MIN_BACKEND_CASES cases on, with an error of spread / √cases and
    `shared_noise` (the device's pace noise when ratios are judged raw)."""
    judged = [b for b, values in ratios.items() if len(values) >= MIN_BACKEND_CASES]
    standard_errors = bar(len(judged))
    out = []
    for backend, values in sorted(ratios.items()):
        departure = sum(math.log(r) for r in values) / len(values) - math.log(judged_pace)
        geomean = math.exp(departure)
        error = math.hypot(spreads[backend] / math.sqrt(len(values)), shared_noise)
        changed = backend in judged and abs(departure) > standard_errors * error and beyond(geomean, threshold)
        out.append(BackendShift(backend, geomean, len(values), changed))
    return out


def kernel_change(base: Record, new: Record) -> str | None:
    """"<backend> now runs K; no longer K'" when a kernel ran in one run's profiled call and not in the other's
    (three at most of each); None when the same kernels ran in any order, or one run did not profile."""
    before, after = base.kernels, new.kernels
    if not before or not after:
        return None
    had, has = {k["name"] for k in before}, {k["name"] for k in after}
    added = [k["name"] for k in after if k["name"] not in had]
    gone = [k["name"] for k in before if k["name"] not in has]
    if not added and not gone:
        return None

    def names(items: list[str]) -> str:
        return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")

    parts = ([f"now runs {names(added)}"] if added else []) + ([f"no longer {names(gone)}"] if gone else [])
    return f"{new.backend} {'; '.join(parts)}"
