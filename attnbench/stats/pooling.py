"""Runs of one device pooled into one entry per (case, backend): what `recommend` decides from (the rules:
docs/recommend.md, "Several runs"). The latest record decides whether a backend is in, its latest untroubled `ok`
record gives its number; samples are never pooled across runs, and runs of different software are refused."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from attnbench.records.record import Record, Status
from attnbench.records.run import Run, case_name
from attnbench.stats.metric import TIME, Metric

BACKWARD = ("bwd", "fwd_bwd")  # modes whose profiled call also zeroes and accumulates gradients


class Trouble(enum.StrEnum):
    """Why an ok record's figure cannot decide anything."""

    WRONG_KERNEL = "wrong kernel"
    OVERHEAD = "overhead"
    GRADIENTS_UNCHECKED = "gradients unchecked"
    THROTTLED = "throttled"
    NOT_REPEATABLE = "not repeatable"
    NO_ENERGY = "no energy figure"
    NO_TIME = "no time"
    NO_INTERVAL = "no interval"


@dataclass
class Entry:
    """One backend on one case, over the pooled runs."""

    backend: str
    latest: Record  # its latest record: decides whether the backend is in
    clean: Record | None = None  # the latest ok record measured untroubled: its number counts
    troubled: Record | None = None  # with no clean one: the latest ok record, which cannot win
    cause: Status | Trouble | None = None  # why no number of this pair counts (None when `clean` is set)

    @property
    def case_id(self) -> str:
        return case_name(self.latest)

    @property
    def why(self) -> str | None:
        return status_words(self.latest) if isinstance(self.cause, Status) else self.cause


def trouble(record: Record, metric: Metric) -> Trouble | None:
    """Why an ok record's figure cannot decide anything, or None. A noisy record is not troubled (its interval is
    wider); an unrepeatable one is."""
    if record.kernel_trouble == "wrong kernel" or (record.kernel_trouble and record.mode not in BACKWARD):
        # its time is not (only) its kernel's; a backward's overhead (gradients) is its user's too: shown, not a gate
        return Trouble(record.kernel_trouble)
    if record.mode in BACKWARD and record.grad_checked is False:
        # its time may be that of wrong gradients
        return Trouble.GRADIENTS_UNCHECKED
    if record.throttled:
        return Trouble.THROTTLED
    if record.unrepeatable:
        return Trouble.NOT_REPEATABLE
    if metric.value(record) is None:
        return Trouble.NO_ENERGY if metric.name == "energy" else Trouble.NO_TIME
    if metric.interval(record) is None:
        return Trouble.NO_INTERVAL
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
                entry.cause = entry.latest.status
            else:
                oks = [r for r in records if r.status == Status.OK]
                clean = [r for r in oks if trouble(r, metric) is None]
                if clean:
                    entry.clean = clean[-1]
                else:
                    entry.cause = trouble(oks[-1], metric)
                    if entry.cause != Trouble.NOT_REPEATABLE:  # may be faster, timed badly; a flaky one is out
                        entry.troubled = oks[-1]
            pooled.setdefault(case, {})[backend] = entry
    return pooled
