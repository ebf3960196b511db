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

CONFIDENCE = 0.95
# A measurement whose samples' IQR exceeds this fraction of their median is flagged `noisy`.
NOISE_THRESHOLD = 0.10
# The precision a measurement asks of its median when the suite sets none, per device: what the device repeats. A
# GPU's 95% interval reaches ±1% within a few hundred milliseconds of samples, and the committed H200 runs' repeated
# cases agreed within 2%. A CPU's does not on a shared VM: two back-to-back runs of suites/quick.yaml on an idle
# 2-core VM (each sampled in rounds) differed per case by 3.6-3.9% at the median and 9.2-13.6% at the 90th
# percentile, and a 20 ms math-path fwd_bwd call's IQR there is 28% of its median (14-39 ms in one run). ±10% is
# the finest a second run repeats there; asking ±5% bought samples that the next run does not reproduce and left
# 48 of 64 quick records noisy (8-12 at ±10%).
DEVICE_PRECISION = {"cpu": 0.10, "cuda": 0.01}
# What one measurement's median can move between two runs of the same suite on the same idle machine, per device:
# the uncertainty a record too short for an interval (under 6 samples at 95%) carries instead of a zero-width one.
# CPU: two back-to-back runs of suites/quick.yaml on a 2-core VM differed by up to 15% per case; CUDA: the
# committed H200 runs' repeated cases agreed within 2%.
RUN_TO_RUN_NOISE = {"cpu": 0.15, "cuda": 0.02}
# How many rounds a measurement's samples are taken in, per device, when the suite sets none: the first with the
# checked call, the later ones re-timing every measurement in shuffled order (attnbench.run.rounds). On a 2-core VM a
# call's time wanders by 5-15% over seconds and differently for each workload (a fixed matmul tracked the attention
# calls beside it with a correlation of 0.1), so samples taken in one 40 ms window carry that window's bias; taken in
# three windows spread over the run they carry the run's. A GPU's samples agree across a run within 2%: one round.
DEVICE_ROUNDS = {"cpu": 3, "cuda": 1}
# What the run may spend after its rounds, as a share of the sampling budget of all its measurements together (the
# suite-level budget), re-timing the measurements whose interval is still wider than the precision asked.
DEVICE_REFINE = {"cpu": 1.0, "cuda": 0.0}
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
