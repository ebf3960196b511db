"""Statistics of raw samples: median, IQR and minimum, and a distribution-free confidence interval for the median
from order statistics.

For n independent samples of any continuous distribution, the count of samples below the true median is
Binomial(n, 1/2). The interval [x_(k), x_(n-k+1)] (1-based order statistics) covers the median with
probability 1 - 2·P(B <= k - 1); k is the largest rank keeping that at or above the confidence asked.
No shape is assumed, so heavy tails and outliers (a preempted call) cost width, never coverage.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from attnbench.core import policy

# The policy this module's statistics serve, declared in attnbench.core.policy.
CONFIDENCE = policy.CONFIDENCE
NOISE_THRESHOLD = policy.NOISE_THRESHOLD
RUN_TO_RUN_NOISE = {name: policy.run_to_run_noise(name) for name in policy.DEVICES}
EXACT_UP_TO = 1000  # exact binomial ranks up to this many samples; the normal approximation beyond


@dataclass(frozen=True)
class Interval:
    """The median of some samples and the interval around it, at `level` confidence."""

    median: float
    low: float
    high: float
    level: float  # the interval's actual coverage: >= the confidence asked, or less when too few samples

    def half_width(self) -> float:
        """The larger distance from the median to an end, relative to the median (0.01 = ±1%)."""
        if self.median <= 0:
            return math.inf if self.high > self.low else 0.0
        return max(self.median - self.low, self.high - self.median) / self.median


def _log_binom_pmf(n: int, i: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2.0)


@lru_cache(maxsize=4096)
def rank(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """(k, level): the 1-based lower rank of the median interval of n samples and its exact coverage.

    k = 0 when n samples are too few for `confidence` (n < 6 at 95%): no order statistics reach it.
    """
    alpha = 1.0 - confidence
    if n <= EXACT_UP_TO:
        tail, k = 0.0, 0
        for i in range(n // 2 + 1):
            nxt = tail + math.exp(_log_binom_pmf(n, i))
            if nxt > alpha / 2:
                break
            tail, k = nxt, i + 1
        return k, 1.0 - 2.0 * tail if k else 0.0
    z = _z(confidence)
    k = max(1, math.floor(n / 2 - z * math.sqrt(n) / 2))
    return k, confidence


def _z(confidence: float) -> float:
    """The standard normal quantile for a two-sided `confidence` (inverse error function by bisection)."""
    target = confidence
    low, high = 0.0, 10.0
    for _ in range(80):
        mid = (low + high) / 2
        if math.erf(mid / math.sqrt(2)) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def median_of_sorted(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def median_interval(samples: list[float], confidence: float = CONFIDENCE) -> Interval:
    """The median and its distribution-free interval. With too few samples for `confidence`, the interval is
    [min, max] and `level` says what that range covers (1 - 2^(1-n); 0 for one sample)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    n = len(ordered)
    median = median_of_sorted(ordered)
    k, level = rank(n, confidence)
    if k == 0:
        return Interval(median, ordered[0], ordered[-1], 1.0 - 2.0 ** (1 - n) if n > 1 else 0.0)
    return Interval(median, ordered[k - 1], ordered[n - k], level)


@dataclass(frozen=True)
class RunInterval:
    """A record's interval for the run's median (`interval`) and the part of its half-width that more windows would
    narrow (`windows_part`, a share of the median): the rest is the device's run noise, which no window of a run
    sees."""

    interval: Interval
    windows_part: float
    windows: int


def run_interval(samples: list[float], window_medians: list[float], device: str,
                 confidence: float = CONFIDENCE) -> RunInterval:
    """The interval of a measurement's median as a run states it (docs/conventions.md, "Intervals").

    The independent unit is the window: the samples of one round (or one re-timing) share that window's bias, so
    their order-statistic interval (median_interval) holds only the window's median. The windows' medians spread
    around the run's median; their log standard deviation, pooled with the device's window noise (PRIOR_WINDOWS
    windows' worth), gives a Student-t half-width over √windows, never narrower than the samples' own interval.
    The device's run noise is added in quadrature: what another run of the same suite would see and no window of
    this one does. The point is the median of all samples.
    """
    own = policy.device(device)
    median = median_of_sorted(sorted(samples))
    logs = [math.log(m) for m in window_medians if m > 0]
    k = max(1, len(logs))
    observed = statistics.variance(logs) if len(logs) >= 2 else 0.0
    df = policy.PRIOR_WINDOWS + k - 1
    pooled = (policy.PRIOR_WINDOWS * own.window_noise ** 2 + (k - 1) * observed) / df
    between = policy.t_quantile(df, confidence) * math.sqrt(pooled / k)
    within = median_interval(samples, confidence)
    inside = (max(math.log(median / within.low), math.log(within.high / median))
              if within.level >= confidence and within.low > 0 else 0.0)
    windows_part = max(between, inside)
    half = math.hypot(windows_part, policy.z(confidence) * own.run_noise)
    if median <= 0:
        return RunInterval(Interval(median, median, median, confidence), 0.0, k)
    return RunInterval(Interval(median, median * math.exp(-half), median * math.exp(half), confidence),
                       math.expm1(windows_part), k)


def windows_needed(k: int, windows_part: float, precision: float) -> int:
    """How many windows should bring the windows' part of the half-width from `windows_part` (at k windows) to
    `precision`: it shrinks as 1/√windows."""
    if windows_part <= precision or k == 0:
        return k
    if not math.isfinite(windows_part) or precision <= 0:
        return 2 * k
    return math.ceil(k * (math.log1p(windows_part) / math.log1p(precision)) ** 2)


def samples_needed(n: int, half_width: float, precision: float) -> int:
    """How many samples should bring the interval's half-width from `half_width` (at n) to `precision`:
    the width of an order-statistic interval shrinks as 1/sqrt(n)."""
    if half_width <= precision or n == 0:
        return n
    if not math.isfinite(half_width) or precision <= 0:  # precision 0: sample to the budget, in doubling batches
        return 2 * n
    return math.ceil(n * (half_width / precision) ** 2)


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


# Two modes: the sorted samples split by a gap wider than this share of the median ...
MODE_GAP = 0.15
# ... into two groups, each holding at least this share of the samples (and at least two of them).
MODE_SHARE = 0.10


@dataclass(frozen=True)
class Modes:
    """Samples that fall into two groups apart: the lower group's median, the upper's, and the upper's share."""

    low: float
    high: float
    high_share: float


def two_modes(samples: list[float]) -> Modes | None:
    """The two groups of `samples` when the widest gap between neighbours in sorted order exceeds MODE_GAP of the
    median and leaves at least MODE_SHARE of the samples (and two) on each side; None for one group. A GPU call
    that sometimes waits for its launch (flex at 4K on an H200: 1.0 ms and 1.45 ms) shows this way while its IQR,
    the upper group under a quarter of the samples, stays narrow."""
    ordered = sorted(samples)
    n = len(ordered)
    least = max(2, math.ceil(MODE_SHARE * n))
    if n < 2 * least:
        return None
    median = statistics.median(ordered)
    gap, cut = max((ordered[i] - ordered[i - 1], i) for i in range(least, n - least + 1))
    if median <= 0 or gap <= MODE_GAP * median:
        return None
    return Modes(statistics.median(ordered[:cut]), statistics.median(ordered[cut:]), (n - cut) / n)
