"""Timers: a monotonic clock on CPU, CUDA events with the L2 cache cleared on CUDA. Injectable for tests."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from attnbench.errors import AttnbenchError

if TYPE_CHECKING:
    import torch

# A measurement whose samples' IQR exceeds this fraction of their median is flagged `noisy`.
NOISE_THRESHOLD = 0.10
L2_FLUSH_BYTES = 256 << 20  # larger than any current GPU's L2 cache (H100/H200: 50 MB, B200: 126 MB)


@dataclass(frozen=True)
class TimingSettings:
    """Warm-up and measuring budgets, in milliseconds of the measured call's own time."""

    warmup_ms: float = 50.0
    budget_ms: float = 300.0
    min_samples: int = 5
    max_samples: int = 1000


class Timer(Protocol):
    """Times a call repeatedly and returns the raw per-call samples in milliseconds."""

    name: str

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]: ...


@dataclass(frozen=True)
class Summary:
    """Statistics computed from raw samples."""

    median: float
    iqr: float
    minimum: float

    @property
    def noisy(self) -> bool:
        """Whether the spread is too wide for the median to be trusted to NOISE_THRESHOLD."""
        return self.iqr > NOISE_THRESHOLD * self.median


def summarize(samples: list[float]) -> Summary:
    """Median, interquartile range and minimum of the samples (ms)."""
    if len(samples) >= 2:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = q3 = samples[0]
    return Summary(statistics.median(samples), q3 - q1, min(samples))


class ClockTimer:
    """Wall time of each call on a monotonic clock (CPU work is synchronous, so this is the call's time)."""

    name = "perf_counter"

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock = clock

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        self._run_for(fn, settings.warmup_ms, 1, 1 << 30)
        return self._run_for(fn, settings.budget_ms, settings.min_samples, settings.max_samples)

    def _run_for(self, fn: Callable[[], object], budget_ms: float, least: int, most: int) -> list[float]:
        samples: list[float] = []
        spent = 0.0
        while len(samples) < most and (len(samples) < least or spent < budget_ms):
            start = self.clock()
            fn()
            samples.append((self.clock() - start) / 1e6)
            spent += samples[-1]
        return samples


class CudaEventTimer:
    """CUDA events around each call, with the L2 cache overwritten before each (as triton's do_bench)."""

    name = "cuda-event"

    def __init__(self, device: torch.device | str = "cuda", flush_l2: bool = True) -> None:
        import torch

        self.torch = torch
        self.flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device) if flush_l2 else None
        if not flush_l2:
            self.name = "cuda-event (no L2 flush)"

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        torch = self.torch
        torch.cuda.synchronize()
        start = time.perf_counter()
        calls = 0
        while calls == 0 or (time.perf_counter() - start) * 1e3 < settings.warmup_ms:
            fn()
            calls += 1
            torch.cuda.synchronize()
        estimate = self._estimate(fn)
        count = int(min(settings.max_samples, max(settings.min_samples, settings.budget_ms / max(estimate, 1e-3))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            if self.flush is not None:
                self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def _estimate(self, fn: Callable[[], object]) -> float:
        """Milliseconds per call over a few calls, to size the measuring loop to the budget."""
        torch = self.torch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(3):
            fn()
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end) / 3


class CudaGraphTimer:
    """Replays one CUDA graph holding `calls` back-to-back forward calls and divides: launch overhead gone.

    Warm-up runs on a side stream before capture, as torch.cuda.graphs requires. The calls in a graph run
    back to back, so L2 is not flushed between them (unlike CudaEventTimer): these are warm-cache times.
    Only forward calls are captured (a backward's autograd graph is not capturable this simply).
    """

    name = "cuda-graph"
    modes = ("fwd",)
    TARGET_MS = 1.0  # each replay lasts about this long, so event resolution does not matter
    MAX_CALLS = 100  # every captured call keeps its own output in the graph's pool

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        torch = self.torch
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
        start = time.perf_counter()
        replays = 0
        while replays == 0 or (time.perf_counter() - start) * 1e3 < settings.warmup_ms:
            graph.replay()
            replays += 1
            torch.cuda.synchronize()
        replay_ms = max(calls * 1e-3, self._replay_ms(graph))
        count = int(min(settings.max_samples, max(settings.min_samples, settings.budget_ms / replay_ms)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            starts[i].record()
            graph.replay()
            ends[i].record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) / calls for s, e in zip(starts, ends)]
        del graph
        return samples

    def _replay_ms(self, graph: object) -> float:
        torch = self.torch
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()  # type: ignore[attr-defined]
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end)


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


def timer_for(device: str, kind: str = "auto") -> Timer:
    """The timer for a device: CUDA events (or a CUDA graph, when asked) on CUDA, the monotonic clock on CPU."""
    check_timer(device, kind)
    if kind == "cuda-graph":
        return CudaGraphTimer()
    return CudaEventTimer() if device == "cuda" else ClockTimer()
