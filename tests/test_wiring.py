"""From the timer's samples to the record: median, IQR, throughput, the noise flag and which call is timed.

Timers are injected: a scripted one that reports samples of a known spread, and the real ClockTimer on a
virtual clock that a test backend's forward and backward advance by known amounts.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import counting, workload
from attnbench.core.case import Case
from attnbench.core.interval import NOISE_THRESHOLD, summarize
from attnbench.records.results import Record
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer, TimingSettings
from attnbench.verify.inputs import CaseData, naive_attention
from tests.helpers import ScriptedTimer, make_case

SPREAD = [4.0, 1.0, 3.0, 10.0, 2.0]  # sorted 1 2 3 4 10: median 3, inclusive quartiles 2 and 4, minimum 1


def run_with(timer: Any, case: Case, backend: Backend | None = None, info: RunInfo | None = None,
             precision: float = 0.01) -> Record:
    timing = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=4, max_samples=4, precision=precision)
    return measure(CaseData(case), backend or default_registry().get("naive"), timer,
                   Settings(info or RunInfo("w", "t"), timing))


def test_time_is_the_median_of_the_samples_and_throughput_follows_it() -> None:
    case = make_case(seq_len=64, causal=True, window=9, heads=4, kv_heads=2)
    timer = ScriptedTimer(SPREAD)
    record = run_with(timer, case, info=RunInfo("w", "t", peak_tflops=2.0, peak_bandwidth_gbs=50.0))
    assert record.status == "ok"
    assert timer.calls == 5, "each sample is one call of the timed function"
    assert record.times_ms == SPREAD  # raw samples, in the order taken
    assert record.samples == 5
    assert record.time_ms == 3.0
    assert record.time_ms_iqr == 2.0
    assert record.time_ms_min == 1.0
    assert record.timer == "scripted"
    assert record.tflops == pytest.approx(counting.flops(case) / 3e-3 / 1e12, rel=1e-12)
    moved = default_registry().get("naive").bytes_moved(case)
    assert record.bandwidth_gbs == pytest.approx(moved / 3e-3 / 1e9, rel=1e-12)
    assert record.percent_of_peak == pytest.approx(100 * record.tflops / 2.0, rel=1e-12)  # a compute-bound case
    assert record.noisy is True  # IQR 2 ms on a 3 ms median


def test_decode_percent_of_peak_is_against_bandwidth() -> None:
    case = make_case(seq_len=1, kv_seq_len=512, heads=4, kv_heads=1)
    record = run_with(ScriptedTimer(SPREAD), case, info=RunInfo("w", "t", peak_tflops=2.0, peak_bandwidth_gbs=50.0))
    moved = default_registry().get("naive").bytes_moved(case)
    assert record.percent_of_peak == pytest.approx(100 * moved / 3e-3 / 1e9 / 50.0, rel=1e-12)
    assert record.extra["peak_bound"] == "memory"


# ---- the noise flag: an IQR over NOISE_THRESHOLD of the median ------------------------------
# Seven samples: the fewest past six, so the median has a 95% interval (the extremes, at 98.4%).
HALF_IQR = NOISE_THRESHOLD * 10.0 / 2  # 0.5 at a 10% threshold: exact in binary
AT_THRESHOLD = [10.0 - HALF_IQR] * 3 + [10.0] + [10.0 + HALF_IQR] * 3  # median 10, IQR exactly the threshold's
JUST_ABOVE = AT_THRESHOLD[:4] + [10.0 + HALF_IQR + 0.0078125] * 3  # IQR just over it


def test_noise_flag_at_exactly_the_threshold_and_just_above(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from attnbench.core import policy

    # One window on a device whose windows do not wander: the samples' own interval decides (core.interval).
    monkeypatch.setitem(policy.DEVICES, "cpu", replace(policy.DEVICES["cpu"], window_noise=0.0, run_noise=0.0))
    at, above = summarize(AT_THRESHOLD), summarize(JUST_ABOVE)
    assert (at.median, at.iqr) == (10.0, 1.0) and at.noisy is False
    assert above.median == 10.0 and above.iqr == 1.0078125 and above.noisy is True
    case = make_case(seq_len=32)
    # A record's `noisy` is "the interval is wider than the precision asked" (±5% here), never a wide IQR alone: a
    # wide spread widens the interval
    assert run_with(ScriptedTimer(AT_THRESHOLD), case).noisy is True
    assert run_with(ScriptedTimer(AT_THRESHOLD), case, precision=0.2).noisy is False
    assert run_with(ScriptedTimer(JUST_ABOVE), case, precision=0.2).noisy is False
    # and "too few samples for a 95% interval at all": five samples, however close, are not known to ±20%
    assert run_with(ScriptedTimer([10.0, 10.0, 10.0, 10.0, 10.1]), case, precision=0.2).noisy is True
    assert run_with(ScriptedTimer([10.0] * 6), case, precision=0.2).noisy is False


def test_summary_of_one_and_of_two_samples() -> None:
    one = summarize([7.0])
    assert (one.median, one.iqr, one.minimum, one.noisy) == (7.0, 0.0, 7.0, False)
    two = summarize([4.0, 2.0])
    assert (two.median, two.iqr, two.minimum) == (3.0, 1.0, 2.0)  # inclusive quartiles 2.5 and 3.5


# ---- which call is timed ----------------------------------------------------------------------
FWD_MS, BWD_MS = 3, 11


class VirtualClock:
    """A nanosecond clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms * 1_000_000


class _Clocked(torch.autograd.Function):
    """Naive attention whose forward "takes" FWD_MS and whose backward "takes" BWD_MS on the virtual clock."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: Case,
                clock: VirtualClock) -> torch.Tensor:
        clock.advance(FWD_MS)
        ctx.save_for_backward(q, k, v)
        ctx.case, ctx.clock = case, clock
        return naive_attention(q, k, v, workload.mask(case))

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        ctx.clock.advance(BWD_MS)
        q, k, v = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            grads = torch.autograd.grad(naive_attention(*leaves, workload.mask(ctx.case)), leaves, dout)
        return (*grads, None, None)


class Clocked(Backend):
    name = "clocked"

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        return Prepared((q, k, v), lambda q, k, v: _Clocked.apply(q, k, v, case, self.clock), kernel="clocked")


@pytest.mark.parametrize("mode, expected_ms", [("fwd", FWD_MS), ("bwd", BWD_MS), ("fwd_bwd", FWD_MS + BWD_MS)])
def test_each_mode_times_its_own_calls(mode: str, expected_ms: int) -> None:
    """fwd times the forward, bwd only the backward, fwd_bwd both: samples are exactly the virtual durations."""
    clock = VirtualClock()
    record = run_with(ClockTimer(clock), make_case(seq_len=32, causal=True, mode=mode), Clocked(clock))
    assert record.status == "ok", record.reason
    assert record.times_ms == [float(expected_ms)] * 4
    assert record.time_ms == float(expected_ms)
    assert record.timer == "perf_counter"
