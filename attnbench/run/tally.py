"""Where a run's wall time went: the phases every second is timed into (the one list of their names), the timing
asked for, the reference, and what no phase holds."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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

# The phases of a run (docs/run-time.md "Where the time goes"): name, what it holds.
PHASES: dict[str, str] = {
    "samples": "the timed samples, by the timer's clock",
    "warmup": "the warm-up calls thrown away, by the timer's clock",
    "timer": "the timer's work around its calls (the L2 flush, the launch cover, syncs, an untimed first call) and "
             "the GPU's state read after them",
    "sustain": "the sustained-state loop before the samples",
    "reference": "the case's float64 reference and its naive run in the case's dtype",
    "inputs": "the case's seeded inputs",
    "availability": "whether the backend runs here: its library imported and its calls checked, once a process",
    "check": "the checked call, its gradients and its judgement against the reference",
    "prepare": "a backend's prepare beside its compile: masks, plans, layouts",
    "compile": "compiles and cache loads inside measurements",
    "memory": "the call that reads a backward's peak memory when the timer did not make it",
    "repeat": "the repeatability check's calls and comparison",
    "guards": "the integrity guards around the profiled call: other inputs made, and their checks",
    "profile": "the profiled call",
    "trace": "--trace's traced sample and the trace files written",
    "release": "freeing a measurement's memory after it",
    "statistics": "a record's numbers from its samples: the interval, throughput, errors, peak share",
    "records": "each record written to results.jsonl",
    "rounds": "later rounds and refining, beside their samples",
    "pace": "the pace probe's windows between measurements (CPU)",
    "worker_start": "starting worker processes: interpreter, imports, CUDA context, the profiler's first session",
    "worker_stop": "waiting for the last worker to exit",
    "compile_ahead": "the compile phase before the first measurement",
    "calibration": "the device's throughput for the forecast, and a CPU's roofs",
    "startup": "from the process's start to the run's first step: interpreter, imports, the suite",
    "env": "the forecast and env.json: versions, GPU state",
    "report": "the summary tables and the report",
}

# The record's `extra.setup_parts` entries, by phase.
SETUP_PHASES = {"mask_build": "prepare", "plan": "prepare", "other": "prepare", "compile": "compile",
                "profile": "profile", "trace": "trace"}


class Phases:
    """Seconds per phase, added or timed as `with phases.timing(name):`, and how many times a phase began where it
    is counted (worker starts)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, seconds: float, times: int = 0) -> None:
        assert name in PHASES, name
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if times:
            self.counts[name] = self.counts.get(name, 0) + times

    @contextlib.contextmanager
    def timing(self, name: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.add(name, self.clock() - start)

    def ms(self) -> dict[str, float]:
        return {name: round(seconds * 1e3, 3) for name, seconds in self.seconds.items()}


def record_phases(record: Record) -> dict[str, float]:
    """A measurement's seconds by phase, from what its record holds."""
    timing, setup = record.timing_parts, record.setup
    samples = sum(record.times_ms or ()) / 1e3
    warmup = float(timing.warmup_ms or 0.0) / 1e3
    phases = {"samples": samples, "warmup": warmup,
           "sustain": float((timing.sustain or {}).get("ms") or 0.0) / 1e3,
           "reference": float(timing.reference_s or 0.0)}
    parts = setup.setup_parts
    if parts is None:  # written before setup_parts: what prepare reported
        parts = {p: float(s) * 1e3 for p, s in (("compile", setup.compile_s), ("mask_build", setup.mask_build_s))
                 if s is not None}
    for part, ms in parts.items():
        phase = SETUP_PHASES.get(part, "prepare")
        phases[phase] = phases.get(phase, 0.0) + float(ms) / 1e3
    if timing.phases_ms is None and timing.check_ms:  # written before phases_ms: a forward's checked call
        phases["check"] = float(timing.check_ms) / 1e3
    for phase, ms in (timing.phases_ms or {}).items():
        phases[phase] = phases.get(phase, 0.0) + float(ms) / 1e3
    if "check" in phases and timing.check_sampled:  # the checked call is a sample too
        phases["check"] = max(0.0, phases["check"] - float(timing.check_call_ms or 0.0) / 1e3)
    if "timer" in phases:  # the timer stage's wall holds its samples and warm-up
        phases["timer"] = max(0.0, phases["timer"] - samples - warmup)
    return {name: seconds for name, seconds in phases.items() if seconds}


@dataclass
class Tally:
    """Seconds of timed calls (samples, warm-up, the sustain loop, by the timers' clocks), of references, and of
    every phase the records hold. A forward's checked call is warm-up spent (`extra.check_call_ms`) unless it
    joined the samples."""

    timed_s: float = 0.0
    reference_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)

    def add(self, record: Record) -> None:
        timing = record.timing_parts
        check = 0.0 if timing.check_sampled else float(timing.check_call_ms or 0.0)
        loop = float((timing.sustain or {}).get("ms") or 0.0)
        self.timed_s += (sum(record.times_ms) + float(timing.warmup_ms or 0.0) + check + loop) / 1e3
        self.reference_s += float(timing.reference_s or 0.0)
        for name, seconds in record_phases(record).items():
            self.phases[name] = self.phases.get(name, 0.0) + seconds

    @classmethod
    def of(cls, records: Iterable[Record]) -> Tally:
        tally = cls()
        for record in records:
            tally.add(record)
        return tally


def wall_phases(tally: Tally, run: dict[str, float], workers: int = 1) -> dict[str, float]:
    """The records' phases and the run's own (`run`), in PHASES' order; `workers` measuring side by side share the
    wall, so the records' phases count by their mean over them."""
    both = {name: tally.phases.get(name, 0.0) / workers + run.get(name, 0.0) for name in PHASES}
    return {name: seconds for name, seconds in both.items() if seconds > 0}


def actual(tally: Tally, run: Phases, wall_s: float, measured: int, workers: int = 1) -> dict[str, Any]:
    """env.json's `actual`: the wall, where it went (the records' phases and the run's own), and what no phase
    holds."""
    phases = wall_phases(tally, run.seconds, workers)
    return {"wall_s": round(wall_s, 2), "timed_s": round(tally.timed_s, 2), "reference_s": round(tally.reference_s, 2),
            "measured": measured,
            "phases_s": {name: round(seconds, 3) for name, seconds in phases.items() if round(seconds, 3)},
            "phase_counts": dict(run.counts), "workers": workers,
            "unattributed_s": round(wall_s - sum(phases.values()), 2)}


def reference_line(tally: Tally, wall_s: float) -> str:
    share = tally.reference_s / wall_s if wall_s > 0 else 0.0
    return f"reference: {share:.0%} of wall ({tally.reference_s:.1f} s)"


def wall_line(phases: dict[str, float], wall_s: float, least_s: float = 0.05) -> str:
    """Where the wall went, largest first: "wall 12.3 s: compile 5.1 s, samples 3.0 s, ..., unattributed 0.4 s (3%)".
    Phases under `least_s` are left out of the line (not of the remainder)."""
    shown = sorted(((s, n) for n, s in phases.items() if s >= least_s), reverse=True)
    rest = wall_s - sum(phases.values())
    share = f" ({rest / wall_s:.0%})" if wall_s > 0 else ""
    parts = [f"{name.replace('_', ' ')} {seconds:.1f} s" for seconds, name in shown]
    return f"wall {wall_s:.1f} s: {', '.join([*parts, f'unattributed {rest:.1f} s{share}'])}"


def timed_line(tally: Tally, wall_s: float) -> str:
    """The run's last line: "timed 3.1 s of 3.9 s wall (1.26x)"."""
    ratio = f" ({wall_s / tally.timed_s:.2f}x)" if tally.timed_s > 0 else ""
    return f"timed {tally.timed_s:.1f} s of {wall_s:.1f} s wall{ratio}"
