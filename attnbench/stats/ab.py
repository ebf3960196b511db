"""The paired statistics of an A/B (attnbench.run.ab): B's time over A's per measurement, per backend and overall,
each with a distribution-free interval and a verdict (the rules: docs/ab.md).

A pair is A's and B's rounds back to back, so its log ratio cancels the drift between runs; the estimate is the
median of the pairs' log ratios, its interval the median's order-statistic interval (a sign test).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from attnbench.core import policy
from attnbench.core.interval import CONFIDENCE, median_interval, rank
from attnbench.records.record import BAD_STATUSES, Status

# The smallest change called a regression or an improvement (B/A beyond 1 ± this).
DEFAULT_THRESHOLD = policy.AB_THRESHOLD


class AbVerdict(enum.StrEnum):
    """B against A: beyond the threshold, significant within it, or not significant."""

    SLOWER = "slower"
    FASTER = "faster"
    WITHIN = "within"
    UNCHANGED = "unchanged"


def min_pairs(confidence: float = CONFIDENCE) -> int:
    """The fewest pairs whose median interval reaches `confidence` (6 at 95%)."""
    n = 1
    while rank(n, confidence)[0] == 0:
        n += 1
    return n


@dataclass(frozen=True)
class Paired:
    """B/A from paired log ratios: the median ratio, its interval and the interval's level."""

    ratio: float
    low: float
    high: float
    level: float
    pairs: int

    @classmethod
    def of(cls, log_ratios: list[float], confidence: float = CONFIDENCE) -> Paired:
        interval = median_interval(log_ratios, confidence)
        return cls(math.exp(interval.median), math.exp(interval.low), math.exp(interval.high), interval.level,
                   len(log_ratios))

    def significant(self, confidence: float = CONFIDENCE) -> bool:
        """The interval reaches `confidence` and excludes 1."""
        return self.level >= confidence and (self.low > 1.0 or self.high < 1.0)

    def verdict(self, threshold: float, confidence: float = CONFIDENCE) -> AbVerdict:
        if not self.significant(confidence):
            return AbVerdict.UNCHANGED
        if self.ratio >= 1.0 + threshold:
            return AbVerdict.SLOWER
        if self.ratio <= 1.0 / (1.0 + threshold):
            return AbVerdict.FASTER
        return AbVerdict.WITHIN

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": round(self.ratio, 5), "low": round(self.low, 5), "high": round(self.high, 5),
                "level": round(self.level, 4), "pairs": self.pairs}


@dataclass(frozen=True)
class MeasurementPair:
    """One measurement judged: its key, both sides' pooled medians, and its pairs' log ratios."""

    case_id: str
    backend: str
    device: str
    a_ms: float
    b_ms: float
    log_ratios: tuple[float, ...]
    paired: Paired
    verdict: AbVerdict

    def to_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "backend": self.backend, "device": self.device, "a_ms": self.a_ms,
                "b_ms": self.b_ms, "log_ratios": [round(x, 6) for x in self.log_ratios], **self.paired.to_dict(),
                "verdict": self.verdict.value}


@dataclass(frozen=True)
class GroupVerdict:
    """A backend's (or every backend's: `overall`) pairs pooled and judged."""

    name: str
    measurements: int
    paired: Paired
    verdict: AbVerdict

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "measurements": self.measurements, **self.paired.to_dict(),
                "verdict": self.verdict.value}


@dataclass(frozen=True)
class Unpaired:
    """A measurement not `ok` on both sides: its statuses and B's reason."""

    case_id: str
    backend: str
    a_status: str
    b_status: str
    reason: str | None

    @property
    def broken_in_b(self) -> bool:
        return self.a_status == Status.OK and self.b_status in BAD_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "backend": self.backend, "a_status": self.a_status,
                "b_status": self.b_status, "reason": self.reason, "broken_in_b": self.broken_in_b}


@dataclass(frozen=True)
class AbResult:
    """Every measurement paired and judged, the per-backend and overall verdicts, and what could not be paired."""

    threshold: float
    confidence: float
    measurements: list[MeasurementPair]
    backends: list[GroupVerdict]
    overall: GroupVerdict | None
    unpaired: list[Unpaired] = field(default_factory=list)

    @property
    def slowed(self) -> list[GroupVerdict]:
        """The backends (and `overall`) B slowed beyond the threshold and the noise."""
        return [g for g in self.backends + ([self.overall] if self.overall else []) if g.verdict == AbVerdict.SLOWER]

    @property
    def broken(self) -> list[Unpaired]:
        return [u for u in self.unpaired if u.broken_in_b]

    @property
    def regressed(self) -> bool:
        return bool(self.slowed or self.broken)


def round_medians(record: Any) -> dict[int, float]:
    """A record's round medians by round number (extra.rounds' `round`, else its position)."""
    rounds = record.timing_parts.rounds or []
    return {int(r.get("round", i)): float(r["median_ms"]) for i, r in enumerate(rounds)
            if r.get("median_ms") is not None and r["median_ms"] > 0}


def log_ratios(a: Any, b: Any) -> list[float]:
    a_rounds, b_rounds = round_medians(a), round_medians(b)
    return [math.log(b_rounds[r] / a_rounds[r]) for r in sorted(a_rounds.keys() & b_rounds.keys())]


def judged(name: str, pairs: list[MeasurementPair], threshold: float, confidence: float) -> GroupVerdict:
    paired = Paired.of([x for m in pairs for x in m.log_ratios], confidence)
    return GroupVerdict(name, len(pairs), paired, paired.verdict(threshold, confidence))


def pair_up(a_records: Iterable[Any], b_records: Iterable[Any], threshold: float = DEFAULT_THRESHOLD,
            confidence: float = CONFIDENCE) -> AbResult:
    """Pair A's and B's records of the same measurement and judge them."""
    b_by_key = {(r.device, r.case_id, r.backend): r for r in b_records}
    measured: list[MeasurementPair] = []
    unpaired: list[Unpaired] = []
    for a in a_records:
        b = b_by_key.get((a.device, a.case_id, a.backend))
        if b is None:
            continue
        ratios = log_ratios(a, b) if a.status == b.status == "ok" else []
        if not ratios:
            unpaired.append(Unpaired(a.case_id, a.backend, a.status, b.status, b.reason or a.reason))
            continue
        paired = Paired.of(ratios, confidence)
        measured.append(MeasurementPair(a.case_id, a.backend, a.device, a.time_ms, b.time_ms, tuple(ratios), paired,
                                        paired.verdict(threshold, confidence)))
    names = list(dict.fromkeys(m.backend for m in measured))
    backends = [judged(name, [m for m in measured if m.backend == name], threshold, confidence) for name in names]
    overall = judged("overall", measured, threshold, confidence) if measured else None
    return AbResult(threshold, confidence, measured, backends, overall, unpaired)
