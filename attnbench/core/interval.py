"""Sample statistics and the distribution-free interval of the median (docs/conventions.md "Timing")."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from attnbench.core import policy

CONFIDENCE = policy.CONFIDENCE
NOISE_THRESHOLD = policy.NOISE_THRESHOLD
RUN_TO_RUN_NOISE = {name: policy.run_to_run_noise(name) for name in policy.DEVICES}
EXACT_UP_TO = 1000  # exact binomial ranks; the normal approximation beyond


@dataclass(frozen=True)
class Interval:
    median: float
    low: float
    high: float
    level: float  # actual coverage

    def half_width(self) -> float:
        """Relative to the median."""
        if self.median <= 0:
            return math.inf if self.high > self.low else 0.0
        return max(self.median - self.low, self.high - self.median) / self.median


def _log_binom_pmf(n: int, i: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2.0)


@lru_cache(maxsize=4096)
def rank(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """(k, level): the 1-based lower rank and its coverage; k = 0 when n is too few."""
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
    """By bisection."""
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
    """Too few samples: [min, max] and its coverage."""
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
    """`windows_part`: the share of the half-width more windows would narrow."""

    interval: Interval
    windows_part: float
    windows: int


def run_interval(samples: list[float], window_medians: list[float], device: str,
                 confidence: float = CONFIDENCE) -> RunInterval:
    """The window is the independent unit: the windows' log spread, pooled with the device's window noise, gives
    a Student-t half-width, plus the device's run noise in quadrature."""
    own = policy.device(device)
    median = median_of_sorted(sorted(samples))
    k, observed = _spread(window_medians)
    between = _between(k, observed, own.window_noise, confidence)
    within = median_interval(samples, confidence)
    inside = (max(math.log(median / within.low), math.log(within.high / median))
              if within.level >= confidence and within.low > 0 else 0.0)
    windows_part = max(between, inside)
    half = math.hypot(windows_part, policy.z(confidence) * own.run_noise)
    if median <= 0:
        return RunInterval(Interval(median, median, median, confidence), 0.0, k)
    return RunInterval(Interval(median, median * math.exp(-half), median * math.exp(half), confidence),
                       math.expm1(windows_part), k)


def _spread(window_medians: list[float]) -> tuple[int, float]:
    """(windows, the log variance of their medians; 0 for one)."""
    logs = [math.log(m) for m in window_medians if m > 0]
    return max(1, len(logs)), statistics.variance(logs) if len(logs) >= 2 else 0.0


def _between(k: int, observed: float, window_noise: float, confidence: float) -> float:
    """The windows' log half-width: their variance pooled with the prior's, by Student's t."""
    df = policy.PRIOR_WINDOWS + k - 1
    pooled = (policy.PRIOR_WINDOWS * window_noise ** 2 + (k - 1) * observed) / df
    return policy.t_quantile(df, confidence) * math.sqrt(pooled / k)


MAX_WINDOWS = 64


def windows_needed(window_medians: list[float], device: str, precision: float,
                   confidence: float = CONFIDENCE) -> int:
    """The fewest windows whose part of the interval is within ±precision, if more windows spread as these do
    (MAX_WINDOWS when none are enough)."""
    k, observed = _spread(window_medians)
    target, noise = math.log1p(max(precision, 0.0)), policy.device(device).window_noise
    return next((n for n in range(k, MAX_WINDOWS) if _between(n, observed, noise, confidence) <= target),
                MAX_WINDOWS)


def samples_needed(n: int, half_width: float, precision: float) -> int:
    """The half-width shrinks as 1/√n."""
    if half_width <= precision or n == 0:
        return n
    if not math.isfinite(half_width) or precision <= 0:
        return 2 * n
    return math.ceil(n * (half_width / precision) ** 2)


@dataclass(frozen=True)
class Summary:
    median: float
    iqr: float
    minimum: float

    @property
    def noisy(self) -> bool:
        return self.iqr > NOISE_THRESHOLD * self.median


def summarize(samples: list[float]) -> Summary:
    if len(samples) >= 2:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = q3 = samples[0]
    return Summary(statistics.median(samples), q3 - q1, min(samples))


MODE_GAP, MODE_SHARE = policy.MODE_GAP, policy.MODE_SHARE


@dataclass(frozen=True)
class Modes:
    low: float
    high: float
    high_share: float


def two_modes(samples: list[float]) -> Modes | None:
    """Split at the widest gap, or None: a call that sometimes waits for its launch."""
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
