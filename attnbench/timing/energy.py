"""Energy per call from cumulative counters read around a loop of the timed call: NVML's per GPU, RAPL's per
CPU package."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# counters step every ~1-100 ms: one second keeps a step under a tenth
MIN_LOOP_S = 1.0
POWERCAP = Path("/sys/class/powercap")


class EnergyUnavailable(Exception):
    """No energy figure, and why (a `skipped` reason)."""


@dataclass(frozen=True)
class Zone:
    name: str  # "GPU 0", "package-0"
    count: int
    wrap: int | None  # RAPL's max_energy_range_uj; None: never wraps


@dataclass(frozen=True)
class EnergyReading:
    source: str
    unit_j: float  # joules per count
    zones: tuple[Zone, ...]
    min_loop_s: float = MIN_LOOP_S


@dataclass(frozen=True)
class LoopEnergy:
    source: str
    energy_j: float
    seconds: float
    calls: int
    mj_per_call: float
    j_per_token: float | None
    power_w: float


def joules_between(before: EnergyReading, after: EnergyReading) -> float:
    """One wrap is unwrapped; a counter gone back without one (a driver reload) is refused."""
    if [z.name for z in before.zones] != [z.name for z in after.zones] or before.unit_j != after.unit_j:
        raise ValueError(f"readings of different counters: {before.zones} and {after.zones}")
    counts = 0
    for old, new in zip(before.zones, after.zones, strict=False):
        delta = new.count - old.count
        if delta < 0:
            if old.wrap is None:
                raise EnergyUnavailable(f"{before.source}'s energy counter for {old.name} went back from "
                                        f"{old.count} to {new.count} (the driver reloaded?)")
            delta += old.wrap
        counts += delta
    return counts * before.unit_j


def loop_energy(before: EnergyReading, after: EnergyReading, calls: int, seconds: float,
                tokens_per_call: int | None = None) -> LoopEnergy:
    """Refused for a loop under MIN_LOOP_S or a counter that did not move;
    `tokens_per_call`: batch × queries."""
    if calls < 1 or seconds <= 0:
        raise ValueError(f"a loop of {calls} calls in {seconds} s")
    if seconds < before.min_loop_s:
        raise EnergyUnavailable(f"the loop lasted {seconds:.3g} s, under the {before.min_loop_s:g} s "
                                f"{before.source}'s energy counter needs to resolve it")
    joules = joules_between(before, after)
    if joules <= 0:
        raise EnergyUnavailable(f"{before.source}'s energy counter did not move in {seconds:.3g} s")
    per_call = joules / calls
    return LoopEnergy(before.source, joules, seconds, calls, per_call * 1e3,
                      per_call / tokens_per_call if tokens_per_call else None, joules / seconds)


def read_rapl(root: Path = POWERCAP) -> EnergyReading:
    """The `intel-rapl:N` package zones; sub-zones and `psys` overlap them or lie outside."""
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
        raise EnergyUnavailable(f"RAPL not readable: {root} has no intel-rapl:N "
                                f"package zone (it holds {found})")
    return EnergyReading("rapl", 1e-6, tuple(read))


def _text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError:
        raise EnergyUnavailable(f"RAPL not readable: {path}: permission denied (root only on kernels patched "
                                f"for CVE-2020-8694; run as root or grant read access)") from None
    except OSError as exc:
        raise EnergyUnavailable(f"RAPL not readable: {path}: {exc.strerror or exc}") from None
