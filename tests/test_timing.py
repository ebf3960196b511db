"""Timers: exact statistics from an injected clock, and agreement with PyTorch's own benchmark timer."""

from __future__ import annotations

import contextlib
import itertools
from typing import Iterator

import pytest
import torch

from attnbench import timing
from attnbench.errors import AttnbenchError
from attnbench.registry import default_registry
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import (L2_FLUSH_BYTES, ClockTimer, CudaEventTimer, CudaGraphTimer, TimingSettings, graph_calls,
                              summarize, timer_for)
from tests.conftest import make_case


def test_clock_timer_samples_each_call_and_respects_budget_and_minimum() -> None:
    ticks = itertools.count(step=2_000_000)  # every clock read advances 2 ms: each call "takes" 2 ms
    timer = ClockTimer(clock=lambda: next(ticks))
    calls = []
    samples = timer.measure(lambda: calls.append(1), TimingSettings(warmup_ms=3, budget_ms=10, min_samples=2))
    assert samples == [2.0] * 5  # 10 ms budget / 2 ms per call
    assert len(calls) == 2 + 5  # two warm-up calls cover 3 ms
    few = timer.measure(lambda: None, TimingSettings(warmup_ms=0, budget_ms=1, min_samples=4))
    assert len(few) == 4  # the minimum count wins over a small budget
    capped = timer.measure(lambda: None, TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=3))
    assert len(capped) == 3  # the maximum count wins over a large budget


def test_summary_statistics() -> None:
    stats = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats.median == 3.0
    assert stats.iqr == 2.0  # 4 - 2 (inclusive quartiles)
    assert stats.minimum == 1.0
    assert summarize([5.0]).iqr == 0.0


def test_median_agrees_with_torch_benchmark_timer_within_5_percent() -> None:
    """attnbench's median for sdpa-math equals blocked_autorange's on the same call (CPU).

    The two timers take turns in short rounds, so a change of the machine's speed (another process,
    frequency scaling) reaches both halves of a round alike; the median of the per-round ratios is compared.
    """
    import statistics

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.benchmark import Timer

    case = make_case(seq_len=1024, heads=8, kv_heads=8, head_dim=64, causal=True)
    data = CaseData(case)
    runner = Runner(RunInfo("fidelity", "t"), ClockTimer(), TimingSettings(warmup_ms=50, budget_ms=300))
    q, k, v = data.inputs.q, data.inputs.k, data.inputs.v
    timer = Timer("F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                  globals={"F": torch.nn.functional, "q": q, "k": k, "v": v}, num_threads=torch.get_num_threads())
    ours, theirs = [], []
    for _ in range(7):
        record = runner.measure(data, default_registry().get("sdpa-math"))
        assert record.status == "ok"
        ours.append(record.time_ms)
        with sdpa_kernel([SDPBackend.MATH]):
            theirs.append(timer.blocked_autorange(min_run_time=0.3).median * 1e3)
    ratio = statistics.median(a / b for a, b in zip(ours, theirs))
    assert abs(ratio - 1) <= 0.05, f"attnbench {ours} vs blocked_autorange {theirs}: ratio {ratio:.3f}"


class SpreadClock:
    """A clock whose calls take the given durations in turn (ms), to plant a wide or a tight spread."""

    def __init__(self, durations_ms: list[float]) -> None:
        self.durations = itertools.cycle(durations_ms)
        self.now = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        if self.reads % 2 == 0:  # the read after a call: the call took the next duration
            self.now += int(next(self.durations) * 1e6)
        return self.now


def test_clock_timer_samples_flow_into_the_record_exactly() -> None:
    """ClockTimer on a clock whose calls take 1, 1, 1.5 and 2 ms in turn: the record holds exactly those samples'
    statistics. (The noise threshold itself, at and just above 10%, is pinned in test_wiring.py.)"""
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=8, max_samples=8)
    case = make_case(seq_len=32)
    naive = default_registry().get("naive")
    record = Runner(RunInfo("r", "t"), ClockTimer(SpreadClock([1.0, 1.0, 1.5, 2.0])), settings).measure(
        CaseData(case), naive)
    assert record.status == "ok"
    # the one warm-up call took the first 1 ms; the eight samples are the next eight durations
    assert record.times_ms == [1.0, 1.5, 2.0, 1.0, 1.0, 1.5, 2.0, 1.0]
    assert (record.time_ms, record.time_ms_iqr, record.time_ms_min) == (1.25, 0.625, 1.0)
    assert record.noisy is True  # 0.625 > 10% of 1.25


def test_cuda_graph_timer_refusals_on_a_cpu(tmp_path: "object") -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from attnbench.cli import app

    out = Path(str(tmp_path)) / "out"
    result = CliRunner().invoke(app, ["run", "quick", "--out", str(out), "--timer", "cuda-graph"])
    assert result.exit_code == 2 and "--timer cuda-graph needs a CUDA device; this run is on cpu" in result.output
    assert not out.exists()
    unknown = CliRunner().invoke(app, ["run", "quick", "--out", str(out), "--timer", "events"])
    assert unknown.exit_code == 2 and "--timer events: unknown timer; allowed: auto, cuda-graph" in unknown.output


def test_a_timer_that_times_forward_only_skips_backward_with_a_reason() -> None:
    class ForwardOnly(ClockTimer):
        name = "fwd-only"
        modes = ("fwd",)

    runner = Runner(RunInfo("r", "t"), ForwardOnly(), TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1))
    naive = default_registry().get("naive")
    assert runner.measure(CaseData(make_case(seq_len=16)), naive).status == "ok"
    skipped = runner.measure(CaseData(make_case(seq_len=16, mode="fwd_bwd")), naive)
    assert skipped.status == "skipped" and skipped.reason == "the fwd-only timer times fwd only, not fwd_bwd"


# ---- the CUDA timers' logic, on a fake torch.cuda with a virtual clock --------------------------
class FakeStream:
    def wait_stream(self, other: "FakeStream") -> None:
        if not isinstance(other, FakeStream):
            raise TypeError(f"wait_stream needs a stream, got {other!r}")


class FakeEvent:
    """torch.cuda.Event's contract: elapsed_time needs timing enabled on both events and both completed."""

    def __init__(self, cuda: "FakeCuda", enable_timing: bool) -> None:
        self.cuda, self.timing, self.at, self.done = cuda, enable_timing, None, False

    def record(self) -> None:
        self.at, self.done = self.cuda.now, False
        self.cuda.pending.append(self)

    def elapsed_time(self, end: "FakeEvent") -> float:
        if self.timing is not True or end.timing is not True:
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.done and end.done):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return end.at - self.at


class FakeGraph:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda, self.captured = cuda, 0.0

    def replay(self) -> None:
        self.cuda.now += self.captured
        self.cuda.log.append("replay")


class FakeCuda:
    """Just enough of torch.cuda for CudaEventTimer and CudaGraphTimer, on a virtual clock in ms that the host's
    perf_counter follows too: a kernel launched by `launch` advances it by the next of `durations`, or adds to
    the graph being captured; a replay advances it by what was captured."""

    def __init__(self, durations: Iterator[float], start_ms: float = 1000.0) -> None:
        self.now = start_ms
        self.durations = durations
        self.log: list[str] = []
        self.pending: list[FakeEvent] = []
        self.capturing: FakeGraph | None = None

    def launch(self) -> None:
        if len(self.log) > 10_000:
            raise RuntimeError("runaway loop in the timer")
        duration = next(self.durations)
        self.log.append("call")
        if self.capturing is not None:
            self.capturing.captured += duration
        else:
            self.now += duration

    def synchronize(self) -> None:
        for event in self.pending:
            event.done = True
        self.pending.clear()

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        if not isinstance(stream, FakeStream):
            raise TypeError(f"stream() needs a stream, got {stream!r}")
        yield

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph) -> Iterator[None]:
        self.capturing = graph
        try:
            yield
        finally:
            self.capturing = None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Put this fake in place of torch.cuda's pieces the timers use, and the host clock on its time."""
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent(self, enable_timing))
        monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
        monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
        monkeypatch.setattr(torch.cuda, "stream", self.stream)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: FakeGraph(self))
        monkeypatch.setattr(torch.cuda, "graph", self.graph)
        monkeypatch.setattr(timing.time, "perf_counter", lambda: self.now / 1e3)


class FakeFlush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


def test_cuda_event_timer_warms_up_sizes_to_the_budget_and_flushes_l2_before_each_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """5 ms of warm-up at 2 ms a call is 3 calls; a 3-call estimate of 2 ms sizes a 10 ms budget to 5 samples."""
    cuda = FakeCuda(iter([2.0] * 6 + [1.0, 3.0, 2.0, 5.0, 4.0]))
    cuda.install(monkeypatch)
    timer = CudaEventTimer(device="meta")  # the flush buffer on the meta device: nothing allocated
    assert timer.name == "cuda-event"
    assert timer.flush.dtype == torch.int8 and timer.flush.numel() == L2_FLUSH_BYTES  # 256 MiB > any L2
    assert timer.flush.device.type == "meta"
    timer.flush = FakeFlush(cuda.log)
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=5, budget_ms=10, min_samples=2, max_samples=100))
    assert samples == [1.0, 3.0, 2.0, 5.0, 4.0]  # each sample its own call, in order
    assert cuda.log == ["call"] * 3 + ["call"] * 3 + ["flush", "call"] * 5


@pytest.mark.parametrize("settings, durations, count", [
    (TimingSettings(warmup_ms=0, budget_ms=1, min_samples=3, max_samples=100), 2.0, 3),  # the minimum wins
    (TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=6), 2.0, 6),  # the maximum wins
    (TimingSettings(warmup_ms=0, budget_ms=2.5, min_samples=1, max_samples=100), 0.5, 5),  # short calls
    (TimingSettings(warmup_ms=0, budget_ms=0.01, min_samples=1, max_samples=100), 0.0, 10),  # 1 µs floor
])
def test_cuda_event_timer_sample_count(monkeypatch: pytest.MonkeyPatch, settings: TimingSettings, durations: float,
                                       count: int) -> None:
    cuda = FakeCuda(itertools.repeat(durations))
    cuda.install(monkeypatch)
    timer = CudaEventTimer(device="meta", flush_l2=False)
    assert timer.name == "cuda-event (no L2 flush)" and timer.flush is None
    assert timer.measure(cuda.launch, settings) == [durations] * count
    assert cuda.log.count("call") == 1 + 3 + count  # no warm-up asked: still one call, then the 3-call estimate


@pytest.mark.parametrize("warmup_ms, warmup_replays", [(3, 3), (0, 1)])
def test_cuda_graph_timer_divides_each_replay_by_the_calls_it_holds(monkeypatch: pytest.MonkeyPatch, warmup_ms: float,
                                                                   warmup_replays: int) -> None:
    """0.375 ms calls: a graph of ceil(1 / 0.375) = 3 calls, 1.125 ms a replay; a 9 ms budget is 8 samples."""
    cuda = FakeCuda(itertools.repeat(0.375))
    cuda.install(monkeypatch)
    timer = CudaGraphTimer()
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=warmup_ms, budget_ms=9, min_samples=2,
                                                        max_samples=100))
    assert samples == [0.375] * 8
    # 3 warm-up calls on a side stream, 1 timed to size the graph, 3 captured; then only replays:
    # the warm-up's (3 ms at 1.125 ms each, or the one replay always made), 1 to size the loop, 8 samples
    assert cuda.log == ["call"] * 7 + ["replay"] * (warmup_replays + 1 + 8)


def test_cuda_graph_sizing() -> None:
    assert graph_calls(0.01, 1.0, 100) == 100 and graph_calls(0.3, 1.0, 100) == 4 and graph_calls(5.0, 1.0, 100) == 1
    assert graph_calls(0.0, 1.0, 100) == 100  # an unmeasurably short call: as many as allowed


def test_timer_for_each_device_and_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    class EventTimer:  # stands in for CudaEventTimer, which allocates its L2 flush buffer on the GPU
        name = "cuda-event"

    monkeypatch.setattr(timing, "CudaEventTimer", EventTimer)
    assert isinstance(timer_for("cpu"), ClockTimer)
    assert isinstance(timer_for("cuda"), EventTimer)
    assert isinstance(timer_for("cuda", "cuda-graph"), CudaGraphTimer)
    with pytest.raises(AttnbenchError, match="--timer cuda-graph needs a CUDA device; this run is on cpu"):
        timer_for("cpu", "cuda-graph")
