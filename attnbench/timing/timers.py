"""Timers: a monotonic clock on CPU, CUDA events with the L2 cache cleared on CUDA. Injectable for tests.

Each timer only knows how to time a batch of calls; how many calls, and when to stop, is attnbench.timing.sampling's
one set of rules (steady-state warm-up, then samples until the median's interval is as narrow as asked).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from attnbench.core.errors import AttnbenchError
from attnbench.timing.sampling import Sampler, TimingSettings, run  # noqa: F401 - TimingSettings: its public home

if TYPE_CHECKING:
    import torch

# The flush buffer when the device's L2 size is unknown (a fake or meta device): larger than any current L2.
L2_FLUSH_BYTES = 256 << 20
L2_FLUSH_FACTOR = 2  # the flush overwrites twice the device's L2, so nothing of the previous call survives


class Timer(Protocol):
    """Times a call repeatedly and returns the raw per-call samples in milliseconds.

    The built-in timers return a `Samples` list that also says why sampling stopped and what warm-up cost;
    any plain list of samples is accepted (the runner infers the rest).
    """

    name: str

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]: ...


def one_sample(timer: object, fn: Callable[[], object]) -> Callable[[], object]:
    """One call of `fn` made the way `timer` makes each sample (its `sample`: the clock around it, or the spin, the
    L2 flush and the events), for a trace to show what a sample did; a timer without one calls `fn` plainly."""
    sample = getattr(timer, "sample", None)
    return (lambda: sample(fn)) if callable(sample) else fn


class ClockTimer:
    """Wall time of each call on a monotonic clock (CPU work is synchronous, so this is the call's time)."""

    name = "perf_counter"

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock

    def sample(self, fn: Callable[[], object]) -> float:
        """One sample: the call's time in ms between two reads of the clock."""
        clock = self.clock
        start = clock()
        fn()
        return (clock() - start) / 1e6

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        return run(Sampler(settings), lambda count: [self.sample(fn) for _ in range(count)])


def flush_bytes_for(device: Any) -> int:
    """Twice the L2 cache of `device` (torch.cuda.get_device_properties().L2_cache_size); L2_FLUSH_BYTES when the
    device reports none (a meta or fake device)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return L2_FLUSH_BYTES
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    return L2_FLUSH_FACTOR * l2 if l2 > 0 else L2_FLUSH_BYTES


class CudaEventTimer:
    """CUDA events around each call, with the L2 cache overwritten before each (as triton's do_bench).

    The flush buffer is twice the device's L2 (120 MiB on an H100/H200's 60 MB L2), so no byte the previous
    call left in L2 survives; warm-up calls are flushed and timed the same way, so "steady" means steady as timed.

    Events time the GPU, so the GPU must never wait for the CPU between the start event and the call's last
    kernel: before each call a spin kernel (torch.cuda._sleep) keeps the GPU busy while the CPU enqueues the
    flush, the events and the call. The spin lasts 1.5x the CPU's enqueue time of one iteration, measured on the
    batch before. Without it a short call was timed with its launch latency: on the H200, SDPA at 256 tokens read
    18.3 us where triton's do_bench (whose 256 MiB flush happened to cover the launch) read 12.7 us.
    """

    name = "cuda-event"
    COVER_MAX_MS = 2.0  # a call that synchronises inside needs no cover; the spin is capped for it

    def __init__(self, device: torch.device | str = "cuda", flush_l2: bool = True) -> None:
        import torch

        self.torch = torch
        self.flush_bytes = flush_bytes_for(device) if flush_l2 else 0
        self.flush = torch.empty(self.flush_bytes, dtype=torch.int8, device=device) if flush_l2 else None
        if not flush_l2:
            self.name = "cuda-event (no L2 flush)"
        self.cycles_per_ms = spin_cycles_per_ms(torch) if torch.device(device).type == "cuda" else 0.0
        self.cover_ms = 0.0  # the spin before the last batch's calls

    @property
    def extra(self) -> dict[str, Any]:
        """What a record says about this timer: the flush size and the launch cover."""
        return {"l2_flush_bytes": self.flush_bytes, "launch_cover_us": round(self.cover_ms * 1e3, 1)}

    def _spin(self) -> Callable[[int], None] | None:
        return getattr(self.torch.cuda, "_sleep", None) if self.cycles_per_ms else None

    def _enqueue(self, fn: Callable[[], object], spin: Callable[[int], None] | None, start: Any, end: Any) -> None:
        """What each sample enqueues: the spin that covers the launch, the L2 flush, then the call between events."""
        if spin is not None and self.cover_ms > 0:
            spin(int(self.cover_ms * self.cycles_per_ms))
        if self.flush is not None:
            self.flush.zero_()
        start.record()
        fn()
        end.record()

    def sample(self, fn: Callable[[], object]) -> float:
        """One sample made as `measure`'s are (with the last batch's cover), its time in ms; not a recorded sample."""
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        self._enqueue(fn, self._spin(), start, end)
        cuda.synchronize()
        return start.elapsed_time(end)

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        cuda = self.torch.cuda
        spin = self._spin()
        cuda.synchronize()
        self.cover_ms = 0.0
        if spin is not None:  # one call's enqueue time sizes the first batch's cover (it is not a sample)
            begin = time.perf_counter()
            fn()
            self.cover_ms = cover_ms(time.perf_counter() - begin, 2.0, self.COVER_MAX_MS)
            cuda.synchronize()

        def batch(count: int) -> list[float]:
            starts = [cuda.Event(enable_timing=True) for _ in range(count)]
            ends = [cuda.Event(enable_timing=True) for _ in range(count)]
            host: list[float] = []
            for i in range(count):
                began = time.perf_counter()
                self._enqueue(fn, spin, starts[i], ends[i])
                host.append(time.perf_counter() - began)
            cuda.synchronize()
            if spin is not None:
                self.cover_ms = cover_ms(statistics.median(host), 1.5, self.COVER_MAX_MS)
            return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=False)]

        return run(Sampler(settings), batch)


def cover_ms(host_s: float, factor: float, cap_ms: float) -> float:
    """The GPU spin that covers `host_s` seconds of CPU enqueue time: `factor` times it plus 10 us, capped."""
    return min(cap_ms, host_s * 1e3 * factor + 0.01)


def spin_cycles_per_ms(torch: Any) -> float:
    """GPU clock cycles per millisecond of torch.cuda._sleep, measured once; 0 where torch has no _sleep."""
    spin = getattr(torch.cuda, "_sleep", None)
    if spin is None:
        return 0.0
    cycles = 1_000_000
    spin(cycles)  # the first launch loads the kernel
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    spin(cycles)
    end.record()
    torch.cuda.synchronize()
    ms = begin.elapsed_time(end)
    return cycles / ms if ms > 0 else 0.0


class CudaGraphTimer:
    """Replays one CUDA graph holding `calls` back-to-back forward calls and divides: launch overhead gone.

    Warm-up runs on a side stream before capture, as torch.cuda.graphs requires. The calls in a graph run
    back to back, so L2 is not flushed between them (unlike CudaEventTimer): these are warm-cache times.
    Only forward calls are captured (a backward's autograd graph is not capturable this simply). Each sample
    is one replay divided by the calls it holds; warm-up and stopping are the sampler's, over replays.
    """

    name = "cuda-graph"
    modes = ("fwd",)
    TARGET_MS = 1.0  # each replay lasts about this long, so event resolution does not matter
    MAX_CALLS = 100  # every captured call keeps its own output in the graph's pool

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.replay: tuple[Callable[[], object], int] | None = None

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        torch = self.torch
        self.replay = None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        calls = graph_calls(begin.elapsed_time(end), self.TARGET_MS, self.MAX_CALLS)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()

        def batch(count: int) -> list[float]:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
            for i in range(count):
                starts[i].record()
                graph.replay()
                ends[i].record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / calls for s, e in zip(starts, ends, strict=False)]

        # Budgets count replays' time, not a call's; a new graph warms up on its own replays, whatever ran before.
        samples = run(Sampler(dataclasses.replace(settings, warmed_ms=0.0, prior_ms=None), cost=calls), batch)
        # Kept for one profiled replay (attnbench.run.profiled), which compares its kernels with an eager call's.
        self.replay = (graph.replay, calls)
        return samples


def graph_calls(call_ms: float, target_ms: float, most: int) -> int:
    """How many calls one graph holds so that a replay lasts about `target_ms` (at least 1, at most `most`)."""
    if call_ms <= 0:
        return most
    return max(1, min(most, math.ceil(target_ms / call_ms)))


TIMERS = ("auto", "cuda-graph")


def check_timer(device: str, kind: str) -> None:
    """Refuse, as one line, a timer the device cannot run."""
    if kind not in TIMERS:
        raise AttnbenchError(f"--timer {kind}: unknown timer; allowed: {', '.join(TIMERS)}")
    if kind == "cuda-graph" and device != "cuda":
        raise AttnbenchError(f"--timer cuda-graph needs a CUDA device; this run is on {device}")


def timer_modes(kind: str) -> tuple[str, ...] | None:
    """The modes a timer of this kind can time; None for every mode."""
    return CudaGraphTimer.modes if kind == "cuda-graph" else None


def timer_for(device: str, kind: str = "auto") -> Timer:
    """The timer for a device: CUDA events (or a CUDA graph, when asked) on CUDA, the monotonic clock on CPU."""
    check_timer(device, kind)
    if kind == "cuda-graph":
        return CudaGraphTimer()
    return CudaEventTimer() if device == "cuda" else ClockTimer()
