"""Timers: exact statistics from an injected clock, and agreement with PyTorch's own benchmark timer."""

from __future__ import annotations

import itertools

import torch

from attnbench.registry import default_registry
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import ClockTimer, TimingSettings, summarize
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
