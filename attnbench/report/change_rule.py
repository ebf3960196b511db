"""When `compare` calls a ratio a change: how far the run-to-run noise lets a ratio wander from the run's pace.

Two runs of one suite on one machine differ per measurement by the machine's wander between runs, which no
within-run interval holds. Its size is the robust spread of the log ratios (1.4826 × their median absolute deviation,
spread_of). Two rules judge against it, and each is corrected for how many ratios it judges at once, so that two
identical runs raise a false alarm in about FAMILY_ALPHA of comparisons however many measurements they hold:

- one measurement changed: its log ratio departs from the pace by more than bar(m) spreads, m the ratios judged
  (3.4 spreads for quick's 80; a single shape must move far to be believed among many);
- one backend changed across the board (backend_shifts): the mean of its log ratios departs from the pace by more
  than bar(b) standard errors (spread / √cases), b the backends judged. A kernel made 15% slower on every
  shape moves that mean by 15% with an error of a few percent: caught from all its cases together, where each case
  alone is within the noise.

Both also need the effect beyond the threshold (10% unless asked). benchmarks/compare_repeat.py counts the rules
over real runs. A kernel changed when another set of kernels ran (kernel_change), never when the same ones traded
places by time.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

# The chance that two identical runs get any change called, per rule, for log ratios spread normally around the pace:
# the two rules together stay within the 1 in 10 a user can live with.
FAMILY_ALPHA = 0.05
# The fewest ratios for a pace and a spread: a backend that regressed on a few of them cannot move either.
MIN_PACE = 8
# The fewest cases of a backend for its across-the-board shift to be judged.
MIN_BACKEND_CASES = 3


def spread_of(ratios: list[float]) -> float | None:
    """The robust spread of the log ratios (1.4826 × their median absolute deviation); None with under MIN_PACE."""
    if len(ratios) < MIN_PACE:
        return None
    logs = [math.log(r) for r in ratios]
    middle = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - middle) for x in logs)


def bar(judged: int) -> float:
    """How many spreads (or standard errors) a departure must exceed when `judged` are judged at once: the two-sided
    normal quantile at FAMILY_ALPHA / judged (Bonferroni), at least that of one."""
    return statistics.NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * max(1, judged)))


@dataclass(frozen=True)
class BackendShift:
    """A backend's across-the-board change: the geometric mean of its ratios over its matched cases, divided by the
    pace judged against; `changed` when it is beyond the threshold and beyond the noise (bar)."""

    backend: str
    geomean: float  # over the pace judged against
    cases: int
    changed: bool


def backend_shifts(ratios: dict[str, list[float]], pace: float | None, judged_pace: float, spread: float | None,
                   threshold: float) -> list[BackendShift]:
    """Each backend's shift (ratios: its matched cases' NEW/BASE), judged when it has MIN_BACKEND_CASES and the
    comparison a spread; `pace`: the run's median ratio; `judged_pace`: what ratios are divided by (1 or the pace)."""
    judged = [b for b, values in ratios.items() if len(values) >= MIN_BACKEND_CASES]
    standard_errors = bar(len(judged))
    out = []
    for backend, values in sorted(ratios.items()):
        mean = sum(math.log(r) for r in values) / len(values)
        geomean = math.exp(mean) / judged_pace
        changed = False
        if backend in judged and spread is not None:
            error = max(spread, 1e-9) / math.sqrt(len(values))
            beyond = abs(mean - math.log(pace or 1.0)) > standard_errors * error
            changed = beyond and (geomean > 1 + threshold or geomean < 1 / (1 + threshold))
        out.append(BackendShift(backend, geomean, len(values), changed))
    return out


def kernel_change(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """"<backend> now runs K; no longer K'" when a kernel ran in one run's profiled call and not in the other's
    (the largest first, three at most of each); None when the same kernels ran, in whatever order of time (two
    close ones trade places from run to run), or one run did not profile (docs/results.md "Which kernel ran")."""
    before, after = base.get("kernels"), new.get("kernels")
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
    return f"{new['backend']} {'; '.join(parts)}"
