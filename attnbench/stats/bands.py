"""The bands drawn and judged around a median, and the geometric mean of ratios."""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from attnbench.records.record import Record


class Number(Protocol):
    """A figure with its interval (stats.recommend's Number)."""

    value: float
    low: float
    high: float


def chart_band(record: Record) -> tuple[float, float]:
    """The band around a median: its interval, else the samples' 25th and 75th percentile, else median ± IQR/2."""
    if record.interval is not None:
        return record.interval
    samples = record.times_ms or []
    if len(samples) >= 2:
        q1, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 75])
        return float(q1), float(q3)
    median, iqr = float(record.time_ms), float(record.time_ms_iqr or 0.0)
    return max(median - iqr / 2, median * 1e-3), median + iqr / 2


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def widened(n: Number, noise: float) -> tuple[float, float]:
    """A number's interval widened by the device's run-to-run noise around its median (policy.run_to_run_noise)."""
    return min(n.low, n.value * (1 - noise)), max(n.high, n.value * (1 + noise))
