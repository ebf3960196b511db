"""Timers: exact statistics from an injected clock, and agreement with PyTorch's own benchmark timer."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import pytest
import torch

from attnbench.backends.registry import default_registry
from attnbench.core.errors import AttnbenchError
from attnbench.core.interval import summarize
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing import timers as timing
from attnbench.timing.timers import (
    L2_FLUSH_BYTES,
    ClockTimer,
    CudaEventTimer,
    CudaGraphTimer,
    TimingSettings,
    graph_calls,
    timer_for,
)
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case


def test_clock_timer_samples_each_call_and_respects_budget_and_minimum() -> None:
    ticks = itertools.count(step=2_000_000)  # every clock read advances 2 ms: each call "takes" 2 ms
    timer = ClockTimer(clock=lambda: next(ticks))
    calls = []
    samples = timer.measure(lambda: calls.append(1), TimingSettings(warmup_ms=3, budget_ms=10, min_samples=2))
    assert samples.times == (2.0,) * 5  # 10 ms budget / 2 ms per call (six would be needed for a 95% interval)
    assert samples.stop == "budget"
    # two warm-up calls of 2 ms cover 3 ms and agree (steady): they are the first two of the five samples
    assert len(calls) == 5 and samples.warmup_calls == 0 and samples.steady
    few = timer.measure(lambda: None, TimingSettings(warmup_ms=0, budget_ms=1, min_samples=4))
    assert len(few.times) == 4  # the minimum count wins over a small budget
    capped = timer.measure(lambda: None, TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=3))
    assert len(capped.times) == 3  # the maximum count wins over a large budget


def test_summary_statistics() -> None:
    stats = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats.median == 3.0
    assert stats.iqr == 2.0  # 4 - 2 (inclusive quartiles)
    assert stats.minimum == 1.0
    assert summarize([5.0]).iqr == 0.0


# Samples each timer takes per round, at least: a median of the 3-4 calls a 300 ms budget buys at 85 ms a call
# (sdpa-math at 1K on a 2-core VM at half this machine's speed) has a 95% interval wider than the 5% compared.
FIDELITY_SAMPLES = 10


def fidelity_rounds(rounds: int = 16) -> tuple[list[float], list[float]]:
    """attnbench's and blocked_autorange's medians (ms) for sdpa-math on one call, `rounds` alternating rounds,
    each timer given the time for FIDELITY_SAMPLES calls (at least 300 ms)."""
    import time

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.benchmark import Timer

    case = make_case(seq_len=1024, heads=8, kv_heads=8, head_dim=64, causal=True)
    data = CaseData(case)
    q, k, v = data.inputs.q, data.inputs.k, data.inputs.v
    timer = Timer("F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                  globals={"F": torch.nn.functional, "q": q, "k": k, "v": v}, num_threads=torch.get_num_threads())
    with sdpa_kernel([SDPBackend.MATH]):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        start = time.perf_counter()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        call_ms = (time.perf_counter() - start) * 1e3
    budget_ms = max(300.0, FIDELITY_SAMPLES * call_ms)
    settings = Settings(RunInfo("fidelity", "t"), TimingSettings(warmup_ms=50, budget_ms=budget_ms,
                                                                 min_samples=FIDELITY_SAMPLES))

    def attnbench_ms() -> float:
        record = measure(data, default_registry().get("sdpa-math"), ClockTimer(), settings)
        assert record.status == "ok"
        return record.time_ms

    def autorange_ms() -> float:
        with sdpa_kernel([SDPBackend.MATH]):
            return timer.blocked_autorange(min_run_time=budget_ms / 1e3).median * 1e3

    attnbench_ms(), autorange_ms()  # a first round of each, thrown away
    ours, theirs = [], []
    for i in range(rounds):  # the two alternate which goes first
        first, second = (attnbench_ms, autorange_ms) if i % 2 == 0 else (autorange_ms, attnbench_ms)
        a, b = first(), second()
        ours.append(a if i % 2 == 0 else b)
        theirs.append(b if i % 2 == 0 else a)
    return ours, theirs


@pytest.mark.slow
@pytest.mark.serial  # the two timers' medians on real calls: a test on the other core would skew the rounds unevenly
def test_median_agrees_with_torch_benchmark_timer_within_5_percent() -> None:
    """attnbench's median for sdpa-math equals blocked_autorange's on the same call (CPU).

    The two timers take turns in short rounds, so a change of the machine's speed (another process,
    frequency scaling) reaches both halves of a round alike; the median of the per-round ratios is compared.
    The claim is the timer's: the same call, under the same conditions, gets the same median. So the rounds
    run in a fresh process: inside the full test run, twice in three CI runs, attnbench read 6-30% high in the
    rounds where it followed blocked_autorange (the state earlier tests leave; standalone both agree within 1%).
    16 rounds: on a 2-core VM one round's ratio spreads 0.86-1.15 from the machine alone, and the median of 8 read
    1.064 in a fresh clone's serial pass (16 rounds there, twice: 1.011 and 0.993).
    """
    import json
    import os
    import statistics
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[1]
    code = "import json; from tests.test_timing import fidelity_rounds; print(json.dumps(fidelity_rounds()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=True)
    ours, theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=False))
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
    record = measure(
        CaseData(case), naive, ClockTimer(SpreadClock([1.0, 1.0, 1.5, 2.0])), Settings(RunInfo("r", "t"), settings))
    assert record.status == "ok"
    # a forward's checked call is its warm-up (warmup_ms 0) and took the first 1 ms by the same clock; it did not
    # agree with the samples after it, so it is no sample: the eight samples are the next eight durations
    assert record.times_ms == [1.0, 1.5, 2.0, 1.0, 1.0, 1.5, 2.0, 1.0] and not record.extra["check_sampled"]
    assert (record.time_ms, record.time_ms_iqr, record.time_ms_min) == (1.25, 0.625, 1.0)
    assert record.noisy is True  # 0.625 > 10% of 1.25


def test_a_wide_spread_is_flagged_noisy_and_a_tight_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noisy: the window's part of the interval wider than the precision asked (±5% here). On a device whose windows
    do not wander (no window or run noise), one window's own samples decide; a record written before intervals is
    noisy by its IQR over 10%."""
    from dataclasses import replace

    from attnbench.core import policy

    monkeypatch.setitem(policy.DEVICES, "cpu", replace(policy.DEVICES["cpu"], window_noise=0.0, run_noise=0.0))
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=8, max_samples=8, precision=0.05)
    case = make_case(seq_len=32)
    naive = default_registry().get("naive")
    noisy = measure(CaseData(case), naive, ClockTimer(SpreadClock([1.0, 1.0, 1.5, 2.0])),
                    Settings(RunInfo("r", "t"), settings))
    assert noisy.status == "ok" and noisy.noisy
    assert noisy.time_ms_iqr > 0.1 * noisy.time_ms
    steady = measure(CaseData(case), naive, ClockTimer(SpreadClock([1.0, 1.02, 1.04])),
                     Settings(RunInfo("r", "t"), settings))
    assert steady.status == "ok" and not steady.noisy
    assert not summarize([1.0, 1.0, 1.1, 1.1]).noisy and summarize([1.0, 1.0, 1.3, 1.3]).noisy
    narrow_iqr = measure(CaseData(case), naive, ClockTimer(SpreadClock([1.0, 1.02, 1.04])), Settings(
        RunInfo("r", "t"), TimingSettings(warmup_ms=0, budget_ms=0, min_samples=8, max_samples=8, precision=0.01)))
    assert narrow_iqr.time_ms_iqr < 0.1 * narrow_iqr.time_ms and narrow_iqr.noisy  # its interval is ±2%, not 1%


def test_cuda_graph_timer_refusals_on_a_cpu(tmp_path: object) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from attnbench.cli.main import app

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

    settings = Settings(RunInfo("r", "t"), TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1))
    naive = default_registry().get("naive")
    assert measure(CaseData(make_case(seq_len=16)), naive, ForwardOnly(), settings).status == "ok"
    skipped = measure(CaseData(make_case(seq_len=16, mode="fwd_bwd")), naive, ForwardOnly(), settings)
    assert skipped.status == "skipped" and skipped.reason == "the fwd-only timer times fwd only, not fwd_bwd"


# ---- the CUDA timers' logic, on a fake torch.cuda with a virtual clock --------------------------
class FakeStream:
    def wait_stream(self, other: FakeStream) -> None:
        if not isinstance(other, FakeStream):
            raise TypeError(f"wait_stream needs a stream, got {other!r}")


class FakeEvent:
    """torch.cuda.Event's contract: elapsed_time needs timing enabled on both events and both completed."""

    def __init__(self, cuda: FakeCuda, enable_timing: bool) -> None:
        self.cuda, self.timing, self.at, self.done = cuda, enable_timing, None, False

    def record(self) -> None:
        self.at, self.done = self.cuda.now, False
        self.cuda.pending.append(self)

    def elapsed_time(self, end: FakeEvent) -> float:
        if self.timing is not True or end.timing is not True:
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.done and end.done):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return end.at - self.at


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
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
        monkeypatch.setattr(timing.time, "perf_counter_ns", lambda: round(self.now * 1e6))


class FakeFlush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


def test_cuda_event_timer_flushes_l2_before_every_call_and_samples_to_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm-up and samples alike: flush, then the call between two events. A cold 9 ms first call is warm-up;
    the samples fill the 10 ms budget (no interval within ±1% is reached on these): a batch sized from the first
    sample's 1 ms may pass the budget by the rest of that batch."""
    cuda = FakeCuda(iter([9.0, 1.0, 3.0, 2.0, 5.0, 4.0, 2.0]))
    cuda.install(monkeypatch)
    timer = CudaEventTimer(device="meta")  # the flush buffer on the meta device: nothing allocated
    assert timer.name == "cuda-event"
    # no L2 size on a meta device: the fallback, larger than any L2 (a real GPU's is twice its L2)
    assert timer.flush.dtype == torch.int8 and timer.flush.numel() == L2_FLUSH_BYTES
    assert timer.flush.device.type == "meta"
    timer.flush = FakeFlush(cuda.log)
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=0, budget_ms=10, min_samples=2, max_samples=100))
    assert samples.times == (1.0, 3.0, 2.0, 5.0, 4.0, 2.0)  # the 9 ms call did not agree: warm-up, thrown away
    assert samples.stop == "budget" and samples.warmup_calls == 1 and samples.warmup_ms == 9.0
    assert cuda.log == ["flush", "call"] * 7


@pytest.mark.parametrize("settings, durations, count, stop", [
    (TimingSettings(warmup_ms=0, budget_ms=1, min_samples=3, max_samples=100), 2.0, 3, "budget"),  # the minimum wins
    (TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=4), 2.0, 4, "max_samples"),  # the maximum
    (TimingSettings(warmup_ms=0, budget_ms=2.5, min_samples=1, max_samples=100), 0.5, 5, "budget"),  # short calls
    (TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=100), 2.0, 6, "precision"),  # steady
    (TimingSettings(warmup_ms=0, budget_ms=0.01, min_samples=1, max_samples=100), 0.0, 6, "precision"),  # no time
])
def test_cuda_event_timer_sample_count(monkeypatch: pytest.MonkeyPatch, settings: TimingSettings, durations: float,
                                       count: int, stop: str) -> None:
    cuda = FakeCuda(itertools.repeat(durations))
    cuda.install(monkeypatch)
    timer = CudaEventTimer(device="meta", flush_l2=False)
    assert timer.name == "cuda-event (no L2 flush)" and timer.flush is None
    samples = timer.measure(cuda.launch, settings)
    assert samples.times == (durations,) * count and samples.stop == stop
    # no warm-up asked: still one warm-up call, which agreed with the samples after it and became one of them
    assert cuda.log.count("call") == count and samples.warmup_calls == 0


@pytest.mark.parametrize("warmup_ms, thrown_away", [(3, 0), (0, 0)])
def test_cuda_graph_timer_divides_each_replay_by_the_calls_it_holds(monkeypatch: pytest.MonkeyPatch, warmup_ms: float,
                                                                   thrown_away: int) -> None:
    """0.375 ms calls: a graph of ceil(1 / 0.375) = 3 calls, 1.125 ms a replay; each sample is a replay over 3.
    Steady replays stop at six samples; warm-up (3 ms) ends when a second replay agrees with the first, and both,
    steady, are samples."""
    cuda = FakeCuda(itertools.repeat(0.375))
    cuda.install(monkeypatch)
    timer = CudaGraphTimer()
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=warmup_ms, budget_ms=9, min_samples=2,
                                                        max_samples=100))
    assert samples.times == (0.375,) * 6 and samples.stop == "precision" and samples.warmup_calls == thrown_away
    # 3 warm-up calls on a side stream, 1 timed to size the graph, 3 captured; then only replays
    assert cuda.log == ["call"] * 7 + ["replay"] * (thrown_away + 6)


def test_cuda_graph_timer_budget_counts_replays_not_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays alternating 1.0 and 1.2 ms never settle to ±1%: a 10 ms budget is about ten replays (not forty: a
    sample is a replay over its four calls, but it costs the whole replay)."""
    cuda = FakeCuda(itertools.repeat(0.25))
    cuda.install(monkeypatch)
    replays = itertools.cycle([1.0, 1.2])
    monkeypatch.setattr(FakeGraph, "replay", lambda self: (setattr(self.cuda, "now", self.cuda.now + next(replays)),
                                                           self.cuda.log.append("replay")))
    samples = CudaGraphTimer().measure(cuda.launch, TimingSettings(warmup_ms=0, budget_ms=10, min_samples=2,
                                                                   max_samples=100))
    assert samples.stop == "budget" and 9 <= cuda.log.count("replay") <= 12


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


def test_the_cuda_flush_buffer_is_twice_the_devices_l2(monkeypatch: object) -> None:
    """An H200 reports L2_cache_size 62914560 (60 MB): the flush is 120 MiB, not a fixed 256 MiB."""
    import types

    from attnbench.timing import timers as timing

    props = types.SimpleNamespace(L2_cache_size=62914560)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)  # type: ignore[attr-defined]
    assert timing.flush_bytes_for("cuda") == 2 * 62914560 == 120 << 20
    assert timing.flush_bytes_for(torch.device("cuda", 0)) == 120 << 20
    props.L2_cache_size = 0  # a device that reports none
    assert timing.flush_bytes_for("cuda") == timing.L2_FLUSH_BYTES
    assert timing.flush_bytes_for("meta") == timing.L2_FLUSH_BYTES
    timer = timing.CudaEventTimer(device="meta")  # allocates on the meta device: nothing real
    assert timer.flush.numel() == timing.L2_FLUSH_BYTES and timer.extra == {"l2_flush_bytes": timing.L2_FLUSH_BYTES,
                                                                       "launch_cover_us": 0.0}


def test_a_gpu_spin_before_each_call_covers_the_cpus_enqueue_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events time the GPU, so it must not wait for the CPU inside them: each call is preceded by a spin, then the
    flush, then the start event. The spin lasts 1.5x an iteration's host time (+10 us), here 3 ms of 2 ms calls
    capped at 2 ms; the samples are the calls' times alone."""
    cuda = FakeCuda(itertools.repeat(2.0))
    cuda.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: cuda.log.append(f"spin {cycles}"), raising=False)
    timer = CudaEventTimer(device="meta")
    timer.flush = FakeFlush(cuda.log)
    timer.cycles_per_ms = 1000.0  # as measured once on a GPU
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=0, budget_ms=10, min_samples=3, max_samples=3))
    assert samples.times == (2.0, 2.0, 2.0)
    assert cuda.log[:5] == ["call", "spin 2000", "flush", "call", "spin 2000"]  # the probe call, then the batch
    assert cuda.log.count("spin 2000") == cuda.log.count("flush") == 3
    # each call's host time (its enqueue: here the call's 2 ms) beside its events'
    assert timer.extra == {"l2_flush_bytes": timing.L2_FLUSH_BYTES, "launch_cover_us": 2000.0, "host_ms": 2.0,
                           "events_ms": 2.0}
    assert timing.cover_ms(20e-6, 1.5, 2.0) == pytest.approx(0.04)  # a 20 us enqueue gets a 40 us spin


def test_one_sample_for_a_trace_is_made_as_the_timers_samples_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """--trace profiles one timed sample after the samples (attnbench.run.profiled): on CUDA the spin that covers
    the launch, the L2 flush and the call between two events, as in the batch; on a CPU the clock around the call."""
    cuda = FakeCuda(itertools.repeat(2.0))
    cuda.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: cuda.log.append(f"spin {cycles}"), raising=False)
    timer = CudaEventTimer(device="meta")
    timer.flush = FakeFlush(cuda.log)
    timer.cycles_per_ms = 1000.0
    timer.measure(cuda.launch, TimingSettings(warmup_ms=0, budget_ms=10, min_samples=3, max_samples=3))
    batch = cuda.log[-3:]
    cuda.log.clear()
    assert timer.one_sample(cuda.launch)() == 2.0
    assert cuda.log == batch == ["spin 2000", "flush", "call"] and not cuda.pending  # synchronised
    ticks = iter([5_000_000, 8_000_000])
    calls = []
    assert ClockTimer(lambda: next(ticks)).one_sample(lambda: calls.append(1))() == 3.0 and calls == [1]
    plain = lambda: None  # noqa: E731 - a graph's sample is a replay: the trace's second call is a plain call
    assert CudaGraphTimer.one_sample(None, plain) is plain  # type: ignore[arg-type]
