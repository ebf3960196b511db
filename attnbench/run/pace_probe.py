"""The machine's own pace through a run: one fixed workload timed in short windows between measurements, so
`compare` can divide out the machine's drift (attnbench.stats.change_rule). Attention in torch's own operators at
one shape, on the CPU: a GPU's pace is far steadier (core.policy), and a probe there would hold a CUDA context in
the parent."""

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
    """Seeded, so every run times the same numbers."""
    import torch

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*SHAPE, generator=generator) for _ in range(3))

    def call() -> Any:
        with torch.no_grad():
            return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1) @ v

    return call


@dataclass
class PaceProbe:
    """A window when `tick` comes at least EVERY_S after the last."""

    windows_ms: list[float] = field(default_factory=list)
    clock: Callable[[], float] = time.perf_counter
    _call: Callable[[], Any] | None = None
    _last: float = float("-inf")

    def tick(self) -> None:
        """Call between two measurements, never inside one."""
        now = self.clock()
        if now - self._last < EVERY_S:
            return
        self.windows_ms.append(self.window())
        self._last = self.clock()

    def finish(self) -> None:
        """After the last measurement: every run ends with two windows or more."""
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
        """env.json's `pace_probe`."""
        return {"workload": WORKLOAD, "windows_ms": [round(w, 6) for w in self.windows_ms],
                "median_ms": round(statistics.median(self.windows_ms), 6) if self.windows_ms else None}
