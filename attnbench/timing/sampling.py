"""When to stop (docs/conventions.md "Timing"): every timer feeds one `Sampler`, so warm-up and the stop rules
are written once."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from attnbench.core.interval import median_interval, rank, samples_needed

STOPS = ("precision", "budget", "max_samples")
WARMUP_BATCH_MAX = 5
GROWTH = 1.25  # interval checkpoints grow geometrically: O(n log n) checking
MAX_GROWTH = 2.0


@dataclass(frozen=True)
class TimingSettings:
    """Budgets in ms of the call's own time."""

    warmup_ms: float = 50.0
    budget_ms: float = 300.0
    min_samples: int = 5
    max_samples: int = 1000
    precision: float = 0.01
    confidence: float = 0.95
    warmed_ms: float = 0.0  # calls just before timing (a forward's check) count as warm-up
    prior_ms: float | None = None  # that call's time, which may join the samples
    energy_ms: float = 0.0  # run.sustain's loop; 0: none
    rounds: int = 1
    refine: float = 0.0

    def round_share(self) -> TimingSettings:
        if self.rounds <= 1:
            return self
        return dataclasses.replace(self, budget_ms=self.budget_ms / self.rounds)


@dataclass(frozen=True)
class Samples:
    """Per-call times in ms and how the sampling went; `warmup_calls` None: no warm-up was counted."""

    times: tuple[float, ...]
    stop: str | None = None  # one of STOPS, or None
    warmup_ms: float = 0.0
    warmup_calls: int | None = None
    steady: bool = False
    prior_joined: bool = False  # the checked call's time is the first sample


@dataclass
class Sampler:
    settings: TimingSettings
    cost: float = 1.0  # calls per sample (a graph replay); budgets are time spent
    samples: list[float] = field(default_factory=list)
    discarded: list[float] = field(default_factory=list)
    warming: bool = True
    steady: bool = False
    stop: str | None = None
    _batches: list[list[float]] = field(default_factory=list)
    _pending: list[float] = field(default_factory=list)  # the last warm-up batch, maybe steady
    _prior_pending: bool = False
    _checkpoint: int = 0

    prior_joined: bool = False

    def __post_init__(self) -> None:
        warmed = self.settings.warmed_ms
        if warmed > 0 and warmed >= self.settings.warmup_ms:
            self._end_warm_up()
            if self.settings.prior_ms is not None:
                self._pending, self._prior_pending = [self.settings.prior_ms], True

    @property
    def warmup_ms(self) -> float:
        return sum(self.discarded) * self.cost

    @property
    def spent_ms(self) -> float:
        return sum(self.samples) * self.cost

    def estimate_ms(self) -> float:
        """Recent samples, else the last warm-up batch, else warmed_ms."""
        recent = self.samples[-64:] or self._pending or (self._batches[-1] if self._batches else [])
        return statistics.median(recent) * self.cost if recent else self.settings.warmed_ms

    def next_batch(self) -> int:
        if self.warming:
            if not self._batches:
                return 1
            batched_ms = sum(sum(b) for b in self._batches) * self.cost
            left = self.settings.warmup_ms - self.settings.warmed_ms - batched_ms
            return max(1, min(WARMUP_BATCH_MAX, int(left / max(self.estimate_ms(), 1e-6) / 2)))
        if self.stop is not None:
            return 0
        s = self.settings
        n = len(self.samples) + len(self._pending)
        least = max(s.min_samples, 1)
        per_call = max(self.estimate_ms(), 1e-6)
        spent = self.spent_ms + sum(self._pending) * self.cost
        affordable = n + max(0, math.ceil((s.budget_ms - spent) / per_call))
        target = max(least, min(max(least, self._checkpoint), affordable), n + 1)
        return max(1, min(target, s.max_samples) - n)

    def add(self, times: list[float]) -> None:
        if not times:
            return
        if self.warming:
            self._warm(times)
            return
        if self._pending:
            self._settle(times)
        self.samples.extend(times)
        self._judge()

    def _warm(self, times: list[float]) -> None:
        previous = statistics.median(self._batches[-1]) if self._batches else None
        self._batches.append(times)
        agree = previous is not None and _agree(statistics.median(times), previous, self.settings.precision)
        spent = self.settings.warmed_ms + sum(sum(b) for b in self._batches) * self.cost
        if not (agree or spent >= self.settings.warmup_ms):
            return
        self._end_warm_up(agree)
        last = self._batches[-1]
        keep = 1
        if agree and all(_agree(t, statistics.median(last), self.settings.precision)
                         for t in self._batches[-2]):
            keep = 2
        for batch in self._batches[:-keep] if agree else self._batches[:-1]:
            self.discarded.extend(batch)
        if agree:
            steady = [t for batch in self._batches[-keep:] for t in batch]
            self.samples.extend(steady[:self.settings.max_samples])
            self.discarded.extend(steady[self.settings.max_samples:])
            self._judge()
        else:  # cut short by warmup_ms
            self._pending = list(last)

    def _end_warm_up(self, steady: bool = False) -> None:
        self.warming, self.steady = False, steady
        self._checkpoint = max(self.settings.min_samples, rank_floor(self.settings.confidence))

    def _settle(self, times: list[float]) -> None:
        """Steady calls of the last warm-up batch join the samples."""
        pending, self._pending = self._pending, []
        fits = len(self.samples) + len(pending) + len(times) <= self.settings.max_samples
        median = statistics.median(times)
        prior, self._prior_pending = self._prior_pending, False
        if fits and all(_agree(t, median, self.settings.precision) for t in pending):
            self.samples.extend(pending)
            self.prior_joined = prior
        elif not prior:
            self.discarded.extend(pending)

    def _judge(self) -> None:
        s = self.settings
        n = len(self.samples)
        if n < s.min_samples:
            return
        if n >= self._checkpoint:
            interval = median_interval(self.samples, s.confidence)
            if interval.level >= s.confidence and interval.half_width() <= s.precision:
                self.stop = "precision"
                return
            needed = samples_needed(n, interval.half_width(), s.precision) if interval.level >= s.confidence \
                else rank_floor(s.confidence)
            self._checkpoint = max(math.ceil(n * GROWTH), min(needed, math.ceil(n * MAX_GROWTH)))
        if n >= s.max_samples:
            self.stop = "max_samples"
        elif self.spent_ms >= s.budget_ms:
            self.stop = "budget"

    def result(self) -> Samples:
        return Samples(tuple(self.samples), self.stop, self.warmup_ms, len(self.discarded), self.steady,
                       self.prior_joined)


def _agree(a: float, b: float, precision: float) -> bool:
    return abs(a - b) <= precision * b


def rank_floor(confidence: float) -> int:
    """6 at 95%."""
    n = 1
    while rank(n, confidence)[0] == 0:
        n += 1
    return n


def run(sampler: Sampler, batch: Callable[[int], list[float]]) -> Samples:
    while (count := sampler.next_batch()) > 0:
        sampler.add(batch(count))
    return sampler.result()
