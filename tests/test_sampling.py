"""The stop rules: the median's distribution-free interval, steady-state warm-up, and why sampling stopped."""

from __future__ import annotations

import dataclasses
import random

import pytest

from attnbench.backends.registry import default_registry
from attnbench.core.interval import median_interval, rank, samples_needed
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer, Samples, Timer, TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case


class ScriptClock:
    """A nanosecond clock for ClockTimer: call i (counted over warm-up and samples) lasts durations_ms(i)."""

    def __init__(self, durations_ms) -> None:  # type: ignore[no-untyped-def]
        self.durations = durations_ms
        self.now = 0
        self.reads = 0
        self.calls = 0

    def __call__(self) -> int:
        self.reads += 1
        if self.reads % 2 == 0:  # the read after a call
            self.now += int(self.durations(self.calls) * 1e6)
            self.calls += 1
        return self.now


def time_calls(durations_ms, **settings: float):  # type: ignore[no-untyped-def]
    clock = ScriptClock(durations_ms)
    samples = ClockTimer(clock).measure(lambda: None, TimingSettings(**settings))  # type: ignore[arg-type]
    return samples, clock


def test_interval_ranks_are_the_exact_binomial_ones() -> None:
    assert rank(5) == (0, 0.0)  # five samples cannot bound a median at 95%: [min, max] covers 1 - 2/32
    assert rank(6) == (1, pytest.approx(1 - 2 / 64))
    assert rank(10) == (2, pytest.approx(1 - 2 * 11 / 1024))  # P(B <= 1) = 11/1024 <= 2.5% < P(B <= 2)
    k, level = rank(4000)  # the normal approximation: n/2 - 1.96 sqrt(n)/2
    assert k == 1938 and level == 0.95
    interval = median_interval([5.0, 1.0, 4.0, 2.0, 3.0, 6.0])
    assert (interval.median, interval.low, interval.high) == (3.5, 1.0, 6.0)
    few = median_interval([2.0, 1.0, 3.0])
    assert (few.low, few.high, few.level) == (1.0, 3.0, 0.75)


def test_the_interval_covers_the_median_of_a_skewed_distribution_as_often_as_it_says() -> None:
    """Exponential samples (mean 1, median ln 2): the 95% interval must hold the true median in >= 95% of runs."""
    import math

    rng = random.Random(12)
    for n in (6, 20, 101):
        hits = 0
        trials = 3000
        for _ in range(trials):
            interval = median_interval([rng.expovariate(1.0) for _ in range(n)])
            hits += interval.low <= math.log(2) <= interval.high
        assert hits / trials >= 0.94, (n, hits / trials)  # nominal >= 0.95; 3000 trials leave ~0.4% of noise
        assert hits / trials <= interval.level + 0.02


def test_samples_needed_scales_with_the_square_of_the_width() -> None:
    assert samples_needed(10, 0.04, 0.01) == 160
    assert samples_needed(10, 0.005, 0.01) == 10
    assert samples_needed(10, 0.04, 0.0) == 20  # precision 0 (the API allows it): sample on to the budget


def test_precision_zero_samples_to_the_budget() -> None:
    samples, clock = time_calls(lambda i: 2.0 + 0.01 * (i % 3), warmup_ms=0, budget_ms=40, min_samples=3, precision=0.0)
    assert samples.stop == "budget" and 18 <= len(samples.times) <= 30


def test_steady_calls_stop_as_soon_as_the_interval_is_narrow_enough() -> None:
    samples, clock = time_calls(lambda i: 2.0, warmup_ms=100, budget_ms=1000, min_samples=3)
    assert samples.stop == "precision"
    assert list(samples.times) == [2.0] * 6  # six samples are the fewest with a 95% interval
    # the batch of five after the first call agreed with it, and the first call with them: all six are samples
    assert samples.warmup_calls == 0 and samples.warmup_ms == 0.0 and samples.steady
    assert clock.calls == 6


def test_warm_up_ends_when_two_batches_agree_not_at_warmup_ms() -> None:
    """Calls take 9, 5, 3, then 1 ms: warm-up runs batches until consecutive medians agree, far inside 100 ms."""
    slow = [9.0, 5.0, 3.0]
    samples, _ = time_calls(lambda i: slow[i] if i < len(slow) else 1.0, warmup_ms=100, budget_ms=50, min_samples=3)
    assert samples.steady and samples.warmup_ms < 30
    assert 9.0 not in samples.times and 5.0 not in samples.times and 3.0 not in samples.times
    assert samples.stop == "precision"


def test_a_slow_call_warm_from_the_start_costs_no_warm_up_and_a_cold_one_costs_one_call() -> None:
    """10 ms calls with warmup_ms 1: the one warm-up call is kept when it agrees with the samples after it."""
    warm, clock = time_calls(lambda i: 10.0, warmup_ms=1, budget_ms=1000, min_samples=3)
    assert list(warm.times) == [10.0] * 6 and warm.warmup_calls == 0 and clock.calls == 6
    cold, clock = time_calls(lambda i: 20.0 if i == 0 else 10.0, warmup_ms=1, budget_ms=1000, min_samples=3)
    assert list(cold.times) == [10.0] * 6 and cold.warmup_calls == 1 and cold.warmup_ms == 20.0 and clock.calls == 7


def test_warm_up_is_bounded_by_warmup_ms_when_calls_never_settle() -> None:
    samples, _ = time_calls(lambda i: 1.0 + 0.1 * i, warmup_ms=5, budget_ms=3, min_samples=2)
    assert not samples.steady
    assert 5 <= samples.warmup_ms < 5 + 2.0  # stops with the batch that passes warmup_ms
    assert samples.stop == "budget" and len(samples.times) in (2, 3)  # a batch sized from the estimate may pass by one


def test_a_spread_that_never_narrows_stops_at_the_budget_or_at_max_samples() -> None:
    alternating = lambda i: 1.0 if i % 2 else 1.2  # noqa: E731 - the median's interval stays ±10% wide
    samples, _ = time_calls(alternating, warmup_ms=0, budget_ms=40, min_samples=3)
    assert samples.stop == "budget" and 40 <= sum(samples.times) < 40 + 1.2 * 10
    capped, _ = time_calls(alternating, warmup_ms=0, budget_ms=10_000, min_samples=3, max_samples=50)
    assert capped.stop == "max_samples" and len(capped.times) == 50


def test_a_tight_precision_asks_for_more_samples_than_a_loose_one() -> None:
    rng = random.Random(3)
    noise = [1.0 + rng.gauss(0, 0.03) for _ in range(100_000)]
    loose, _ = time_calls(lambda i: noise[i], warmup_ms=0, budget_ms=10_000, min_samples=3, precision=0.02)
    tight, _ = time_calls(lambda i: noise[i], warmup_ms=0, budget_ms=10_000, min_samples=3, precision=0.004,
                       max_samples=100_000)
    assert loose.stop == tight.stop == "precision"
    assert len(loose.times) < 60 < 200 < len(tight.times)
    times = list(tight.times)
    assert median_interval(times).half_width() <= 0.004 < median_interval(times[:200]).half_width()


def test_every_record_carries_its_interval_and_why_sampling_stopped() -> None:
    clock = ScriptClock(lambda i: 1.0 if i % 2 else 1.5)
    record = measure(CaseData(make_case(seq_len=32)), default_registry().get("naive"), ClockTimer(clock),
                     Settings(RunInfo("r", "t"),
                              TimingSettings(warmup_ms=0, budget_ms=30, min_samples=3, precision=0.01)))
    assert record.status == "ok" and record.stop == "budget"
    interval = median_interval(record.times_ms)
    # the run's interval holds the samples' own (one window) and the device's run noise around it
    assert record.ci_low_ms < interval.low and record.ci_high_ms > interval.high and record.ci_level == 0.95
    assert record.ci_source == "windows" and record.ci_low_ms <= record.time_ms <= record.ci_high_ms
    assert record.noisy  # the interval is wider than the ±1% asked
    # a forward's checked call is its warm-up (warmup_ms 0 is covered by it): no timed call was thrown away; timed
    # by the same clock, it is a sample only if it agreed with the samples after it
    assert record.extra["warmup_calls"] == 0 and record.extra["check_ms"] > 0
    assert clock.calls == record.samples + (0 if record.extra["check_sampled"] else 1)

    calm = measure(CaseData(make_case(seq_len=32)), default_registry().get("naive"),
                   ClockTimer(ScriptClock(lambda i: 1.0)),
                   Settings(RunInfo("r", "t"), TimingSettings(warmup_ms=0, budget_ms=30, min_samples=3)))
    # steady samples stop at the precision, yet one window of a CPU run does not know the run's median to ±1%
    assert calm.stop == "precision" and calm.noisy and calm.ci_low_ms < 1.0 < calm.ci_high_ms


def test_a_backward_mode_warms_up_with_timed_calls_and_a_slow_forward_with_its_checked_call() -> None:
    naive = default_registry().get("naive")
    settings = TimingSettings(warmup_ms=5, budget_ms=0, min_samples=3, max_samples=3)
    clock = ScriptClock(lambda i: 10.0 if i == 0 else 2.0)  # the first timed call is cold
    backward = measure(
        CaseData(make_case(seq_len=32, mode="fwd_bwd")), naive, ClockTimer(clock),
        Settings(RunInfo("r", "t"), settings))
    assert backward.extra["warmup_calls"] >= 1 and backward.times_ms == [2.0, 2.0, 2.0]
    assert "check_ms" not in backward.extra
    slow = dataclasses.replace(settings, warmup_ms=0.001)  # any checked call takes longer than 1 µs
    forward = measure(
        CaseData(make_case(seq_len=32)), naive, ClockTimer(ScriptClock(lambda i: 2.0)),
        Settings(RunInfo("r", "t"), slow))
    assert forward.extra["warmup_calls"] == 0 and forward.times_ms == [2.0, 2.0, 2.0]


def test_a_timer_that_gives_no_stop_nor_warm_up_still_gets_an_interval_and_a_stop() -> None:
    class Plain(Timer):
        name = "plain"

        def measure(self, fn, settings):  # type: ignore[no-untyped-def]
            fn()
            return Samples((1.0,) * 8)

    record = measure(
        CaseData(make_case(seq_len=32)), default_registry().get("naive"), Plain(),
        Settings(RunInfo("r", "t"), TimingSettings()))
    assert record.stop == "precision" and record.ci_low_ms < 1.0 < record.ci_high_ms
    assert "warmup_calls" not in record.extra


def test_a_slow_forwards_checked_call_is_its_first_sample_when_it_agrees() -> None:
    """Calls of 2 ms by the timer's clock (the checked call included) and a warm-up of 1 µs (any checked call
    covers it, by the real clock that warm-up counts in): the check is the warm-up,
    agrees with the samples after it, and is one of the three: three calls in all, where there were five (check,
    warm-up, three samples) plus one for memory."""
    clock = ScriptClock(lambda i: 2.0)
    settings = TimingSettings(warmup_ms=0.001, budget_ms=0, min_samples=3, max_samples=3)
    record = measure(
        CaseData(make_case(seq_len=32)), default_registry().get("naive"), ClockTimer(clock),
        Settings(RunInfo("r", "t"), settings))
    assert record.extra["check_sampled"] and record.times_ms == [2.0, 2.0, 2.0] and clock.calls == 3
    assert record.memory_method == "torch.profiler CPU allocator events" and record.peak_memory_bytes > 0
    cold = ScriptClock(lambda i: 9.0 if i == 0 else 2.0)  # the checked call was slower: not a sample
    record = measure(
        CaseData(make_case(seq_len=32)), default_registry().get("naive"), ClockTimer(cold),
        Settings(RunInfo("r", "t"), settings))
    assert not record.extra["check_sampled"] and record.times_ms == [2.0, 2.0, 2.0] and cold.calls == 4


def test_two_groups_of_samples_are_flagged_with_the_h200s_own_flex_samples() -> None:
    """flex fwd_bwd at 4K (16 heads, 4 KV heads) on the H200: 19 samples near 1.0 ms and 5 at 1.45-1.6 ms. The IQR
    stays under 10% (not noisy), but the record now says the samples fall into two groups."""
    from pathlib import Path

    from attnbench.core.interval import two_modes
    from attnbench.records.results import stored_lines
    from attnbench.run.recording import bimodal_extra

    records = stored_lines(Path(__file__).resolve().parents[1] / "reports" / "NVIDIA-H200-20261130-012712" / "run")
    (flex,) = [r for r in records
               if r["backend"] == "flex" and r["case_id"].endswith("s4096-h16-kv4-d128-causal-fwd_bwd")]
    assert not flex["noisy"]
    modes = bimodal_extra(flex["times_ms"])["bimodal"]
    assert 0.99 < modes["low_ms"] < 1.02 and 1.4 < modes["high_ms"] < 1.6 and modes["high_share"] == round(5 / 24, 3)
    assert two_modes([1.0, 1.01, 0.99, 1.02, 1.0, 1.03, 0.98, 1.01, 1.0, 1.02]) is None  # one group
    assert two_modes([1.0] * 20 + [1.5]) is None  # one outlier is not a group
