"""The machine's own pace through a run: one fixed workload timed in short windows between the run's measurements.

Two runs of one suite on one machine differ as a whole by the machine's pace on the day (on a shared machine every
kernel drifts together), which the kernels alone cannot tell from a change most of them share. A workload that no
backend, plugin or suite changes, timed all through both runs, measures the machine's part; `compare` divides it out
when both runs carry it and ran the same software on the same machine (attnbench.report.change_rule).

The workload is attention written out in torch's own operators (q·kᵀ, softmax, ·v) at one fixed shape in float32:
close to what the measured calls do, and a function of torch and the machine only. It runs on the CPU: a GPU's pace
is far steadier (core.policy), and a probe there would hold a CUDA context in the parent.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WORKLOAD = "torch softmax(q·kᵀ/8)·v, float32, 1×8×256×64, 2 warm-up calls, then calls for 20 ms; the median call"
SHAPE = (1, 8, 256, 64)
WINDOW_S = 0.02  # one window's calls
EVERY_S = 0.5  # the least time between two windows


def reference_call() -> Callable[[], Any]:
    """The probe's call on fixed inputs (seeded, so every run times the same numbers)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*SHAPE, generator=generator) for _ in range(3))

    def call() -> Any:
        with torch.no_grad():
            return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v

    return call


@dataclass
class PaceProbe:
    """Windows of the reference call, taken when `tick` is called at least EVERY_S after the last one."""

    windows_ms: list[float] = field(default_factory=list)
    clock: Callable[[], float] = time.perf_counter
    _call: Callable[[], Any] | None = None
    _last: float = float("-inf")

    def tick(self) -> None:
        """Time one window if EVERY_S has passed since the last: call it between two measurements, never inside one."""
        now = self.clock()
        if now - self._last < EVERY_S:
            return
        self.windows_ms.append(self.window())
        self._last = self.clock()

    def finish(self) -> None:
        """The last window, after the run's last measurement: a run of any length ends with two windows or more."""
        if self.windows_ms:
            self.windows_ms.append(self.window())

    def window(self) -> float:
        """The median of one window's calls (ms)."""
        if self._call is None:
            self._call = reference_call()
        call = self._call
        call(), call()
        times: list[float] = []
        end = time.perf_counter() + WINDOW_S
        while len(times) < 3 or time.perf_counter() < end:
            start = time.perf_counter()
            call()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    def to_dict(self) -> dict[str, Any]:
        """What env.json's `pace_probe` holds: the workload in words, every window's median, and their median."""
        return {"workload": WORKLOAD, "windows_ms": [round(w, 6) for w in self.windows_ms],
                "median_ms": round(statistics.median(self.windows_ms), 6) if self.windows_ms else None}
