"""Progress while a run measures: a bar and an ETA, the forecast of what is left scaled by how the finished
measurements compared with their forecast."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from attnbench.run.forecast import fmt_duration

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.records.results import Record
    from attnbench.run.forecast import Forecast

# The first measurements say little: their correction is pulled toward 1 by this many seconds.
PRIOR_S = 5.0


class Eta:
    def __init__(self, forecast: Forecast | None, tasks: list[tuple[Case, Backend]], workers: int = 1) -> None:
        self.workers = max(1, workers)
        self.predicted: dict[tuple, float] = {}
        if forecast is not None:
            for (case, backend), task in zip(tasks, forecast.tasks, strict=False):
                self.predicted[(case, backend.name)] = task.seconds * self.workers
        self.left = sum(self.predicted.values())
        self.tail = forecast.report_s if forecast is not None else 0.0
        self.done_predicted = self.done_actual = 0.0
        self.begun: dict[tuple, float] = {}
        self.lock = threading.Lock()

    def started(self, case: Case, backend: Backend) -> None:
        with self.lock:
            self.begun[(case, backend.name)] = time.perf_counter()

    def finished(self, case: Case, backend: str) -> None:
        key = (case, backend)
        with self.lock:
            predicted = self.predicted.pop(key, 0.0)
            self.left -= predicted
            begun = self.begun.pop(key, None)
            if begun is not None:
                self.done_predicted += predicted
                self.done_actual += time.perf_counter() - begun

    def correction(self) -> float:
        return (self.done_actual + PRIOR_S) / (self.done_predicted + PRIOR_S)

    def seconds(self) -> float | None:
        if not self.predicted and not self.left:
            return None
        return max(0.0, self.left) * self.correction() / self.workers + self.tail


class ProgressListener:
    """A bar on a terminal; one line per measurement elsewhere."""

    def __init__(self, console: Console, total: int, eta: Eta | None = None,
                 unavailable: dict[str, str] | None = None) -> None:
        self.console = console
        self.total = total
        self.eta = eta
        self.unavailable = unavailable or {}  # announced once: their skips print no line
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta {task.fields[eta]}"), console=console, transient=True,
        )
        self.task = self.progress.add_task("starting", total=total, eta=self._eta_text())
        self.cases: dict[str, Case] = {}

    def __enter__(self) -> ProgressListener:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    def _eta_text(self) -> str:
        seconds = self.eta.seconds() if self.eta is not None else None
        return "?" if seconds is None else fmt_duration(seconds)

    def started(self, index: int, total: int, case: Case, backend: Backend) -> None:
        if self.eta is not None:
            self.eta.started(case, backend)
        self.cases[case.case_id] = case
        self.progress.update(self.task, description=f"{backend.name:<15} {case.describe()}")

    def finished(self, record: Record) -> None:
        case = self.cases.get(record.case_id or "")
        if self.eta is not None and case is not None:
            self.eta.finished(case, record.backend)
        self.progress.update(self.task, advance=1, eta=self._eta_text())
        done = int(self.progress.tasks[0].completed)
        if record.status == "skipped" and record.reason == self.unavailable.get(record.backend):
            return
        line = f"[{done}/{self.total}] {record.backend:<15} {record.case_id:<52} {status_text(record)}"
        if not self.live:
            self.console.print(line + (f"  (eta {self._eta_text()})" if self.eta is not None else ""),
                               markup=False, soft_wrap=True)
        elif record.status != "ok":  # failures stay on screen above the bar
            self.progress.console.print(line, markup=False, soft_wrap=True)


def status_text(record: Record) -> str:
    if record.status == "ok":
        return f"ok {record.time_ms:.3f} ms"
    if record.status == "mismatch":
        return f"MISMATCH {record.time_ms:.3f} ms: {record.reason}"
    return f"{record.status}: {record.reason}"
