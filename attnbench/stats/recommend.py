"""Pooled measurements in, one decision per bucket of shapes out: which backend to call, with the gates applied
(the rules: docs/recommend.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.core import policy
from attnbench.core.errors import AttnbenchError
from attnbench.core.kernel_id import KernelId
from attnbench.core.policy import percent
from attnbench.records.record import Record, Status, apart
from attnbench.records.run import Run, load_runs, same_software
from attnbench.stats.bands import geomean, widened
from attnbench.stats.dispatch import FEATURES, Shape, bucket_key
from attnbench.stats.metric import ENERGY, METRICS, TIME, Metric
from attnbench.stats.pooling import Entry, pool

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


@dataclass
class Decision:
    """What the data say for one bucket."""

    bucket: dict[str, Any]
    cases: list[str]
    decision: str  # winner, tie, unsettled or none
    why: str | None = None  # for unsettled and none: why nothing is called
    backend: str | None = None  # what to call
    leader: str | None = None
    numbers: dict[str, list[Number]] = field(default_factory=dict)  # each candidate's, case by case
    scores: dict[str, float] = field(default_factory=dict)  # geometric mean over the best per case (1.0: best)
    tie: list[str] = field(default_factory=list)
    runner_up: str | None = None
    runner_up_ratio: float | None = None  # runner-up over the leader (geometric mean)
    margin: float | None = None  # min over cases of runner-up's interval low / leader's interval high
    default_ratio: float | None = None  # sdpa over the backend to call
    default_why: str | None = None  # why there is no ratio
    default_kernel: KernelId | None = None  # what sdpa dispatched to (its latest record's kernel)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (backend, why) for non-candidates
    contested: list[tuple[str, str, float]] = field(default_factory=list)  # (backend, why, its median)
    noise: float = 0.0  # the device's run-to-run noise, added where two numbers come from different runs

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


def _why(entries: list[Entry | None]) -> str:
    if any(e is None for e in entries):
        return "not measured on every case of the bucket"
    whys = list(dict.fromkeys(str(e.why) for e in entries if e is not None and e.why))
    return "; ".join(whys) if whys else "no clean number"


def _candidates(cases: list[dict[str, Entry]], metric: Metric) -> Decision:
    """A bucket's undecided Decision: each backend's clean numbers, or why it is excluded."""
    first = next(iter(cases[0].values())).latest
    case_ids = [next(iter(c.values())).case_id for c in cases]
    decision = Decision(Shape.of_record(first).bucket(), case_ids, "none",
                        noise=policy.run_to_run_noise(str(first.device)))
    backends = sorted({b for c in cases for b in c})
    for backend in backends:
        entries = [c.get(backend) for c in cases]
        if all(e is not None and e.clean is not None for e in entries):
            decision.numbers[backend] = [_number(e, metric) for e in entries if e is not None]
        else:
            decision.excluded.append((backend, _why(entries)))
    _merge_same_kernels(decision)
    default = [c.get(DEFAULT_BACKEND) for c in cases]
    decision.default_kernel = next((e.latest.kernel_id for e in default if e is not None), None)
    return decision


def _decide_against_rivals(decision: Decision, rivals: dict[str, list[Number]]) -> Decision:
    """One candidate, told apart from the flagged rivals or not."""
    alone = next(iter(decision.numbers))
    decision.leader, decision.scores, decision.tie = alone, {alone: 1.0}, [alone]
    # A lone win has no clean rival beside it: it must hold beyond the run-to-run noise on both numbers.
    close = [b for b, numbers in rivals.items()
             if not _told_slower(numbers, decision.numbers[alone], decision.noise, always=True)]
    if close:
        decision.why = (f"only {alone} can be chosen, and it is not told apart from {', '.join(close)} by more "
                        f"than the run-to-run noise (±{percent(decision.noise)}; flagged overhead: never chosen)")
    else:
        decision.decision, decision.backend = "winner", alone
        decision.why = (f"told faster than {', '.join(rivals)} (flagged overhead: never chosen, but timed as "
                        "its user pays)")
    if DEFAULT_BACKEND in decision.numbers and decision.backend is not None:
        decision.default_ratio = 1.0
    else:
        decision.default_why = _default_why(decision)
    return decision


def _decide_unopposed(decision: Decision) -> Decision:
    """At most one clean candidate and no rival: nothing to tell apart."""
    alone = next(iter(decision.numbers), None)
    decision.leader = alone
    decision.why = (f"only {alone} has a clean number: nothing to tell it apart from" if alone
                    else "no backend has a clean number")
    decision.default_why = _default_why(decision)
    if alone is not None:
        decision.scores = {alone: 1.0}
    return decision


def _rank(decision: Decision, cases: int) -> str:
    """Scores (geomean over the bucket's cases of each time over the best), tie and runner-up; returns the leader."""
    best = [min(numbers[i].value for numbers in decision.numbers.values()) for i in range(cases)]
    decision.scores = {b: geomean([n.value / m for n, m in zip(numbers, best, strict=False)])
                       for b, numbers in decision.numbers.items()}
    ranked = sorted(decision.scores, key=lambda b: (decision.scores[b], b))
    leader = decision.leader = ranked[0]
    lead = decision.numbers[leader]
    decision.tie = [b for b in ranked if b == leader or not _told_slower(decision.numbers[b], lead, decision.noise)]
    if len(ranked) > 1:
        runner = decision.runner_up = ranked[1]
        decision.runner_up_ratio = _ratio(decision.numbers[runner], lead)
        decision.margin = _margin(decision.numbers[runner], lead, decision.noise)
    return leader


def _contest(decision: Decision, cases: list[dict[str, Entry]], metric: Metric, lead: list[Number]) -> None:
    """Excluded backends whose troubled number could still beat the leader's."""
    for i, case in enumerate(cases):
        for backend, entry in sorted(case.items()):
            troubled = entry.troubled
            value = metric.value(troubled) if troubled is not None else None
            top = lead[i].high if troubled is None or troubled.run_id == lead[i].run_id \
                else widened(lead[i], decision.noise)[1]
            if value is not None and backend not in decision.numbers and value <= top:
                decision.contested.append((backend, f"{entry.why} on {entry.case_id}", value))


def _settle(decision: Decision, leader: str) -> None:
    if decision.contested:
        decision.decision = "unsettled"
        names = ", ".join(dict.fromkeys(b for b, _, _ in decision.contested))
        whys = "; ".join(dict.fromkeys(why.split(" on ")[0] for _, why, _ in decision.contested))
        decision.why = f"{names} may be faster than {leader}, but {'its number' if ',' not in names else 'theirs'} " \
                       f"cannot decide ({whys})"
    elif len(decision.tie) == 1:
        decision.decision, decision.backend = "winner", leader
    else:
        decision.decision = "tie"
        decision.backend = DEFAULT_BACKEND if DEFAULT_BACKEND in decision.tie else leader
    if decision.backend is not None and DEFAULT_BACKEND in decision.numbers:
        decision.default_ratio = _ratio(decision.numbers[DEFAULT_BACKEND], decision.numbers[decision.backend])
    else:
        decision.default_why = _default_why(decision)


def decide_bucket(cases: list[dict[str, Entry]], metric: Metric = TIME) -> Decision:
    """The decision for one bucket, from its cases' entries by backend (every case of one bucket)."""
    decision = _candidates(cases, metric)
    rivals = _rivals(cases, decision, metric)
    if len(decision.numbers) == 1 and rivals:
        return _decide_against_rivals(decision, rivals)
    if len(decision.numbers) < 2:
        return _decide_unopposed(decision)
    leader = _rank(decision, len(cases))
    _contest(decision, cases, metric, decision.numbers[leader])
    _settle(decision, leader)
    return decision


def _rivals(cases: list[dict[str, Entry]], decision: Decision, metric: Metric) -> dict[str, list[Number]]:
    """Backends whose only number on every case is flagged `overhead`: never chosen, but a rival to tell apart."""
    found: dict[str, list[Number]] = {}
    for backend in sorted({b for c in cases for b in c} - set(decision.numbers)):
        entries = [c.get(backend) for c in cases]
        if all(e is not None and e.troubled is not None and e.why == "overhead" and metric.value(e.troubled)
               is not None and metric.interval(e.troubled) is not None for e in entries):
            found[backend] = [_number_of(e.troubled, e, metric) for e in entries if e is not None]
    return found


def ran_kernel(kernel: KernelId | None) -> str | None:
    """The kernel a record says ran, without how it was asked for."""
    return kernel.ran.strip() or None if kernel else None


def _merge_same_kernels(decision: Decision) -> None:
    """One candidate per kernel: a backend that ran another candidate's kernel on every case is folded into it."""
    names = sorted(decision.numbers, key=lambda b: (b != DEFAULT_BACKEND, b))
    for i, keep in enumerate(names):
        if keep not in decision.numbers:
            continue
        mine = [ran_kernel(n.kernel) for n in decision.numbers[keep]]
        if None in mine:
            continue
        for other in names[i + 1:]:
            if other in decision.numbers and [ran_kernel(n.kernel) for n in decision.numbers[other]] == mine:
                del decision.numbers[other]
                decision.excluded.append((other, f"same kernel as {keep}, one candidate: {mine[0]}"))


def _default_why(decision: Decision) -> str:
    if decision.backend is None:
        return f"{decision.decision}: nothing to compare with"
    return next((why for b, why in decision.excluded if b == DEFAULT_BACKEND), "not measured")


def bucket_order(bucket: dict[str, Any]) -> tuple:
    """Buckets in reading order: mode, dtype, mask, heads, head sizes, workload kinds, then length."""
    return (bucket["mode"], bucket["dtype"], not bucket["causal"], bucket["window"] is not None, bucket["window"] or 0,
            bucket["head_dim"], bucket["head_dim_v"], bucket["heads"], -bucket["kv_heads"],
            tuple(bucket[f] for f in FEATURES), bucket["kv_dtype"] or "", bucket["quant"] or "",
            bucket["quant_block"] or 0, bucket["kv_seq_len"], bucket["seq_len"])


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
    return any(len(d.numbers) + len({b for b, _, _ in d.contested}) >= 2 for d in decisions)


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
