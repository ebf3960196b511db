"""Pooled measurements in, one decision per bucket of shapes out: which backend to call, with the gates applied
(the rules: docs/recommend.md)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.core import policy
from attnbench.core.errors import AttnbenchError
from attnbench.core.kernel_id import KernelId
from attnbench.core.policy import percent
from attnbench.records.record import Record, Status, apart
from attnbench.records.run import Run, load_runs, same_software
from attnbench.stats.bands import geomean, widened
from attnbench.stats.dispatch import FEATURES, Bucket, Shape, bucket_key
from attnbench.stats.metric import ENERGY, METRICS, TIME, Metric
from attnbench.stats.pooling import Entry, Trouble, pool

DEFAULT_BACKEND = "sdpa"  # PyTorch's scaled_dot_product_attention with its own kernel choice


@dataclass(frozen=True)
class Number:
    """One backend's figure on one case, with its interval and where it was measured."""

    case_id: str
    value: float
    low: float
    high: float
    run_id: str
    kernel: KernelId | None


class Call(enum.StrEnum):
    """A bucket's decision kind."""

    WINNER = "winner"
    TIE = "tie"
    UNSETTLED = "unsettled"
    NONE = "none"


class Unranked(enum.StrEnum):
    """Why a backend is out of a bucket when no record's status or trouble says."""

    NOT_MEASURED = "not measured on every case of the bucket"
    NO_CLEAN_NUMBER = "no clean number"
    FOLDED = "same kernel"


@dataclass(frozen=True)
class Exclusion:
    """A backend out of a bucket's candidates: its first case's cause and every case's, in words."""

    backend: str
    cause: Status | Trouble | Unranked
    reason: str


@dataclass(frozen=True)
class Contest:
    """An excluded backend whose troubled number could still beat the leader's on one case."""

    backend: str
    why: str
    case_id: str
    value: float

    @property
    def words(self) -> str:
        return f"{self.why} on {self.case_id}"


@dataclass(frozen=True)
class Decision:
    """What the data say for one bucket."""

    bucket: Bucket
    cases: tuple[str, ...]
    decision: Call
    why: str | None = None  # for unsettled and none: why nothing is called
    backend: str | None = None  # what to call
    leader: str | None = None
    numbers: dict[str, list[Number]] = field(default_factory=dict)  # each candidate's, case by case
    scores: dict[str, float] = field(default_factory=dict)  # geometric mean over the best per case (1.0: best)
    tie: tuple[str, ...] = ()
    runner_up: str | None = None
    runner_up_ratio: float | None = None  # runner-up over the leader (geometric mean)
    margin: float | None = None  # min over cases of runner-up's interval low / leader's interval high
    default_ratio: float | None = None  # sdpa over the backend to call
    default_why: str | None = None  # why there is no ratio
    default_kernel: KernelId | None = None  # what sdpa dispatched to (its latest record's kernel)
    excluded: tuple[Exclusion, ...] = ()
    contested: tuple[Contest, ...] = ()
    noise: float = 0.0  # the device's run-to-run noise, added where two numbers come from different runs
    folded: dict[str, str] = field(default_factory=dict)  # backend -> the candidate whose kernel it ran

    @property
    def run_ids(self) -> list[str]:
        """The runs whose records the candidates' numbers come from."""
        return sorted({n.run_id for numbers in self.numbers.values() for n in numbers})

    @property
    def across_runs(self) -> bool:
        """Whether the candidates' numbers come from more than one run (so the run-to-run noise was added)."""
        return len(self.run_ids) > 1

    @property
    def chosen(self) -> list[Number]:
        """The numbers of the backend to call (or the leader's when there is none)."""
        return self.numbers.get(self.backend or self.leader or "", [])


def _number(entry: Entry, metric: Metric) -> Number:
    assert entry.clean is not None
    return _number_of(entry.clean, entry, metric)


def _number_of(record: Record, entry: Entry, metric: Metric) -> Number:
    value, interval = metric.value(record), metric.interval(record)
    assert value is not None and interval is not None
    return Number(entry.case_id, value, interval[0], interval[1], str(record.run_id), record.kernel_id)


def _ratio(mine: list[Number], theirs: list[Number]) -> float:
    return geomean([a.value / b.value for a, b in zip(mine, theirs, strict=False)])


def _pair(a: Number, b: Number, noise: float, always: bool = False) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two intervals to compare: as measured within one run, widened across runs (or `always`)."""
    if always or a.run_id != b.run_id:
        return widened(a, noise), widened(b, noise)
    return (a.low, a.high), (b.low, b.high)


def _told_slower(mine: list[Number], leader: list[Number], noise: float = 0.0, always: bool = False) -> bool:
    """On every case, this interval lies above the leader's and apart from it (widened as _pair says)."""
    return all(apart(*_pair(a, b, noise, always)) and a.value > b.value for a, b in zip(mine, leader, strict=False))


def _margin(mine: list[Number], leader: list[Number], noise: float) -> float:
    """The smallest, over the cases, of this interval's low over the leader's high (above 1: apart)."""
    return min(pa[0] / pb[1] for pa, pb in (_pair(a, b, noise) for a, b in zip(mine, leader, strict=False)))


def _exclusion(backend: str, entries: list[Entry | None]) -> Exclusion:
    if any(e is None for e in entries):
        return Exclusion(backend, Unranked.NOT_MEASURED, Unranked.NOT_MEASURED.value)
    causes = [e for e in entries if e is not None and e.cause is not None]
    if not causes:
        return Exclusion(backend, Unranked.NO_CLEAN_NUMBER, Unranked.NO_CLEAN_NUMBER.value)
    return Exclusion(backend, causes[0].cause, "; ".join(dict.fromkeys(str(e.why) for e in causes)))


@dataclass(frozen=True)
class _Field:
    bucket: Bucket
    cases: tuple[str, ...]
    numbers: dict[str, list[Number]]
    excluded: tuple[Exclusion, ...]
    default_kernel: KernelId | None
    noise: float
    folded: dict[str, str]


@dataclass(frozen=True)
class _Ranking:
    leader: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    tie: tuple[str, ...] = ()
    runner_up: str | None = None
    runner_up_ratio: float | None = None
    margin: float | None = None


_Call = tuple[Call, str | None, str | None]  # the decision, the backend to call, why


def _candidates(cases: list[dict[str, Entry]], metric: Metric) -> _Field:
    first = next(iter(cases[0].values())).latest
    numbers: dict[str, list[Number]] = {}
    excluded = []
    for backend in sorted({b for c in cases for b in c}):
        entries = [c.get(backend) for c in cases]
        if all(e is not None and e.clean is not None for e in entries):
            numbers[backend] = [_number(e, metric) for e in entries if e is not None]
        else:
            excluded.append(_exclusion(backend, entries))
    numbers, folded, why_folded = _merge_same_kernels(numbers)
    default = [c.get(DEFAULT_BACKEND) for c in cases]
    return _Field(Shape.of_record(first).bucket(), tuple(next(iter(c.values())).case_id for c in cases), numbers,
                  tuple(excluded + why_folded), next((e.latest.kernel_id for e in default if e is not None), None),
                  policy.run_to_run_noise(str(first.device)), folded)


def _against_rivals(f: _Field, rivals: dict[str, list[Number]]) -> tuple[_Ranking, Call, str | None, str]:
    """One candidate, told apart from the flagged rivals or not."""
    alone = next(iter(f.numbers))
    ranking = _Ranking(alone, {alone: 1.0}, (alone,))
    # A lone win has no clean rival beside it: it must hold beyond the run-to-run noise on both numbers.
    close = [b for b, numbers in rivals.items() if not _told_slower(numbers, f.numbers[alone], f.noise, always=True)]
    if close:
        return ranking, Call.NONE, None, (f"only {alone} can be chosen, and it is not told apart from "
                                          f"{', '.join(close)} by more than the run-to-run noise "
                                          f"(±{percent(f.noise)}; flagged overhead: never chosen)")
    return ranking, Call.WINNER, alone, (f"told faster than {', '.join(rivals)} (flagged overhead: never chosen, but "
                                         "timed as its user pays)")


def _unopposed(f: _Field) -> tuple[_Ranking, Call, None, str]:
    """At most one clean candidate and no rival: nothing to tell apart."""
    alone = next(iter(f.numbers), None)
    if alone is None:
        return _Ranking(), Call.NONE, None, "no backend has a clean number"
    why = f"only {alone} has a clean number: nothing to tell it apart from"
    return _Ranking(alone, {alone: 1.0}), Call.NONE, None, why


def _rank(f: _Field, cases: int) -> _Ranking:
    """Scores (geomean over the bucket's cases of each time over the best), the leader, tie and runner-up."""
    best = [min(numbers[i].value for numbers in f.numbers.values()) for i in range(cases)]
    scores = {b: geomean([n.value / m for n, m in zip(numbers, best, strict=False)])
              for b, numbers in f.numbers.items()}
    ranked = sorted(scores, key=lambda b: (scores[b], b))
    leader, lead = ranked[0], f.numbers[ranked[0]]
    tie = tuple(b for b in ranked if b == leader or not _told_slower(f.numbers[b], lead, f.noise))
    if len(ranked) == 1:
        return _Ranking(leader, scores, tie)
    runner = f.numbers[ranked[1]]
    return _Ranking(leader, scores, tie, ranked[1], _ratio(runner, lead), _margin(runner, lead, f.noise))


def _contest(f: _Field, cases: list[dict[str, Entry]], metric: Metric, lead: list[Number]) -> tuple[Contest, ...]:
    """Excluded backends whose troubled number could still beat the leader's."""
    found = []
    for i, case in enumerate(cases):
        for backend, entry in sorted(case.items()):
            troubled = entry.troubled
            value = metric.value(troubled) if troubled is not None else None
            top = lead[i].high if troubled is None or troubled.run_id == lead[i].run_id \
                else widened(lead[i], f.noise)[1]
            if value is not None and backend not in f.numbers and value <= top:
                found.append(Contest(backend, str(entry.why), entry.case_id, value))
    return tuple(found)


def _settle(ranking: _Ranking, contested: tuple[Contest, ...]) -> _Call:
    leader = ranking.leader
    if contested:
        names = ", ".join(dict.fromkeys(c.backend for c in contested))
        whys = "; ".join(dict.fromkeys(c.why for c in contested))
        return Call.UNSETTLED, None, (f"{names} may be faster than {leader}, but "
                                      f"{'its number' if ',' not in names else 'theirs'} cannot decide ({whys})")
    if len(ranking.tie) == 1:
        return Call.WINNER, leader, None
    return Call.TIE, DEFAULT_BACKEND if DEFAULT_BACKEND in ranking.tie else leader, None


def _default(f: _Field, call: Call, backend: str | None) -> tuple[float | None, str | None]:
    """sdpa's cost against the backend to call, or why there is none."""
    if backend is None:
        return None, f"{call}: nothing to compare with"
    if DEFAULT_BACKEND in f.numbers:
        return _ratio(f.numbers[DEFAULT_BACKEND], f.numbers[backend]), None
    return None, next((x.reason for x in f.excluded if x.backend == DEFAULT_BACKEND), "not measured")


def _decision(f: _Field, r: _Ranking, call: Call, backend: str | None, why: str | None,
              contested: tuple[Contest, ...] = ()) -> Decision:
    ratio, default_why = _default(f, call, backend)
    return Decision(f.bucket, f.cases, call, why, backend, r.leader, f.numbers, r.scores, r.tie, r.runner_up,
                    r.runner_up_ratio, r.margin, ratio, default_why, f.default_kernel, f.excluded, contested, f.noise,
                    f.folded)


def decide_bucket(cases: list[dict[str, Entry]], metric: Metric = TIME) -> Decision:
    """The decision for one bucket, from its cases' entries by backend (every case of one bucket)."""
    f = _candidates(cases, metric)
    rivals = _rivals(cases, f.numbers, metric)
    if len(f.numbers) == 1 and rivals:
        return _decision(f, *_against_rivals(f, rivals))
    if len(f.numbers) < 2:
        return _decision(f, *_unopposed(f))
    ranking = _rank(f, len(cases))
    assert ranking.leader is not None
    contested = _contest(f, cases, metric, f.numbers[ranking.leader])
    return _decision(f, ranking, *_settle(ranking, contested), contested)


def _rivals(cases: list[dict[str, Entry]], numbers: dict[str, list[Number]], metric: Metric) -> dict[str, list[Number]]:
    """Backends whose only number on every case is flagged `overhead`: never chosen, but a rival to tell apart."""
    found: dict[str, list[Number]] = {}
    for backend in sorted({b for c in cases for b in c} - set(numbers)):
        entries = [c.get(backend) for c in cases]
        if all(e is not None and e.troubled is not None and e.cause == Trouble.OVERHEAD and metric.value(e.troubled)
               is not None and metric.interval(e.troubled) is not None for e in entries):
            found[backend] = [_number_of(e.troubled, e, metric) for e in entries if e is not None]
    return found


def ran_kernel(kernel: KernelId | None) -> str | None:
    """The kernel a record says ran, without how it was asked for."""
    return kernel.ran.strip() or None if kernel else None


def _merge_same_kernels(numbers: dict[str, list[Number]]) -> tuple[dict, dict[str, str], list[Exclusion]]:
    """One candidate per kernel: a backend that ran another candidate's kernel on every case is folded into it."""
    numbers, folded, whys = dict(numbers), {}, []
    names = sorted(numbers, key=lambda b: (b != DEFAULT_BACKEND, b))
    for i, keep in enumerate(names):
        if keep not in numbers:
            continue
        mine = [ran_kernel(n.kernel) for n in numbers[keep]]
        if None in mine:
            continue
        for other in names[i + 1:]:
            if other in numbers and [ran_kernel(n.kernel) for n in numbers[other]] == mine:
                del numbers[other]
                folded[other] = keep
                whys.append(Exclusion(other, Unranked.FOLDED, f"same kernel as {keep}, one candidate: {mine[0]}"))
    return numbers, folded, whys


def bucket_order(bucket: Bucket) -> tuple:
    """Buckets in reading order: mode, dtype, mask, heads, head sizes, workload kinds, then length."""
    b = bucket
    return (b.mode, b.dtype, not b.causal, b.window is not None, b.window or 0, b.head_dim, b.head_dim_v, b.heads,
            -b.kv_heads, tuple(getattr(b, f) for f in FEATURES), b.kv_dtype or "", b.quant or "", b.quant_block or 0,
            b.kv_seq_len, b.seq_len)


def decide(pooled: dict[tuple, dict[str, Entry]], metric: Metric = TIME) -> list[Decision]:
    """One decision per bucket of the pooled cases, in reading order."""
    buckets: dict[str, list[dict[str, Entry]]] = {}
    for _, entries in sorted(pooled.items(), key=lambda item: str(item[0])):
        record = next(iter(entries.values())).latest
        buckets.setdefault(bucket_key(Shape.of_record(record).bucket()), []).append(entries)
    decisions = [decide_bucket(cases, metric) for cases in buckets.values()]
    return sorted(decisions, key=lambda d: bucket_order(d.bucket))


def has_metric(pooled: dict[tuple, dict[str, Entry]], metric: Metric) -> bool:
    """Whether any ok record carries the figure ranked by."""
    return any(metric.value(r) is not None for entries in pooled.values() for e in entries.values()
               for r in (e.clean, e.troubled, e.latest) if r is not None and r.status == Status.OK)


def enough_to_recommend(decisions: list[Decision]) -> bool:
    """Whether some bucket had two backends with an ok number to choose between (the report's section)."""
    return any(len(d.numbers) + len({c.backend for c in d.contested}) >= 2 for d in decisions)


@dataclass
class Recommendation:
    """The runs pooled, what they were ranked by, and one decision per bucket."""

    runs: list[Run]
    metric: Metric
    decisions: list[Decision]


def recommend_runs(paths: list[Path], by: str = "time") -> Recommendation:
    """Load, pool and decide: what `attnbench recommend RUN_DIR... --by time|energy` prints and writes."""
    if by not in METRICS:
        raise AttnbenchError(f"--by {by!r}: allowed: {', '.join(METRICS)}")
    metric = METRICS[by]
    runs = load_runs(paths)
    same_software(runs)
    pooled = pool(runs, metric)
    if metric is ENERGY and not has_metric(pooled, metric):
        raise AttnbenchError(f"--by energy: no ok record in {', '.join(str(r.path) for r in runs)} carries "
                             "extra.energy_mj or extra.joules_per_token; rank --by time, or run a suite that "
                             "measures energy")
    return Recommendation(runs, metric, decide(pooled, metric))
