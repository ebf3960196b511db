"""What backends are ranked by, with each figure's interval: the median time, or the energy per call."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.core import policy
from attnbench.core.interval import CONFIDENCE, median_interval
from attnbench.records.record import Record

ENERGY_RESOLUTION = policy.ENERGY_RESOLUTION


@dataclass(frozen=True)
class Metric:
    """What backends are ranked by: the median time per call (ms), or the energy per call (mJ)."""

    name: str
    unit: str

    def value(self, record: Record) -> float | None:
        """The record's figure, or None when it has none."""
        if self.name == "time":
            value = record.time_ms
            return float(value) if value is not None and value > 0 else None
        energy = record.energy
        if energy.energy_mj is not None:
            return float(energy.energy_mj)
        if energy.joules_per_token is not None:  # tokens per call: batch × query length
            return float(energy.joules_per_token) * 1e3 * int(record.batch) * int(record.seq_len)
        return None

    def interval(self, record: Record) -> tuple[float, float] | None:
        """The record's median interval (from its samples when none was stored), or the energy resolution's."""
        if self.name == "energy":
            value = self.value(record)
            return None if value is None else (value * (1 - ENERGY_RESOLUTION), value * (1 + ENERGY_RESOLUTION))
        stored = record.interval
        level = record.ci_level
        if stored is not None and level is not None and level < CONFIDENCE and record.ci_source is None:
            # written before ci_source: the span of under 6 samples is no interval
            noise = policy.run_to_run_noise(str(record.device))
            median = float(record.time_ms)
            return median * (1 - noise), median * (1 + noise)
        if stored is not None:
            return stored
        samples = [float(s) for s in record.times_ms or []]
        if not samples:
            return None
        interval = median_interval(samples)
        return interval.low, interval.high


TIME = Metric("time", "ms")
ENERGY = Metric("energy", "mJ")
METRICS = {"time": TIME, "energy": ENERGY}
