"""The loop before the samples: the timed call back to back, read around by the energy counter, and on CUDA until the
GPU's SM clock stops falling (docs/gpu.md, "Burst or sustained"). Clocks and settings are never changed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnbench.timing.energy import EnergyReading, EnergyUnavailable, loop_energy

if TYPE_CHECKING:
    from attnbench.gpu.sample import GpuSample

# The loop stops at this many times its minimum even while the clock still falls.
SUSTAIN_FACTOR = 5.0
PROBE_S = 0.1  # seconds between two reads of the SM clock
CLOCK_SLACK_MHZ = 15  # one step of the SM clock table (Hopper)


def falling(clocks: list[float | None]) -> bool:
    """Whether the SM clock fell between the last two probes by more than one step."""
    if len(clocks) < 2 or clocks[-1] is None or clocks[-2] is None:
        return False
    return clocks[-1] < clocks[-2] - CLOCK_SLACK_MHZ


def sustained_loop(fn: Callable[[], object], *, min_s: float, tokens_per_call: int,
                   read_energy: Callable[[], EnergyReading], probe: Callable[[], GpuSample | None] | None = None,
                   sync: Callable[[], None] = lambda: None,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """The record's `extra` entries: `sustain`, and the energy or `energy_skipped` with the reason."""
    extra: dict[str, Any] = {}
    try:
        before: EnergyReading | None = read_energy()
    except EnergyUnavailable as exc:
        before, extra["energy_skipped"] = None, str(exc)
    if before is None and probe is None:
        return extra  # nothing to heat (a CPU) and nothing to read
    sync()
    start = clock()
    next_probe = start
    calls, clocks, throttled, stopped = 0, [], False, "minimum"
    while True:
        fn()
        calls += 1
        now = clock()
        if now < next_probe:  # the clock is read, and the end decided, every PROBE_S
            continue
        sync()
        now = clock()
        elapsed = now - start
        if probe is not None:
            sample = probe()
            clocks.append(sample.sm_clock_mhz if sample is not None else None)
            throttled |= bool(sample is not None and sample.throttled)
        next_probe = now + PROBE_S
        if elapsed >= SUSTAIN_FACTOR * min_s:
            stopped = "the limit, the clock still falling" if falling(clocks) else "the limit"
            break
        if elapsed >= min_s and not falling(clocks):
            stopped = "the SM clock steady" if probe is not None else "the minimum"
            break
    sync()
    seconds = clock() - start
    extra["sustain"] = {"ms": round(seconds * 1e3, 1), "calls": calls, "stopped": stopped,
                        "sm_clock_mhz": [clocks[0], clocks[-1]] if clocks else None}
    if before is not None:
        extra.update(_energy(before, read_energy, calls, seconds, tokens_per_call, throttled))
    return extra


def _energy(before: EnergyReading, read_energy: Callable[[], EnergyReading], calls: int, seconds: float,
            tokens_per_call: int, throttled: bool) -> dict[str, Any]:
    try:
        energy = loop_energy(before, read_energy(), calls, seconds, tokens_per_call)
    except EnergyUnavailable as exc:
        return {"energy_skipped": str(exc)}
    return {"energy_mj": energy.mj_per_call, "joules_per_token": energy.j_per_token, "energy_power_w": energy.power_w,
            "energy_source": energy.source, "energy_throttled": throttled}


def for_device(device: str) -> tuple[Callable[[], EnergyReading], Callable[[], GpuSample | None] | None,
                                      Callable[[], None]]:
    if device != "cuda":
        from attnbench.timing.energy import read_rapl

        return read_rapl, None, lambda: None
    import torch

    from attnbench.gpu.energy import read_gpu_energy
    from attnbench.gpu.sample import measurement_sample
    from attnbench.gpu.state import torch_gpu

    gpu = torch_gpu(torch.cuda.current_device())
    return (lambda: read_gpu_energy(gpu)), (lambda: measurement_sample(gpu)), torch.cuda.synchronize
