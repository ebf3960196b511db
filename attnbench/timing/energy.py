"""Energy per call from cumulative energy counters: NVML's per GPU (attnbench.gpu.energy), RAPL's per CPU package.

A measurement reads a counter, runs the timed call `calls` times in a loop lasting at least MIN_LOOP_S, reads it
again, and `loop_energy` turns the two readings into energy per call, joules per token and average power. The
arithmetic is the same for both counters, so it lives here, beside the CPU's reader, and the GPU package only
reads NVML's counter into an EnergyReading.

Where no figure can be had, EnergyUnavailable says why in words fit for a record's `skipped` reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# The shortest loop a counter is read around. NVML documents no update period for its total energy counter;
# it has been seen to step every ~10 ms (pynvml's test of it) to 20-100 ms on newer GPUs (PETSc's notes on
# nvmlDeviceGetTotalEnergyConsumption). RAPL's registers update about every millisecond. One second keeps a
# counter's step under a tenth of what is measured (issue 23: "a loop of the timed call lasting at least one
# second (the counter's resolution)").
MIN_LOOP_S = 1.0
POWERCAP = Path("/sys/class/powercap")


class EnergyUnavailable(Exception):
    """No energy figure for this loop, and why (no counter, unreadable, a loop too short, a counter reset)."""


@dataclass(frozen=True)
class Zone:
    """One counter: a GPU's, or one CPU package's."""

    name: str  # "GPU 0", "package-0"
    count: int  # in the reading's unit, since some origin (driver load, boot)
    wrap: int | None  # the counter starts again from 0 past this (RAPL's max_energy_range_uj); None: never wraps


@dataclass(frozen=True)
class EnergyReading:
    """The energy counters of one device at one moment."""

    source: str  # "nvml" or "rapl"
    unit_j: float  # joules per count: 1e-3 for NVML (millijoules), 1e-6 for RAPL (microjoules)
    zones: tuple[Zone, ...]
    min_loop_s: float = MIN_LOOP_S


@dataclass(frozen=True)
class LoopEnergy:
    """The energy of a loop of the timed call, from the counters read around it."""

    source: str
    energy_j: float  # the whole loop
    seconds: float  # the loop's elapsed time, as the caller measured it
    calls: int
    mj_per_call: float
    j_per_token: float | None  # None when the caller gave no tokens per call
    power_w: float  # average over the loop: energy_j / seconds


def joules_between(before: EnergyReading, after: EnergyReading) -> float:
    """The energy the counters counted from `before` to `after`, summed over zones; a counter that wrapped once
    (RAPL's, every few minutes to hours) is unwrapped, one that went back without a wrap (NVML's after a driver
    reload) is refused."""
    if [z.name for z in before.zones] != [z.name for z in after.zones] or before.unit_j != after.unit_j:
        raise ValueError(f"readings of different counters: {before.zones} and {after.zones}")
    counts = 0
    for old, new in zip(before.zones, after.zones, strict=False):
        delta = new.count - old.count
        if delta < 0:
            if old.wrap is None:
                raise EnergyUnavailable(f"{before.source}'s energy counter for {old.name} went back from {old.count} "
                                        f"to {new.count} (the driver reloaded?)")
            delta += old.wrap
        counts += delta
    return counts * before.unit_j


def loop_energy(before: EnergyReading, after: EnergyReading, calls: int, seconds: float,
                tokens_per_call: int | None = None) -> LoopEnergy:
    """Energy per call (mJ), joules per token and average power (W) of `calls` calls that took `seconds`.

    `tokens_per_call`: the tokens one call processes, batch × query length: a prefill's query tokens, a
    decode step's generated tokens (one per request: the batch). Refused (EnergyUnavailable) for a loop
    shorter than the counter's MIN_LOOP_S, or one over which the counter did not move.
    """
    if calls < 1 or seconds <= 0:
        raise ValueError(f"a loop of {calls} calls in {seconds} s")
    if seconds < before.min_loop_s:
        raise EnergyUnavailable(f"the loop lasted {seconds:.3g} s, under the {before.min_loop_s:g} s {before.source}'s "
                                f"energy counter needs to resolve it")
    joules = joules_between(before, after)
    if joules <= 0:
        raise EnergyUnavailable(f"{before.source}'s energy counter did not move in {seconds:.3g} s")
    per_call = joules / calls
    return LoopEnergy(before.source, joules, seconds, calls, per_call * 1e3,
                      per_call / tokens_per_call if tokens_per_call else None, joules / seconds)


def read_rapl(root: Path = POWERCAP) -> EnergyReading:
    """The CPU packages' RAPL counters under /sys/class/powercap: zones `intel-rapl:N` named `package-N` (AMD's
    CPUs appear under the same names), `energy_uj` wrapping past `max_energy_range_uj`. Sub-zones (core,
    uncore, dram) and `psys` are left out: they overlap the packages or lie outside the CPU."""
    if not root.is_dir():
        raise EnergyUnavailable(f"RAPL not readable: {root} does not exist (no powercap driver here: a VM, a "
                                f"container without /sys, or not an x86 CPU)")
    zones = sorted((p for p in root.iterdir() if re.fullmatch(r"intel-rapl:\d+", p.name)),
                   key=lambda p: int(p.name.split(":")[1]))
    read = []
    for zone in zones:
        name = _text(zone / "name")
        if not name.startswith("package"):
            continue
        read.append(Zone(name, int(_text(zone / "energy_uj")), int(_text(zone / "max_energy_range_uj"))))
    if not read:
        found = ", ".join(sorted(p.name for p in root.iterdir())) or "nothing"
        raise EnergyUnavailable(f"RAPL not readable: {root} has no intel-rapl:N package zone (it holds {found})")
    return EnergyReading("rapl", 1e-6, tuple(read))


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError:
        raise EnergyUnavailable(f"RAPL not readable: {path}: permission denied (root only on kernels patched "
                                f"for CVE-2020-8694; run as root or grant read access)") from None
    except OSError as exc:
        raise EnergyUnavailable(f"RAPL not readable: {path}: {exc.strerror or exc}") from None
