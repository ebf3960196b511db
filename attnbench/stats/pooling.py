"""Runs of one device pooled into one entry per (case, backend): what `recommend` decides from (the rules:
docs/recommend.md, "Several runs"). The latest record decides whether a backend is in, its latest untroubled `ok`
record gives its number; samples are never pooled across runs, and runs of different software are refused."""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.records.record import Record, Status
from attnbench.records.run import Run, case_name
from attnbench.stats.metric import TIME, Metric

BACKWARD = ("bwd", "fwd_bwd")  # modes whose profiled call also zeroes and accumulates gradients


@dataclass
class Entry:
    """One backend on one case, over the pooled runs."""

    backend: str
    latest: Record  # its latest record: decides whether the backend is in
    clean: Record | None = None  # the latest ok record measured untroubled: its number counts
    troubled: Record | None = None  # with no clean one: the latest ok record, which cannot win
    why: str | None = None  # why no number of this pair counts (None when `clean` is set)

    @property
    def case_id(self) -> str:
        return case_name(self.latest)


def trouble(record: Record, metric: Metric) -> str | None:
    """Why an ok record's figure cannot decide anything, or None. A noisy record is not troubled (its interval is
    wider); an unrepeatable one is."""
    if record.kernel_trouble == "wrong kernel" or (record.kernel_trouble and record.mode not in BACKWARD):
        # its time is not (only) its kernel's; a backward's overhead (gradients) is its user's too: shown, not a gate
        return record.kernel_trouble
    if record.mode in BACKWARD and record.grad_checked is False:
        # its time may be that of wrong gradients
        return "gradients unchecked"
    if record.throttled:
        return "throttled"
    if record.unrepeatable:
        return "not repeatable"
    if metric.value(record) is None:
        return "no energy figure" if metric.name == "energy" else "no time"
    if metric.interval(record) is None:
        return "no interval"
    return None


def status_words(record: Record) -> str:
    """'mismatch: <reason>' for a record that did not run ok."""
    reason = " ".join(str(record.reason or "").split())
    return f"{record.status}: {reason}" if reason else str(record.status)


def case_key(record: Record) -> tuple:
    """A measurement's identity without its backend: the records of one case across backends and runs."""
    return record.case_key


def pool(runs: list[Run], metric: Metric = TIME) -> dict[tuple, dict[str, Entry]]:
    """Each case's entries by backend, following the pooling rule (`runs` oldest first)."""
    history: dict[tuple, dict[str, list[Record]]] = {}
    for run in runs:
        for record in run.records:
            history.setdefault(record.case_key, {}).setdefault(record.backend, []).append(record)
    pooled: dict[tuple, dict[str, Entry]] = {}
    for case, backends in history.items():
        for backend, records in backends.items():
            entry = Entry(backend, records[-1])
            if entry.latest.status != Status.OK:
                entry.why = status_words(entry.latest)
            else:
                oks = [r for r in records if r.status == Status.OK]
                clean = [r for r in oks if trouble(r, metric) is None]
                if clean:
                    entry.clean = clean[-1]
                else:
                    entry.why = trouble(oks[-1], metric)
                    if entry.why != "not repeatable":  # may be faster, timed badly; a flaky kernel is simply out
                        entry.troubled = oks[-1]
            pooled.setdefault(case, {})[backend] = entry
    return pooled
