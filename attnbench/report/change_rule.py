"""When `compare` calls a change: the pace judged first, then each backend and each measurement against it.

Two runs of one suite on one machine differ per measurement by the machine's wander between runs, which no
within-run interval holds, and as a whole by the machine's pace on the day. Every threshold is in the policy table
(attnbench.core.policy), measured per device on committed identical runs; docs/verdicts.md states the rules:

- the pace (the median NEW/BASE ratio) is a finding when it is beyond the threshold and beyond what identical runs on
  that device differ by (pace_noise, plus the median's own error): a shared slowdown fails the gate, never divided out;
  when both runs timed the machine's own pace (attnbench.run.pace_probe) on one machine with the same software, the
  kernels' pace is judged over the machine's (probe_noise, plus both medians' errors): the machine's drift is said,
  and divided out, and what the kernels share beyond it is the finding;
- ratios are judged against the pace only when it is not a finding and both runs are one machine with the same
  software; otherwise raw (over the machine's pace where both runs timed it, else over 1), with the device's pace
  (or probe) noise added to every error;
- every backend's mean ratio wanders from the pace between identical runs by the device's backend noise beyond its
  cases' own spread: it is added to the error of a backend's shift and of each of its measurements;
- the spread a ratio is judged against is the ratios' robust spread pooled with the device's ratio noise
  (PRIOR_RATIOS ratios' worth): with a few matches it leans on the device, with many on the runs; no count switches a
  rule on or off;
- one measurement changed: its log ratio departs from the pace judged against by more than bar(m) spreads, m the
  ratios judged; one backend changed across the board: the mean of its log ratios departs by more than bar(b)
  standard errors, b the backends judged. Both need the effect beyond the threshold, and a change is a regression
  only when that same departure is a slowdown.

A kernel changed when another set of kernels ran (kernel_change), never when the same ones traded places by time.
"""

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
    """The robust spread of the log ratios around their median (1.4826 × their median absolute deviation); 0 for
    fewer than two."""
    if len(ratios) < 2:
        return 0.0
    logs = [math.log(r) for r in ratios]
    middle = statistics.median(logs)
    return MAD_TO_SD * statistics.median(abs(x - middle) for x in logs)


def spread_of(ratios: list[float], prior: float) -> float:
    """The ratios' spread pooled with `prior` (a device's ratio noise, or a run's spread) as PRIOR_RATIOS ratios of
    it: sqrt((w·prior² + (n-1)·observed²) / (w + n - 1))."""
    n = len(ratios)
    observed = observed_spread(ratios)
    return math.sqrt((PRIOR_RATIOS * prior ** 2 + max(0, n - 1) * observed ** 2) / (PRIOR_RATIOS + max(0, n - 1)))


def bar(judged: int) -> float:
    """How many spreads (or standard errors) a departure must exceed when `judged` are judged at once: the two-sided
    normal quantile at FAMILY_ALPHA / judged (Bonferroni), at least that of one."""
    return statistics.NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * max(1, judged)))


def beyond(ratio: float, threshold: float) -> bool:
    """Whether a ratio is a change beyond the threshold either way."""
    return ratio > 1 + threshold or ratio < 1 / (1 + threshold)


@dataclass(frozen=True)
class Pace:
    """The run's pace and whether it is a finding: beyond the threshold and beyond `bar` × its error."""

    value: float  # the median NEW/BASE ratio
    error: float  # its standard error in log: the device's pace noise and the median's own error
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
    """The machine's own pace: NEW's median window of the reference workload over BASE's (attnbench.run.pace_probe),
    with its standard error in log (each side's windows' robust spread over √windows, as a median's)."""

    value: float
    error: float


def machine_pace(base: dict[str, Any] | None, new: dict[str, Any] | None) -> MachinePace | None:
    """The machine's pace from two runs' env.json `pace_probe`; None unless both timed the same workload in two
    windows or more."""
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
    """A backend's across-the-board change: the geometric mean of its ratios over its matched cases, divided by the
    pace judged against; `changed` when it is beyond the threshold and beyond the noise (bar)."""

    backend: str
    geomean: float  # over the pace judged against
    cases: int
    changed: bool

    @property
    def slower(self) -> bool:
        return self.changed and self.geomean > 1


def backend_shifts(ratios: dict[str, list[float]], judged_pace: float, spreads: dict[str, float], shared_noise: float,
                   threshold: float) -> list[BackendShift]:
    """Each backend's shift (ratios: its matched cases' NEW/BASE; spreads: each one's spread), judged when it has
    MIN_BACKEND_CASES: its mean log ratio against the pace judged against, with an error of spread / √cases and, when
    ratios are judged raw, the device's pace noise (`shared_noise`)."""
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
    (the largest first, three at most of each); None when the same kernels ran, in whatever order of time (two
    close ones trade places from run to run), or one run did not profile (docs/results.md "Which kernel ran")."""
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
