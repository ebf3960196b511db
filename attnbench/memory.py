"""Peak memory a call needs above what was allocated before it, measured per device."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import Callable, Iterator

CUDA_METHOD = "torch.cuda.max_memory_allocated"
CPU_METHOD = "torch.profiler CPU allocator events"


def measure_peak(fn: Callable[[], object], device: str) -> tuple[int, str]:
    """Run `fn` once and return (peak bytes above the state before the call, method used).

    The call's result is held until the peak is read, so the output counts as memory it needs. Garbage
    is collected before and never during the call: on an H200, a collection that freed an earlier
    measurement's tensors inside the call left naive's peak at 0 bytes above "before".
    """
    gc.collect()
    with _no_collection():
        if device == "cuda":
            return _cuda_peak(fn), CUDA_METHOD
        return _cpu_peak(fn), CPU_METHOD


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cuda_peak(fn: Callable[[], object]) -> int:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak


def _cpu_peak(fn: Callable[[], object]) -> int:
    """The highest running total of CPU allocations minus frees seen by PyTorch's profiler during `fn`.

    PyTorch keeps no peak statistic for CPU memory, but its profiler records every allocation and
    free made through its CPU allocator (`profile_memory=True`); summing them in time order gives
    the live bytes the call added at each moment.
    """
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # the profiler's C++ side logs each start and stop to stderr
        prof.start()
    try:
        result = fn()
        del result
    finally:
        with _quiet_stderr():
            prof.stop()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type().name == "CPU"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


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
