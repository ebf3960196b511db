"""A GPU's state, and its span over a run's timings, in words (doctor, the report's header);
advice is doctor's."""

from __future__ import annotations

from typing import Any

from attnbench.gpu.sample import RunSpan
from attnbench.gpu.state import GpuState

LOCK_WORDS = {True: "locked", False: "not locked", None: "perhaps not locked"}


def describe(state: GpuState) -> str:
    """'GPU 0 state (nvml): SM clock …'."""
    if state.error:
        return f"GPU {state.index} state: unknown ({state.error})"

    def mhz(now: int | None, app: int | None, top: int | None) -> str:
        extra = [f"{word} {value}" for word, value in (("application", app), ("max", top))
                 if value is not None]
        return (f"{now} MHz" if now is not None else "? MHz") + (f" ({', '.join(extra)})" if extra else "")

    def flag(value: Any) -> str:
        if value is None:
            return "?"
        return "on" if value else "off"

    power = (f"{state.power_draw_w:.0f} W of {state.power_limit_w:.0f} W"
             if state.power_draw_w is not None and state.power_limit_w is not None else "power ?")
    temperature = f"{state.temperature_c} °C" if state.temperature_c is not None else "? °C"
    reasons = ", ".join(state.clock_event_reasons or ()) or "none"
    others = state.other_process_count
    who = ("other processes unknown" if others is None else "no other processes" if others == 0
           else f"{others} other process{'es' if others != 1 else ''}")
    sm = mhz(state.sm_clock_mhz, state.sm_clock_app_mhz, state.sm_clock_max_mhz)
    memory = mhz(state.memory_clock_mhz, state.memory_clock_app_mhz, state.memory_clock_max_mhz)
    return (f"GPU {state.index} state ({state.source}): SM clock {sm} · memory clock {memory} · {power} · "
            f"{temperature} · persistence {flag(state.persistence_mode)} · ECC {flag(state.ecc)} · "
            f"MIG {flag(state.mig)} · compute mode {state.compute_mode or '?'} · "
            f"clock events: {reasons} · {who} · clocks {LOCK_WORDS[state.clocks_locked]}")


def describe_span(span: RunSpan) -> str:
    """'SM clock 1695–1980 MHz · power … · clock events: …'."""
    n = span.timings
    clock = (f"SM clock {_range(span.sm_clock_mhz, '{:.0f}')} MHz" if span.sm_clock_mhz
             else "SM clock not read")
    power = (f"power {_range(span.power_w, '{:.0f}')} W" if span.power_w else "power not recorded")
    events = ", ".join(f"{name} ({count} of {n})" for name, count in span.reasons.items()) or "none"
    parts = [f"{n} timing{'s' if n != 1 else ''}", clock, power, f"clock events: {events}"]
    parts.append(f"other processes in {span.shared} of {n}" if span.shared else "no other processes")
    parts.append(f"{span.throttled} of {n} flagged throttled (!)" if span.throttled
                 else "none flagged throttled")
    if span.unread:
        parts.append(f"state not read for {span.unread} of {n}")
    return " · ".join(parts)


def _range(bounds: tuple[Any, Any] | None, form: str) -> str:
    assert bounds is not None
    low, high = (form.format(value) for value in bounds)
    return low if low == high else f"{low}–{high}"
