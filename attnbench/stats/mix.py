"""What a traffic costs: the measured times of a mix's cases weighed as the traffic holds them (`recommend --mix`;
the rules: docs/traffic.md). A total is sum_p w_p t_b(p) per request or per query token; its interval is the sum of
the parts' interval ends, wider than a joint interval, never narrower; the dispatch calls recommend's backend on each
part, else the fastest clean median there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnbench.core.errors import AttnbenchError
from attnbench.records.run import load_runs
from attnbench.stats.metric import TIME
from attnbench.stats.pooling import Entry, Trouble, pool
from attnbench.stats.recommend import Decision, recommend_runs
from attnbench.sweep.mix import Part, Traffic
from attnbench.sweep.suite import load_suite

DISPATCH = "dispatch"


@dataclass(frozen=True)
class Span:
    """A weighted sum of medians, with the sums of the interval ends."""

    value: float
    low: float
    high: float

    def over(self, n: float) -> Span:
        return Span(self.value / n, self.low / n, self.high / n)


@dataclass
class Total:
    """One way of serving the traffic (a single backend, or the dispatch): its time per phase and in all."""

    name: str
    phases: dict[str, Span] = field(default_factory=dict)  # summed weighted ms per phase
    missing: list[str] = field(default_factory=list)  # case ids of parts it has no clean number on
    calls: dict[str, str] = field(default_factory=dict)  # dispatch only: case id -> backend called
    fallback: list[str] = field(default_factory=list)  # dispatch only: parts the table calls nothing on

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def whole(self) -> Span:
        spans = list(self.phases.values())
        return Span(sum(s.value for s in spans), sum(s.low for s in spans), sum(s.high for s in spans))

    def share(self, phase: str) -> float:
        """The phase's share of the whole time (0 when the traffic has none of it)."""
        span = self.phases.get(phase)
        return 0.0 if span is None or not self.whole.value else span.value / self.whole.value


@dataclass
class MixResult:
    """A traffic's totals per backend and for the dispatch, and what could not be weighed."""

    suite: str
    traffic: Traffic
    totals: list[Total]  # single backends, complete ones first, fastest first
    dispatch: Total
    unmeasured: list[str]  # parts no backend has a clean number on
    numbers: dict[str, dict[str, Span]] = field(default_factory=dict)  # case id -> backend -> its number
    flagged: list[str] = field(default_factory=list)  # backends timed only with an overhead flag

    @property
    def best(self) -> Total | None:
        complete = [t for t in self.totals if t.complete and t.name not in self.flagged]
        return complete[0] if complete else None

    def per_request(self, total: Total) -> Span:
        return total.whole.over(self.traffic.requests)

    def per_token(self, total: Total) -> Span:
        return total.whole.over(self.traffic.tokens)

    @property
    def gain(self) -> Span | None:
        """The best single backend's time over the dispatch's; where the dispatch calls it, one number on both
        sides, elsewhere the far ends."""
        best = self.best
        if best is None or not self.dispatch.complete:
            return None
        shared, mine, theirs = 0.0, Span(0.0, 0.0, 0.0), Span(0.0, 0.0, 0.0)
        for part in self.traffic.parts:
            found, called = self.numbers[part.case.case_id], self.dispatch.calls[part.case.case_id]
            if called == best.name:
                shared += part.weight * found[called].value
            else:
                mine, theirs = _plus(mine, found[best.name], part.weight), _plus(theirs, found[called], part.weight)
        b, d = best.whole, self.dispatch.whole
        return Span(b.value / d.value, (shared + mine.low) / (shared + theirs.high),
                    (shared + mine.high) / (shared + theirs.low))


def _plus(total: Span, number: Span, weight: float) -> Span:
    """`total` plus `weight` times `number`, each end with its own."""
    return Span(total.value + weight * number.value, total.low + weight * number.low,
                total.high + weight * number.high)


def numbers(entries: dict[str, Entry], flagged: bool = False) -> dict[str, Span]:
    """Each backend's clean number on one case; with `flagged`, the numbers flagged `overhead` instead."""
    found = {}
    for backend, entry in entries.items():
        record = (entry.troubled if entry.cause == Trouble.OVERHEAD else None) if flagged else entry.clean
        value = None if record is None else TIME.value(record)
        interval = None if record is None else TIME.interval(record)
        if value is not None and interval is not None:
            found[backend] = Span(value, interval[0], interval[1])
    return found


def weigh(traffic: Traffic, measured: dict[str, dict[str, Span]], calls: dict[str, str]) -> MixResult:
    """The totals of every backend and of the dispatch (`calls`: recommend's backend per case, absent for none)."""
    backends = sorted({b for found in measured.values() for b in found})
    totals = {b: Total(b) for b in backends}
    dispatch = Total(DISPATCH)
    unmeasured: list[str] = []
    for part in traffic.parts:
        case_id = part.case.case_id
        found = measured.get(case_id, {})
        for backend, total in totals.items():
            _add(total, part, found.get(backend), case_id)
        called = calls.get(case_id)
        if called is None or called not in found:
            called = min(found, key=lambda b: found[b].value) if found else None
            if case_id not in dispatch.fallback:
                dispatch.fallback.append(case_id)
        if called is not None:
            dispatch.calls[case_id] = called
        elif case_id not in unmeasured:
            unmeasured.append(case_id)
        _add(dispatch, part, found.get(called) if called else None, case_id)
    ranked = sorted(totals.values(), key=lambda t: (not t.complete, t.whole.value if t.complete else 0, t.name))
    return MixResult("", traffic, ranked, dispatch, unmeasured, measured)


def _add(total: Total, part: Part, number: Span | None, case_id: str) -> None:
    if number is None:
        if case_id not in total.missing:
            total.missing.append(case_id)
        return
    total.phases[part.phase] = _plus(total.phases.get(part.phase, Span(0.0, 0.0, 0.0)), number, part.weight)


def mix_of_runs(paths: list[Path], suite: Path | str, decisions: list[Decision] | None = None) -> MixResult:
    """Load the runs and the suite's mix on their device, and weigh."""
    runs = load_runs(paths)
    loaded = load_suite(suite)
    if loaded.model.mix is None:
        raise AttnbenchError(f"--mix {suite}: the suite has no mix: block; allowed: a suite with mix: "
                             "(e.g. suites/mix.yaml)")
    traffic = loaded.traffic(runs[0].device)
    measured: dict[str, dict[str, Span]] = {}
    overhead: dict[str, dict[str, Span]] = {}
    for entries in pool(runs).values():
        case_id = next(iter(entries.values())).case_id
        measured[case_id], overhead[case_id] = numbers(entries), numbers(entries, flagged=True)
    wanted = {p.case.case_id for p in traffic.parts}
    if not wanted & set(measured):
        raise AttnbenchError(f"--mix {suite}: none of the mix's {len(wanted)} cases on {runs[0].device} is in "
                             f"{', '.join(str(r.path) for r in runs)}; run the suite first (attnbench run {suite})")
    decisions = recommend_runs(paths).decisions if decisions is None else decisions
    calls = {case_id: d.backend for d in decisions if d.backend for case_id in d.cases}
    result = weigh(traffic, measured, calls)
    result.suite = str(suite)
    names = sorted({b for found in overhead.values() for b in found} - {t.name for t in result.totals})
    for name in names:  # a total of what their user pays, beside the clean ones, never called by the dispatch
        total = Total(name)
        for part in traffic.parts:
            _add(total, part, overhead.get(part.case.case_id, {}).get(name), part.case.case_id)
        result.totals.append(total)
        result.flagged.append(name)
    return result
