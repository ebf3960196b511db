"""The report's view of device peaks: the one table lives in attnbench.core.peaks, shared with the runner."""

from __future__ import annotations

from attnbench.core.peaks import PEAKS, Peak, peak_bandwidth_for, peak_for, peak_tflops_for

__all__ = ["PEAKS", "Peak", "peak_bandwidth_for", "peak_for", "peak_tflops_for"]
