"""Peak memory a call needs above what was allocated before it (docs/conventions.md "Memory")."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from attnbench.core.memory_methods import RSS_METHOD

CUDA_METHOD = "torch.cuda.max_memory_allocated"
YOUNG = 1  # gc generations 0 and 1
CPU_METHOD = "torch.profiler CPU allocator events"
# a runtime on a GPU without device accounting
NO_DEVICE_METHOD = "none: host RSS is not device memory, and this runtime gives no device accounting"
RAISED = "peak_bytes_in_use, raised by the call, less bytes_in_use before it"
HIDDEN = ("none: the call stayed under an earlier high-water mark (peak_bytes_in_use has no reset), "
          "so its own peak is unknown")
UNREPORTED = "none: it reports no peak_bytes_in_use"


@dataclass(frozen=True)
class DeviceStats:
    """A runtime's own accounting of a device's memory (JAX: `Device.memory_stats()`): `read` returns its
    `bytes_in_use` and `peak_bytes_in_use`, or None."""

    read: Callable[[], Mapping[str, int] | None]
    source: str  # how the record names it


@dataclass
class PeakCall:
    result: Any
    peak: int | None
    method: str
    call_ms: float | None = None


def call_measuring_peak(fn: Callable[[], Any], device: str, collect: bool = True,
                        clock: Callable[[], int] | None = None,
                        memory: str | DeviceStats = "torch") -> PeakCall:
    """Young garbage collected before (unless `collect=False`) and none during, so no earlier tensors are
    freed inside; `clock` (ns) times the call alone. `memory` (Prepared.memory): "torch", "rss" (allocates
    outside PyTorch, on the host) or a runtime's DeviceStats; a GPU's peak is never read from host RSS."""
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
        result, peak, method = _peak(timed, device, memory)
    return PeakCall(result, peak, method, call_ms[0] if call_ms else None)


def _peak(fn: Callable[[], Any], device: str, memory: str | DeviceStats) -> tuple[Any, int | None, str]:
    if isinstance(memory, DeviceStats):
        return _device_stats_peak(fn, memory)
    if memory == "rss" and device == "cuda":
        return fn(), None, NO_DEVICE_METHOD
    if memory == "rss" and rss_available():
        return (*_rss_peak(fn), RSS_METHOD)
    if device == "cuda":
        return (*_cuda_peak(fn), CUDA_METHOD)
    return (*_cpu_peak(fn), CPU_METHOD)


def _device_stats_peak(fn: Callable[[], Any], stats: DeviceStats) -> tuple[Any, int | None, str]:
    """The call's peak where it raised the device's high-water mark; unknown where it stayed under an earlier
    one (the mark has no reset), never guessed. `fn` returns once the device's work is done."""
    before = stats.read() or {}
    result = fn()
    after = stats.read() or {}
    if not {"bytes_in_use", "peak_bytes_in_use"} <= before.keys() or "peak_bytes_in_use" not in after:
        return result, None, f"{stats.source}: {UNREPORTED}"
    if after["peak_bytes_in_use"] > before["peak_bytes_in_use"]:
        return result, after["peak_bytes_in_use"] - before["bytes_in_use"], f"{stats.source} {RAISED}"
    return result, None, f"{stats.source}: {HIDDEN}"


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
    """Measures peak memory on its first call."""

    def __init__(self, fn: Callable[[], object], device: str, memory: str | DeviceStats = "torch") -> None:
        self.fn = fn
        self.device = device
        self.memory = memory
        self.peak: int | None = None
        self.method: str | None = None  # set by the first call

    def __call__(self) -> object:
        if self.method is not None:
            return self.fn()
        measured = call_measuring_peak(self.fn, self.device, collect=False, memory=self.memory)
        self.peak, self.method = measured.peak, measured.method
        return measured.result


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def rss_available() -> bool:
    try:
        _status_kb("VmHWM")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _rss_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """At page granularity, other threads included."""
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
    """The running total of the profiler's CPU allocator events (PyTorch keeps no CPU peak); the autograd
    profiler's CPU mode avoids Kineto's slow first start."""
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
    with _quiet_stderr():  # C++ logs each start and stop
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type().name == "CPU"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return result, peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """C++ logging bypasses sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
