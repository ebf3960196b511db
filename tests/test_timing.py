"""Timers: exact statistics from an injected clock, and agreement with PyTorch's own benchmark timer."""

from __future__ import annotations

import contextlib
import itertools
import types
from typing import Iterator

import torch

from attnbench.registry import default_registry
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import L2_FLUSH_BYTES, ClockTimer, CudaEventTimer, CudaGraphTimer, TimingSettings, summarize
from tests.conftest import make_case


def test_clock_timer_samples_each_call_and_respects_budget_and_minimum() -> None:
    ticks = itertools.count(step=2_000_000)  # every clock read advances 2 ms: each call "takes" 2 ms
    timer = ClockTimer(clock=lambda: next(ticks))
    calls = []
    samples = timer.measure(lambda: calls.append(1), TimingSettings(warmup_ms=3, budget_ms=10, min_samples=2))
    assert samples == [2.0] * 5  # 10 ms budget / 2 ms per call (six would be needed for a 95% interval)
    assert samples.stop == "budget"
    # one warm-up call; the second agreed with it (steady), so it is the first of the five samples
    assert len(calls) == 1 + 5 and samples.warmup_calls == 1
    few = timer.measure(lambda: None, TimingSettings(warmup_ms=0, budget_ms=1, min_samples=4))
    assert len(few) == 4  # the minimum count wins over a small budget


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
    # a forward's checked call is its warm-up (warmup_ms 0): the eight samples are the first eight durations
    assert record.times_ms == [1.0, 1.0, 1.5, 2.0, 1.0, 1.0, 1.5, 2.0]
    assert (record.time_ms, record.time_ms_iqr, record.time_ms_min) == (1.25, 0.625, 1.0)
    assert record.noisy is True  # 0.625 > 10% of 1.25


def test_a_wide_spread_is_flagged_noisy_and_a_tight_one_is_not() -> None:
    """Noisy: IQR over 10% of the median, or the interval wider than the precision asked (±5% here)."""
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=8, max_samples=8, precision=0.05)
    case = make_case(seq_len=32)
    naive = default_registry().get("naive")
    noisy = Runner(RunInfo("r", "t"), ClockTimer(SpreadClock([1.0, 1.0, 1.5, 2.0])), settings).measure(CaseData(case), naive)
    assert noisy.status == "ok" and noisy.noisy
    assert noisy.time_ms_iqr > 0.1 * noisy.time_ms
    steady = Runner(RunInfo("r", "t"), ClockTimer(SpreadClock([1.0, 1.02, 1.04])), settings).measure(CaseData(case), naive)
    assert steady.status == "ok" and not steady.noisy
    assert not summarize([1.0, 1.0, 1.1, 1.1]).noisy and summarize([1.0, 1.0, 1.3, 1.3]).noisy
    strict = Runner(RunInfo("r", "t"), ClockTimer(SpreadClock([1.0, 1.02, 1.04])),
                    TimingSettings(warmup_ms=0, budget_ms=0, min_samples=8, max_samples=8, precision=0.01))
    narrow_iqr = strict.measure(CaseData(case), naive)
    assert narrow_iqr.time_ms_iqr < 0.1 * narrow_iqr.time_ms and narrow_iqr.noisy  # its interval is ±2%, not 1%


def test_cuda_graph_timer_sizing_and_its_refusals_on_a_cpu(tmp_path: "object") -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from attnbench.cli import app
    from attnbench.timing import graph_calls

    assert graph_calls(0.01, 1.0, 100) == 100 and graph_calls(0.3, 1.0, 100) == 4 and graph_calls(5.0, 1.0, 100) == 1
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


def test_the_cuda_flush_buffer_is_twice_the_devices_l2(monkeypatch: "object") -> None:
    """An H200 reports L2_cache_size 62914560 (60 MB): the flush is 120 MiB, not a fixed 256 MiB."""
    import types

    from attnbench import timing

    props = types.SimpleNamespace(L2_cache_size=62914560)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)  # type: ignore[attr-defined]
    assert timing.flush_bytes_for("cuda") == 2 * 62914560 == 120 << 20
    assert timing.flush_bytes_for(torch.device("cuda", 0)) == 120 << 20
    props.L2_cache_size = 0  # a device that reports none
    assert timing.flush_bytes_for("cuda") == timing.L2_FLUSH_BYTES
    assert timing.flush_bytes_for("meta") == timing.L2_FLUSH_BYTES
    timer = timing.CudaEventTimer(device="meta")  # allocates on the meta device: nothing real
    assert timer.flush.numel() == timing.L2_FLUSH_BYTES and timer.extra == {"l2_flush_bytes": timing.L2_FLUSH_BYTES}


# ---- the CUDA timers' logic, on a fake torch.cuda with a virtual clock --------------------------
class FakeEvent:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda, self.at = cuda, None

    def record(self) -> None:
        self.at = self.cuda.now

    def elapsed_time(self, end: "FakeEvent") -> float:
        return end.at - self.at


class FakeGraph:
    def __init__(self, cuda: "FakeCuda") -> None:
        self.cuda, self.captured = cuda, 0.0

    def replay(self) -> None:
        self.cuda.now += self.captured
        self.cuda.log.append("replay")


class FakeCuda:
    """Just enough of torch.cuda for CudaEventTimer and CudaGraphTimer: events read a virtual clock (ms); a kernel
    launched by `launch` advances it by the next of `durations`, or adds to the graph being captured."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = iter(durations)
        self.log: list[str] = []
        self.capturing: FakeGraph | None = None

    def launch(self) -> None:
        duration = next(self.durations)
        self.log.append("call")
        if self.capturing is not None:
            self.capturing.captured += duration
        else:
            self.now += duration

    def synchronize(self) -> None:
        pass

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # noqa: N802 - torch's spelling
        return FakeEvent(self)

    def Stream(self) -> object:  # noqa: N802
        return types.SimpleNamespace(wait_stream=lambda other: None)

    def current_stream(self) -> object:
        return self.Stream()

    def stream(self, stream: object) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def CUDAGraph(self) -> FakeGraph:  # noqa: N802
        return FakeGraph(self)

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph) -> Iterator[None]:
        self.capturing = graph
        try:
            yield
        finally:
            self.capturing = None


class FakeFlush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def zero_(self) -> None:
        self.log.append("flush")


def test_cuda_event_timer_flushes_l2_before_every_call_and_samples_to_the_budget() -> None:
    """Warm-up and samples alike: flush, then the call between two events. A cold 9 ms first call is warm-up;
    the samples fill the 10 ms budget (no interval within ±1% is reached on these): a batch sized from the first
    sample's 1 ms may pass the budget by the rest of that batch."""
    cuda = FakeCuda([9.0, 1.0, 3.0, 2.0, 5.0, 4.0, 2.0, 2.0])
    timer = CudaEventTimer(device="meta")  # the flush buffer on the meta device: nothing allocated
    assert timer.name == "cuda-event" and timer.flush.numel() == L2_FLUSH_BYTES
    timer.torch, timer.flush = types.SimpleNamespace(cuda=cuda), FakeFlush(cuda.log)
    samples = timer.measure(cuda.launch, TimingSettings(warmup_ms=0, budget_ms=10, min_samples=2, max_samples=100))
    assert samples == [1.0, 3.0, 2.0, 5.0, 4.0, 2.0]  # the 9 ms call did not agree with them: warm-up, thrown away
    assert samples.stop == "budget" and samples.warmup_calls == 1 and samples.warmup_ms == 9.0
    assert cuda.log == ["flush", "call"] * 7


def test_cuda_event_timer_sample_count_is_bounded_both_ways() -> None:
    for settings, count in ((TimingSettings(warmup_ms=0, budget_ms=1, min_samples=3, max_samples=100), 3),
                            (TimingSettings(warmup_ms=0, budget_ms=1000, min_samples=1, max_samples=6), 6)):
        cuda = FakeCuda([2.0] * 50)
        timer = CudaEventTimer(device="meta", flush_l2=False)
        assert timer.name == "cuda-event (no L2 flush)" and timer.flush is None
        timer.torch = types.SimpleNamespace(cuda=cuda)
        assert timer.measure(cuda.launch, settings) == [2.0] * count


def test_cuda_graph_timer_divides_each_replay_by_the_calls_it_holds() -> None:
    """0.25 ms calls: a graph of ceil(1 ms / 0.25 ms) = 4 calls; each sample is a replay over 4. Steady replays
    stop at six samples (the interval is exact); the budget counts replays' time (10 ms: ten replays)."""
    cuda = FakeCuda([0.25] * 8)
    timer = CudaGraphTimer()
    timer.torch = types.SimpleNamespace(cuda=cuda)
    settings = TimingSettings(warmup_ms=0, budget_ms=10, min_samples=2, max_samples=100)
    samples = timer.measure(cuda.launch, settings)
    assert samples == [0.25] * 6 and samples.stop == "precision"
    # 3 warm-up calls on the side stream, 1 timed to size the graph, 4 captured; then only replays: the first
    # (warm-up) agreed with the samples after it, so it is one of the six
    assert cuda.log == ["call"] * 8 + ["replay"] * 6
    noisy = FakeCuda([0.25] * 8)
    graph = CudaGraphTimer()
    graph.torch = types.SimpleNamespace(cuda=noisy)
    replays = iter([1.0, 1.2] * 50)
    original = FakeGraph.replay
    FakeGraph.replay = lambda self: (setattr(self.cuda, "now", self.cuda.now + next(replays)),  # type: ignore[method-assign]
                                     self.cuda.log.append("replay"))
    try:
        spread = graph.measure(noisy.launch, settings)
    finally:
        FakeGraph.replay = original  # type: ignore[method-assign]
    assert spread.stop == "budget" and 9 <= noisy.log.count("replay") <= 12  # ~10 ms of replays, not 40 ms
