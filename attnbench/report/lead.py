"""The report's answer first: per case group and length, the fastest clean backend, its margin over the runner-up
and that margin's interval, decided by the recommendation's rules (docs/recommend.md) on that one case."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnbench.core.units import fmt_length, fmt_ms
from attnbench.records.record import Record, Status
from attnbench.report.groups import CaseGroup
from attnbench.stats.metric import TIME
from attnbench.stats.pooling import Entry
from attnbench.stats.recommend import Call, Decision, Number, decide_bucket


@dataclass
class LeadLine:
    """One length of a group: `kind` is its decision, `text` says it."""

    x: int
    kind: Call
    text: str
    backend: str | None = None  # the winner, only when `kind` is winner


@dataclass
class GroupLead:
    """A group's answer, a line per length, and the faster timings no rule may rank."""

    group: CaseGroup
    lines: list[LeadLine] = field(default_factory=list)
    unranked: list[str] = field(default_factory=list)

    @property
    def winners(self) -> list[str]:
        return [line.backend for line in self.lines if line.backend]


def _ratio_words(runner: Number, leader: Number) -> str:
    """How much slower the runner-up is, with the interval the two medians' intervals allow."""
    low, high = runner.low / leader.high, runner.high / leader.low
    return f"{runner.value / leader.value:.2f}× [{low:.2f}–{high:.2f}×]"


def _numbers(decision: Decision, backend: str) -> Number:
    return decision.numbers[backend][0]


def _merged(decision: Decision, backend: str) -> str:
    """The backend with those folded into it for running its kernel ("sdpa = sdpa-cudnn")."""
    same = [b for b, kept in decision.folded.items() if kept == backend]
    return " = ".join([backend, *same])


def line_of(x: int, decision: Decision) -> LeadLine:
    """A length's decision in words."""
    at = fmt_length(x)
    leader = decision.leader
    if decision.decision == Call.WINNER and leader is not None:
        lead = _numbers(decision, leader)
        text = f"{at}: fastest {_merged(decision, leader)}, {fmt_ms(lead.value)} ms [{fmt_ms(lead.low)}–" \
               f"{fmt_ms(lead.high)}]"
        if decision.runner_up is not None:
            runner = _numbers(decision, decision.runner_up)
            text += f"; runner-up {decision.runner_up} {_ratio_words(runner, lead).replace(' [', ' slower [', 1)}"
        else:
            text += f"; {decision.why}"
        return LeadLine(x, Call.WINNER, text, leader)
    if decision.decision == Call.TIE and leader is not None:
        lead = _numbers(decision, leader)
        others = [f"{b} {_ratio_words(_numbers(decision, b), lead)}" for b in decision.tie if b != leader]
        return LeadLine(x, Call.TIE, f"{at}: no single fastest, the intervals overlap: "
                                  f"{_merged(decision, leader)} {fmt_ms(lead.value)} ms, {', '.join(others)}")
    if decision.decision == Call.UNSETTLED:
        return LeadLine(x, Call.UNSETTLED, f"{at}: unsettled: {decision.why}")
    counts: dict[str, int] = {}  # why each backend is out: its status, or an ok record's trouble
    for out in decision.excluded:
        if out.cause != Status.SKIPPED and out.backend not in decision.folded:
            counts[out.cause] = counts.get(out.cause, 0) + 1
    statuses = ", ".join(f"{s} ×{n}" for s, n in sorted(counts.items()))
    return LeadLine(x, Call.NONE, f"{at}: {decision.why}" + (f" ({statuses})" if statuses else ""))


def group_lead(group: CaseGroup, pooled: dict[tuple, dict[str, Entry]]) -> GroupLead:
    """The group's answer at each of its lengths."""
    lead = GroupLead(group)
    cells = group.by_backend_x()
    for x in group.xs:
        here = {b: r for (b, xx), r in cells.items() if xx == x}
        entries = pooled.get(next(iter(here.values())).case_key)
        if not entries:
            continue
        decision = decide_bucket([entries], TIME)
        lead.lines.append(line_of(x, decision))
        lead.unranked += _unranked(x, here, decision)
    return lead


def _unranked(x: int, here: dict[str, Record], decision: Decision) -> list[str]:
    """Timings faster than the leader's that no rule may rank (implausible, not repeatable, flagged...)."""
    if decision.leader is None:
        return []
    best = _numbers(decision, decision.leader).value
    words = []
    for out in decision.excluded:
        record = here.get(out.backend)
        if record is None or record.time_ms is None or out.backend in decision.folded:
            continue
        if float(record.time_ms) < best:
            words.append(f"{out.backend} at {fmt_length(x)} ({fmt_ms(float(record.time_ms))} ms: {out.cause})")
    return words


def group_leads(groups: list[CaseGroup], pooled: dict[tuple, dict[str, Entry]]) -> list[GroupLead]:
    return [group_lead(group, pooled) for group in groups]
