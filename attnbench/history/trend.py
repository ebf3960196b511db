"""Trends from the history store: one (GPU, case, backend) over its dated runs, with library-version changes marked."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from attnbench.core.units import fmt_ms
from attnbench.history.store import Store, StoredRun
from attnbench.records.record import Record
from attnbench.stats.metric import TIME

if TYPE_CHECKING:
    from rich.table import Table


@dataclass(frozen=True)
class Point:

    run: StoredRun
    status: str
    time_ms: float | None
    interval: tuple[float, float] | None  # older records: from the samples
    noisy: bool
    throttled: bool
    kernel: str | None
    changes: tuple[str, ...]  # versions that differ from the previous point's run

    @property
    def timed(self) -> bool:
        return self.status in ("ok", "mismatch") and self.time_ms is not None


@dataclass
class Trend:
    """A (GPU, case, backend) over the runs that measured it, oldest first."""

    gpu: str
    case_id: str
    backend: str
    points: list[Point] = field(default_factory=list)

    @property
    def timed(self) -> bool:
        return any(p.timed for p in self.points)


def version_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """Each version that differs, torch, CUDA, cuDNN and the driver first: 'torch 2.11.0 → 2.12.0',
    'flash-attn 2.8.3 (new)'."""
    changes = []
    for name in dict.fromkeys([*new, *old]):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        changes.append(f"{name} {after} (new)" if before is None else f"{name} {before} (removed)" if after is None
                       else f"{name} {before} → {after}")
    return tuple(changes)


def matches(value: str, wanted: list[str]) -> bool:
    """Whether a name passes the filters: any of them, each a glob over the whole name when it holds * ? or [, else a
    substring."""
    if not wanted:
        return True
    value = value.lower()
    return any(fnmatch.fnmatchcase(value, w.lower()) if any(c in w for c in "*?[") else w.lower() in value
               for w in wanted)


def trends(store: Store, backends: list[str] | None = None, cases: list[str] | None = None,
           gpus: list[str] | None = None) -> list[Trend]:
    """Every (GPU, case, backend) the filters let through."""
    runs = {run.run_id: run for run in store.runs()}
    found: dict[tuple[str, str, str], Trend] = {}
    query = "SELECT run_id, case_id, backend, record FROM records"
    for run_id, case_id, backend, text in store.db.execute(query):
        run = runs[run_id]
        gpu = run.device_name or run.device
        if backends and backend not in backends or not matches(case_id, cases or []) \
                or not matches(gpu, gpus or []):
            continue
        record = Record.from_dict(json.loads(text))
        trend = found.setdefault((gpu, case_id, backend), Trend(gpu, case_id, backend))
        trend.points.append(Point(run, str(record.status), record.time_ms, TIME.interval(record)
                                  if record.time_ms is not None else None, record.noisy,
                                  bool(record.throttled), record.kernel, ()))
    for trend in found.values():
        trend.points.sort(key=lambda p: (p.run.timestamp, p.run.run_id))
        for i in range(1, len(trend.points)):
            before, now = trend.points[i - 1], trend.points[i]
            trend.points[i] = replace(now, changes=version_changes(before.run.versions, now.run.versions))
    return [found[key] for key in sorted(found)]


def point_text(point: Point) -> str:
    """'1.90 [1.89, 1.91]' with ~ (noisy) or ! (throttled) in front, or the status."""
    if not point.timed:
        return point.status
    mark = "!" if point.throttled else "~" if point.noisy else ""
    text = f"{mark}{fmt_ms(point.time_ms)}"
    if point.interval is not None:
        text += f" [{fmt_ms(point.interval[0])}, {fmt_ms(point.interval[1])}]"
    return text + (" (mismatch)" if point.status == "mismatch" else "")


def step_text(previous: Point | None, point: Point) -> str:
    """This point over the previous timed one: '1.02×', with '(apart)' when their intervals do not overlap."""
    if previous is None or not (point.timed and previous.timed) or not previous.time_ms:
        return ""
    ratio = float(point.time_ms) / float(previous.time_ms)  # type: ignore[arg-type]
    a, b = point.interval, previous.interval
    apart = a is not None and b is not None and (a[0] > b[1] or b[0] > a[1])
    return f"{ratio:.3f}×" + (" (apart)" if apart else "")


def trend_table(found: list[Trend], title: str) -> Table:
    """One rich table: a section per (device, case, backend), a row per run."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title), title_justify="left")
    for column in ("device · case · backend", "run started", "run", "median ms [interval]", "vs previous",
                   "versions changed"):
        table.add_column(Text(column), overflow="fold")  # Text: '[interval]' is not Rich markup
    for trend in found:
        previous: Point | None = None
        for i, point in enumerate(trend.points):
            label = f"{trend.gpu} · {trend.case_id} · {trend.backend}" if i == 0 else ""
            style = "yellow" if point.throttled or point.noisy else "red" if not point.timed else ""
            table.add_row(Text(label), Text(point.run.timestamp[:16].replace("T", " ")), Text(point.run.run_id),
                          Text(point_text(point), style=style), Text(step_text(previous, point)),
                          Text("; ".join(point.changes), style="bold magenta"))
            if point.timed:
                previous = point
        table.add_section()
    table.caption = ("~ noisy, ! throttled: not to be judged (see docs/results.md); '(apart)': the intervals do not "
                     "overlap")
    return table
