"""Where a run's wall time went: the timing it asked for, the reference, and the harness's overhead."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnbench.records.results import Record


def process_start() -> float:
    """When this process started (time.time() seconds), from /proc/self/stat; elsewhere, this module's import."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime, the 22nd field; fields[0] is the 3rd
        with open("/proc/uptime", encoding="ascii") as uptime:
            booted = time.time() - float(uptime.read().split()[0])
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_IMPORTED = time.time()


@dataclass
class Tally:
    """Seconds of timed calls (samples, warm-up, the sustain loop, by the timers' clocks) and of references. A
    forward's checked call is warm-up spent (`extra.check_call_ms`) unless it joined the samples."""

    timed_s: float = 0.0
    reference_s: float = 0.0

    def add(self, record: Record) -> None:
        extra = record.extra
        check = 0.0 if extra.get("check_sampled") else float(extra.get("check_call_ms") or 0.0)
        loop = float((extra.get("sustain") or {}).get("ms") or 0.0)
        self.timed_s += (sum(record.times_ms) + float(extra.get("warmup_ms") or 0.0) + check + loop) / 1e3
        self.reference_s += float(record.extra.get("reference_s") or 0.0)

    @classmethod
    def of(cls, records: Iterable[Record]) -> Tally:
        tally = cls()
        for record in records:
            tally.add(record)
        return tally


def reference_line(tally: Tally, wall_s: float) -> str:
    share = tally.reference_s / wall_s if wall_s > 0 else 0.0
    return f"reference: {share:.0%} of wall ({tally.reference_s:.1f} s)"


def timed_line(tally: Tally, wall_s: float) -> str:
    """The run's last line: "timed 3.1 s of 3.9 s wall (1.26x)"."""
    ratio = f" ({wall_s / tally.timed_s:.2f}x)" if tally.timed_s > 0 else ""
    return f"timed {tally.timed_s:.1f} s of {wall_s:.1f} s wall{ratio}"
