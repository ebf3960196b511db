"""Peak memory a call needs above what was allocated before it, measured per device, on a call that runs anyway.

No measurement costs a call of its own: on CUDA the peak is read around the timer's first warm-up call
(peak statistics reset before it, read after); on a CPU, where only PyTorch's profiler sees the allocator,
the profiled call is the correctness call when it is the timed call's twin (forward), else the first
warm-up call. `PeakOnFirstCall` wraps the timed function for that.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CUDA_METHOD = "torch.cuda.max_memory_allocated"
YOUNG = 1  # gc generations 0 and 1
CPU_METHOD = "torch.profiler CPU allocator events"
# A runtime with its own allocator (JAX, ONNX Runtime, OpenVINO) and no peak statistic: the process's resident
# high-water mark, reset just before the call (Linux `clear_refs`), less the resident memory then.
RSS_METHOD = "process peak RSS (/proc/self/status VmHWM, reset by clear_refs)"


@dataclass
class PeakCall:
    """What one call measured for memory left: its result, the peak, the method, and its own time (ms) by the
    clock it was given (None without one)."""

    result: Any
    peak: int
    method: str
    call_ms: float | None = None


def call_measuring_peak(fn: Callable[[], Any], device: str, collect: bool = True,
                        clock: Callable[[], int] | None = None, rss: bool = False) -> PeakCall:
    """Run `fn` once, returning its result and the peak bytes above the state before the call (PeakCall).

    The young generations' garbage is collected before the call (unless the caller just did: `collect=False`),
    and nothing during it, so no earlier measurement's tensors are freed inside the call. (The runner collects
    everything between cases and after a failure; a full collection here, with a sweep's compiled graphs on
    the heap, took 0.1 s per measurement.) With a `clock` (nanoseconds) the call's own time is read too, the
    measuring around it left out. `rss`: the call allocates outside PyTorch (Prepared.memory), so the peak is the
    process's resident memory's (RSS_METHOD).
    """
    call_ms: list[float] = []

    def timed() -> Any:
        if clock is None:
            return fn()
        start = clock()
        result = fn()
        call_ms.append((clock() - start) / 1e6)
        return result

    if collect:
        gc.collect(YOUNG)
    with _no_collection():
        if rss and rss_available():
            result, peak = _rss_peak(timed)
            return PeakCall(result, peak, RSS_METHOD, call_ms[0] if call_ms else None)
        result, peak = _cuda_peak(timed) if device == "cuda" else _cpu_peak(timed)
    return PeakCall(result, peak, CUDA_METHOD if device == "cuda" else CPU_METHOD, call_ms[0] if call_ms else None)


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class PeakOnFirstCall:
    """The timed function, measuring peak memory on its first call (the timer's first warm-up call).

    The caller collects garbage just before timing starts, so the first call only stops collection."""

    def __init__(self, fn: Callable[[], object], device: str, rss: bool = False) -> None:
        self.fn = fn
        self.device = device
        self.rss = rss
        self.peak: int | None = None
        self.method: str | None = None

    def __call__(self) -> object:
        if self.peak is not None:
            return self.fn()
        measured = call_measuring_peak(self.fn, self.device, collect=False, rss=self.rss)
        self.peak, self.method = measured.peak, measured.method
        return measured.result


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def rss_available() -> bool:
    """Whether this process can reset and read its resident high-water mark (Linux)."""
    try:
        _status_kb("VmHWM")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _rss_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """The resident memory's high-water mark during `fn` above the resident memory before it (reset by writing 5 to
    /proc/self/clear_refs). Pages the call touches that were already resident do not count: this is what the call
    made the process hold, at page granularity, other threads' allocations included."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _status_kb("VmRSS")
    result = fn()
    return result, max(0, _status_kb("VmHWM") - before) * 1024


def _cuda_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


def _cpu_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """The highest running total of CPU allocations minus frees seen by PyTorch's profiler during `fn`.

    PyTorch keeps no peak statistic for CPU memory, but its profiler records every allocation and
    free made through its CPU allocator (`profile_memory=True`); summing them in time order gives
    the live bytes the call added at each moment. The autograd profiler's plain CPU mode does this
    without starting Kineto (whose first start costs about a second); Kineto is the fallback.
    """
    legacy = _legacy_profiler()
    if legacy is None:
        return _kineto_cpu_peak(fn)
    enable, disable, config = legacy
    with _quiet_stderr():
        enable(config)
    try:
        result = fn()
    finally:
        threads = disable()
    events = [event for thread in threads for event in thread if event.kind() == "memory_alloc"]
    if not events:
        return result, 0
    first = events[0]
    events.sort(key=lambda event: first.cpu_elapsed_us(event))
    live = peak = 0
    for event in events:
        live += event.cpu_memory_usage()
        peak = max(peak, live)
    return result, peak


def _legacy_profiler() -> tuple[Callable, Callable, Any] | None:
    """The autograd profiler's CPU mode with memory events, where this torch still has it."""
    try:
        import torch.autograd as autograd
        from torch._C._profiler import (
            ProfilerConfig,
            ProfilerState,
            _ExperimentalConfig,
        )

        config = ProfilerConfig(ProfilerState.CPU, False, True, False, False, False, _ExperimentalConfig())
        return autograd._enable_profiler_legacy, autograd._disable_profiler_legacy, config
    except (ImportError, AttributeError, TypeError):
        return None


def _kineto_cpu_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # the profiler's C++ side logs each start and stop to stderr
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return result, peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for a moment (C++ logging bypasses Python's sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
