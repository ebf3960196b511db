"""When to stop: warm up until the call time is steady, then sample until the median is known.

Every timer drives the same `Sampler`: it asks how many calls to run next (`next_batch`), runs and
times them its own way (a clock around each call, CUDA events, graph replays), and hands the times back
(`add`). The sampler decides everything else, so the stop rules are written once:

- warm-up: batches of calls until two consecutive batch medians agree within the precision asked, or
  `warmup_ms` of calls has been spent (at least one call either way). Calls already steady are not thrown
  away: the batch that agreed with the one before it becomes the first samples (with that one too when each of
  its calls agrees with the later batch's median), and a last warm-up batch cut short by `warmup_ms` (a slow
  call's single warm-up call) joins them when each of its calls agrees with the median of the first batch of
  samples. Only calls not shown steady are discarded. Calls of the same
  function made before timing (`warmed_ms`: the runner's checked call of a forward) count toward
  `warmup_ms`: when they cover it, warm-up is over before the first timed call, and that call, timed by the
  same clock (`prior_ms`), joins the samples when it agrees with the first batch of them;
- sampling: until the median's distribution-free 95% interval (attnbench.core.interval) is within
  ±`precision` of it (`stop = "precision"`), or `budget_ms` of samples is spent (`"budget"`), or
  `max_samples` is reached (`"max_samples"`) — never fewer than `min_samples`.

The interval is recomputed only at checkpoints that grow the sample count geometrically, so checking
costs O(n log n) in all.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from attnbench.core.interval import median_interval, rank, samples_needed

STOPS = ("precision", "budget", "max_samples")
WARMUP_BATCH_MAX = 5  # calls per warm-up batch after the first: enough for a median, small enough to stop early
GROWTH = 1.25  # each sampling checkpoint has at least this many times the samples of the one before
MAX_GROWTH = 2.0  # and at most this many (a too-hopeful prediction of the samples needed)


@dataclass(frozen=True)
class TimingSettings:
    """Warm-up and measuring budgets, in milliseconds of the measured call's own time, and the precision asked.

    Sampling stops once the median's `confidence` interval is within ±`precision` of it (relative), or the
    budget or `max_samples` runs out, never before `min_samples`.
    """

    warmup_ms: float = 50.0
    budget_ms: float = 300.0
    min_samples: int = 5
    max_samples: int = 1000
    precision: float = 0.01
    confidence: float = 0.95
    # Time already spent calling the same function just before timing (the runner's checked call of a forward):
    # it counts toward warmup_ms, so a slow call's check is its warm-up.
    warmed_ms: float = 0.0
    # That call's own time by the timer's clock (None when not comparable: another clock, or CUDA): if the
    # warm-up is already covered, it joins the samples when it agrees with the first batch of them.
    prior_ms: float | None = None
    # The loop before the samples (attnbench.run.sustain): at least this long, back to back, read around by the energy
    # counter; on CUDA until the GPU's clock settles. 0: no loop (a suite's timing says 1000 unless it sets it).
    energy_ms: float = 0.0
    # The rounds the samples are taken in (attnbench.run.rounds): each round's sampler gets budget_ms / rounds.
    rounds: int = 1
    # The suite-level budget after the rounds: this share of every measurement's budget_ms together, spent re-timing
    # the measurements whose interval is still wider than ±precision.
    refine: float = 0.0

    def round_share(self) -> TimingSettings:
        """These settings for one round: its share of the budget."""
        if self.rounds <= 1:
            return self
        return dataclasses.replace(self, budget_ms=self.budget_ms / self.rounds)


class Samples(list):  # type: ignore[type-arg]
    """The timed samples (ms), as a plain list, carrying how the measurement went.

    A list so that anything written for `Timer.measure(...) -> list[float]` keeps working.
    """

    stop: str | None = None  # "precision", "budget" or "max_samples"; None from a timer that does not say
    warmup_ms: float = 0.0  # time spent in warm-up calls, by the timer's own clock
    warmup_calls: int = 0
    steady: bool = False  # whether warm-up ended because two batches agreed (not because warmup_ms ran out)
    prior_joined: bool = False  # the call made before timing (the runner's checked call) is the first sample

    @classmethod
    def of(cls, samples: list[float], stop: str | None, warmup_ms: float = 0.0, warmup_calls: int = 0,
           steady: bool = False) -> Samples:
        made = cls(samples)
        made.stop, made.warmup_ms, made.warmup_calls, made.steady = stop, warmup_ms, warmup_calls, steady
        return made


@dataclass
class Sampler:
    """The stop rules of one measurement, fed batch by batch."""

    settings: TimingSettings
    # Calls' worth of time per sample: a CUDA graph replay of `calls` calls yields one sample of a call's time
    # but costs `calls` of them, and the budgets (warmup_ms, budget_ms) are time actually spent.
    cost: float = 1.0
    samples: list[float] = field(default_factory=list)
    discarded: list[float] = field(default_factory=list)  # warm-up calls that were not steady
    warming: bool = True
    steady: bool = False
    stop: str | None = None
    _batches: list[list[float]] = field(default_factory=list)  # warm-up batches so far
    _pending: list[float] = field(default_factory=list)  # the last warm-up batch, steady or not yet known
    _prior_pending: bool = False  # _pending holds the call made before timing, not a timed call
    _checkpoint: int = 0

    prior_joined: bool = False  # the call made before timing (settings.prior_ms) became a sample

    def __post_init__(self) -> None:
        warmed = self.settings.warmed_ms
        if warmed > 0 and warmed >= self.settings.warmup_ms:  # the calls before timing were the warm-up
            self._end_warm_up()
            if self.settings.prior_ms is not None:  # and may be a sample: the first batch will tell
                self._pending, self._prior_pending = [self.settings.prior_ms], True

    @property
    def warmup_ms(self) -> float:
        return sum(self.discarded) * self.cost

    @property
    def spent_ms(self) -> float:
        return sum(self.samples) * self.cost

    def estimate_ms(self) -> float:
        """What a sample costs as known so far (ms): the median of the latest samples, else of the last warm-up
        batch, else the call made before timing (warmed_ms)."""
        recent = self.samples[-64:] or self._pending or (self._batches[-1] if self._batches else [])
        return statistics.median(recent) * self.cost if recent else self.settings.warmed_ms

    def next_batch(self) -> int:
        """How many calls to run (and time) next; 0 when the measurement is done."""
        if self.warming:
            if not self._batches:
                return 1
            left = self.settings.warmup_ms - self.settings.warmed_ms - sum(sum(b) for b in self._batches) * self.cost
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
        """The times (ms) of the calls just run, in order."""
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
        if agree and all(_agree(t, statistics.median(last), self.settings.precision) for t in self._batches[-2]):
            keep = 2  # every call of the batch before agreed with the last one too: steady already
        for batch in self._batches[:-keep] if agree else self._batches[:-1]:
            self.discarded.extend(batch)
        if agree:  # the last batch (and the one before, when each of its calls agrees) is steady: the first samples
            steady = [t for batch in self._batches[-keep:] for t in batch]
            self.samples.extend(steady[:self.settings.max_samples])
            self.discarded.extend(steady[self.settings.max_samples:])
            self._judge()
        else:  # cut short by warmup_ms: steady or not, the first samples will tell
            self._pending = list(last)

    def _end_warm_up(self, steady: bool = False) -> None:
        self.warming, self.steady = False, steady
        self._checkpoint = max(self.settings.min_samples, rank_floor(self.settings.confidence))

    def _settle(self, times: list[float]) -> None:
        """The last warm-up batch joins the samples if each of its calls agrees with the median of the first
        batch of samples (and they fit under max_samples); else it was warm-up after all."""
        pending, self._pending = self._pending, []
        fits = len(self.samples) + len(pending) + len(times) <= self.settings.max_samples
        median = statistics.median(times)
        prior, self._prior_pending = self._prior_pending, False
        if fits and all(_agree(t, median, self.settings.precision) for t in pending):
            self.samples.extend(pending)
            self.prior_joined = prior
        elif not prior:  # a call made before timing was no timed warm-up: nothing to count as discarded
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
        made = Samples.of(list(self.samples), self.stop, self.warmup_ms, len(self.discarded), self.steady)
        made.prior_joined = self.prior_joined
        return made


def _agree(a: float, b: float, precision: float) -> bool:
    """Two batch medians agree within the precision asked (relative to the earlier one)."""
    return abs(a - b) <= precision * b


def rank_floor(confidence: float) -> int:
    """The fewest samples whose order statistics can bound the median at `confidence` (6 at 95%)."""
    n = 1
    while rank(n, confidence)[0] == 0:
        n += 1
    return n


def run(sampler: Sampler, batch: Callable[[int], list[float]]) -> Samples:
    """Drive `sampler` with `batch(n)`, which runs n calls and returns their times (ms)."""
    while (count := sampler.next_batch()) > 0:
        sampler.add(batch(count))
    return sampler.result()
