"""Timers (docs/conventions.md "Timing"); how many calls and when to stop is timing.sampling's."""

from __future__ import annotations

import abc
import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnbench.core.errors import AttnbenchError
from attnbench.timing.bracket import OWN_RUNTIME, TORCH_STREAM, Bracket
from attnbench.timing.sampling import Sampler, Samples, run
from attnbench.timing.sampling import TimingSettings as TimingSettings  # its public home

if TYPE_CHECKING:
    import torch

L2_FLUSH_BYTES = 256 << 20  # when the device reports no L2 size
L2_FLUSH_FACTOR = 2


class Timer(abc.ABC):
    """Per-call samples in ms, and what a run reads of the timer beside them."""

    name: str = "timer"
    modes: tuple[str, ...] | None = None  # None: all
    runs_on: tuple[str, ...] | None = None  # Capabilities.runs_on it times; None: any
    clock: Callable[[], int] | None = None  # its samples' (ns): the checked call may join them
    bracket: Bracket | None = None
    replay: tuple[Callable[[], object], int] | None = None  # the last samples' graph: replay, calls

    @property
    def extra(self) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples: ...

    def one_sample(self, fn: Callable[[], object]) -> Callable[[], object]:
        """As it makes each sample, for a trace."""
        return fn


class ClockTimer(Timer):
    """CPU work is synchronous: wall time is the call's."""

    name = "perf_counter"

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock

    def sample(self, fn: Callable[[], object]) -> float:
        clock = self.clock
        start = clock()
        fn()
        return (clock() - start) / 1e6

    def one_sample(self, fn: Callable[[], object]) -> Callable[[], object]:
        return lambda: self.sample(fn)

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
        return run(Sampler(settings), lambda count: [self.sample(fn) for _ in range(count)])


def flush_bytes_for(device: Any) -> int:
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return L2_FLUSH_BYTES
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    return L2_FLUSH_FACTOR * l2 if l2 > 0 else L2_FLUSH_BYTES


class CudaEventTimer(Timer):
    """CUDA events around each call with the L2 overwritten before it (as triton's do_bench); a spin kernel
    1.5x the CPU's enqueue time keeps the events from timing launch latency. Each call's host time is kept
    beside its events' (attnbench.timing.bracket)."""

    name = "cuda-event"
    COVER_MAX_MS = 2.0  # a call that synchronises inside needs no cover
    EMPTY_PAIRS = 5

    def __init__(self, device: torch.device | str = "cuda", flush_l2: bool = True, cuda: Any = None,
                 host_clock: Callable[[], int] | None = None) -> None:
        """`cuda` (torch.cuda unless given: a stand-in runs the spin as on a GPU) and `host_clock` (ns)."""
        import torch

        self.cuda = torch.cuda if cuda is None else cuda
        self.host_clock = host_clock or _perf_counter_ns
        self.flush_bytes = flush_bytes_for(device) if flush_l2 else 0
        self.flush = torch.empty(self.flush_bytes, dtype=torch.int8, device=device) if flush_l2 else None
        if not flush_l2:
            self.name = "cuda-event (no L2 flush)"
        on_gpu = cuda is not None or torch.device(device).type == "cuda"
        self.cycles_per_ms = spin_cycles_per_ms(self.cuda) if on_gpu else 0.0
        self.empty_ms: float | None = None
        if self.cycles_per_ms:
            self.empty_ms = empty_pair_ms(self.cuda, self.cycles_per_ms, self.EMPTY_PAIRS)
        self.cover_ms = 0.0
        self.bracket: Bracket | None = None
        self._host: HostTimer | None = None

    @property
    def extra(self) -> dict[str, Any]:
        made = {"l2_flush_bytes": self.flush_bytes, "launch_cover_us": round(self.cover_ms * 1e3, 1)}
        return {**made, **(self.bracket.extra() if self.bracket is not None else {})}

    @property
    def host(self) -> HostTimer:
        """The host timer for calls that run in their own runtime, sharing this one's flush,
        spin and clock."""
        if self._host is None:
            self._host = HostTimer(self)
        return self._host

    def _spin(self) -> Callable[[int], None] | None:
        return getattr(self.cuda, "_sleep", None) if self.cycles_per_ms else None

    def _enqueue(self, fn: Callable[[], object], spin: Callable[[int], None] | None, start: Any,
                 end: Any) -> None:
        if spin is not None and self.cover_ms > 0:
            spin(int(self.cover_ms * self.cycles_per_ms))
        if self.flush is not None:
            self.flush.zero_()
        start.record()
        fn()
        end.record()

    def one_sample(self, fn: Callable[[], object]) -> Callable[[], object]:
        return lambda: self.sample(fn)

    def sample(self, fn: Callable[[], object]) -> float:
        """Not recorded."""
        cuda = self.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        self._enqueue(fn, self._spin(), start, end)
        cuda.synchronize()
        return start.elapsed_time(end)

    def covered(self, fn: Callable[[], object], count: int) -> tuple[list[float], list[float]]:
        """`count` calls behind the launch cover: each one's events' ms and host ms (its enqueue); the cover
        is then sized from the host's median."""
        cuda, clock, spin = self.cuda, self.host_clock, self._spin()
        starts = [cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [cuda.Event(enable_timing=True) for _ in range(count)]
        host: list[float] = []
        for i in range(count):
            began = clock()
            self._enqueue(fn, spin, starts[i], ends[i])
            host.append((clock() - began) / 1e6)
        cuda.synchronize()
        if spin is not None:
            self.cover_ms = cover_ms(statistics.median(host) / 1e3, 1.5, self.COVER_MAX_MS)
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)], host

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
        cuda = self.cuda
        cuda.synchronize()
        self.cover_ms, self.bracket = 0.0, None
        if self._spin() is not None:  # one unsampled call sizes the first cover
            begin = self.host_clock()
            fn()
            self.cover_ms = cover_ms((self.host_clock() - begin) / 1e9, 2.0, self.COVER_MAX_MS)
            cuda.synchronize()
        events: list[float] = []
        host: list[float] = []

        def batch(count: int) -> list[float]:
            seen, held = self.covered(fn, count)
            events.extend(seen)
            host.extend(held)
            return seen

        samples = run(Sampler(settings), batch)
        self.bracket = Bracket(statistics.median(host), statistics.median(events), self.empty_ms)
        return samples


class HostTimer(Timer):
    """For a call that runs its work in its own runtime and returns when it is done (Capabilities.runs_on):
    the host's clock around it, started on a synchronised device with the L2 overwritten, and no launch cover,
    whose spin would hold torch's stream only. A few calls behind the cover after the samples read what
    torch's stream's events see of it."""

    name = "host (blocking call)"
    EVENT_CALLS = 5

    def __init__(self, events: CudaEventTimer) -> None:
        self.events = events
        self.clock = events.host_clock
        self.bracket: Bracket | None = None

    @property
    def extra(self) -> dict[str, Any]:
        return {"l2_flush_bytes": self.events.flush_bytes, **(self.bracket.extra() if self.bracket else {})}

    def one_sample(self, fn: Callable[[], object]) -> Callable[[], object]:
        return lambda: self.sample(fn)

    def sample(self, fn: Callable[[], object]) -> float:
        events = self.events
        if events.flush is not None:
            events.flush.zero_()
        events.cuda.synchronize()
        start = self.clock()
        fn()
        return (self.clock() - start) / 1e6

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
        self.bracket = None
        samples = run(Sampler(settings), lambda count: [self.sample(fn) for _ in range(count)])
        host = statistics.median(samples.times)
        self.events.cover_ms = cover_ms(host / 1e3, 1.5, self.events.COVER_MAX_MS)
        seen, _ = self.events.covered(fn, self.EVENT_CALLS)
        self.bracket = Bracket(host, statistics.median(seen), self.events.empty_ms)
        return samples


def _perf_counter_ns() -> int:
    return time.perf_counter_ns()


def cover_ms(host_s: float, factor: float, cap_ms: float) -> float:
    """Plus 10 us, capped."""
    return min(cap_ms, host_s * 1e3 * factor + 0.01)


def spin_cycles_per_ms(cuda: Any) -> float:
    spin = getattr(cuda, "_sleep", None)
    if spin is None:
        return 0.0
    cycles = 1_000_000
    spin(cycles)  # loads the kernel
    begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    begin.record()
    spin(cycles)
    end.record()
    cuda.synchronize()
    ms = begin.elapsed_time(end)
    return cycles / ms if ms > 0 else 0.0


def empty_pair_ms(cuda: Any, cycles_per_ms: float, pairs: int) -> float:
    """The median time of two events recorded back to back behind a spin:
    what events that bracket nothing read."""
    spin = cuda._sleep
    times = []
    for _ in range(pairs):
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        spin(int(0.05 * cycles_per_ms))  # 50 us: the host records both before the GPU reaches them
        start.record()
        end.record()
        cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class CudaGraphTimer(Timer):
    """One CUDA graph of back-to-back forward calls, replayed and divided: no launch overhead, warm L2;
    warm-up on a side stream before capture, as torch.cuda.graphs requires."""

    name = "cuda-graph"
    modes = ("fwd",)
    runs_on = (TORCH_STREAM,)  # it captures torch's stream: a runtime's own work is not in the graph
    TARGET_MS = 1.0  # per replay
    MAX_CALLS = 100  # each keeps its output in the graph's pool

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
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

        # a new graph warms up on its own replays
        samples = run(Sampler(dataclasses.replace(settings, warmed_ms=0.0, prior_ms=None), cost=calls), batch)
        self.replay = (graph.replay, calls)
        return samples


def graph_calls(call_ms: float, target_ms: float, most: int) -> int:
    if call_ms <= 0:
        return most
    return max(1, min(most, math.ceil(target_ms / call_ms)))


TIMERS = ("auto", "cuda-graph")


def check_timer(device: str, kind: str) -> None:
    if kind not in TIMERS:
        raise AttnbenchError(f"--timer {kind}: unknown timer; allowed: {', '.join(TIMERS)}")
    if kind == "cuda-graph" and device != "cuda":
        raise AttnbenchError(f"--timer cuda-graph needs a CUDA device; this run is on {device}")


def timer_modes(kind: str) -> tuple[str, ...] | None:
    return CudaGraphTimer.modes if kind == "cuda-graph" else None


def timer_runs_on(kind: str) -> tuple[str, ...] | None:
    """Where the work a timer of `kind` can time runs (Capabilities.runs_on); None: anywhere."""
    return CudaGraphTimer.runs_on if kind == "cuda-graph" else None


def timer_for_work(timer: Timer, runs_on: str) -> Timer:
    """The timer for a backend's work: on CUDA a call that runs in its own runtime is timed on the host."""
    if runs_on == OWN_RUNTIME and isinstance(timer, CudaEventTimer):
        return timer.host
    return timer


def timer_for(device: str, kind: str = "auto") -> Timer:
    check_timer(device, kind)
    if kind == "cuda-graph":
        return CudaGraphTimer()
    return CudaEventTimer() if device == "cuda" else ClockTimer()
