"""Why a run's noisy timings stayed noisy: the windows each had against the windows the device's precision needs."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from attnbench.core import policy
from attnbench.core.interval import windows_needed
from attnbench.core.units import fmt_ms
from attnbench.records.record import Record


@dataclass(frozen=True)
class Unsettled:
    noisy: int
    timed: int
    had: int  # windows a noisy timing had (median)
    needed: int  # windows the device's precision needs at their spread (median)
    call_ms: tuple[float, float]  # the noisy timings' calls, shortest and longest
    device: str

    def line(self) -> str:
        own = policy.device(self.device)
        if self.needed <= self.had:
            why = "their windows disagree beyond the precision"
        else:
            why = (f"±{policy.percent(own.precision)} needs about {self.needed} windows at the spread their windows "
                   f"show (and this {self.device.upper()}'s window noise, {policy.percent(own.window_noise)}), and "
                   f"the budget gave them {self.had}")
        low, high = self.call_ms
        return (f"{self.noisy} of {self.timed} timings are noisy (marked ~, drawn hollow): {why}; their calls take "
                f"{fmt_ms(low)}–{fmt_ms(high)} ms.")


def unsettled(timed: list[Record]) -> Unsettled | None:
    """None when no timing with windows is noisy."""
    noisy = [r for r in timed if r.noisy and r.times_ms and r.timing_parts.rounds]
    if not noisy:
        return None
    had, needed = [], []
    for record in noisy:
        windows = [w["median_ms"] for w in record.timing_parts.rounds or []]
        had.append(len(windows))
        needed.append(windows_needed(windows, record.device, policy.device(record.device).precision))
    calls = [float(r.time_ms) for r in noisy if r.time_ms]
    return Unsettled(sum(1 for r in timed if r.noisy), len(timed), round(statistics.median(had)),
                     round(statistics.median(needed)), (min(calls), max(calls)), str(noisy[0].device))
