"""The order measurements are made in: a queue of whole cases, one thread per measurer, OOM pruning. Holds no
timer."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from attnbench.core.case import group_of
from attnbench.run.child import join_threads
from attnbench.run.recording import RunInfo, unmeasured

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.records.results import Record

Task = tuple["Case", "Backend"]


class Listener(Protocol):
    def started(self, index: int, total: int, case: Case, backend: Backend) -> None: ...

    def finished(self, record: Record) -> None: ...


class Measurer(Protocol):
    def measure(self, case: Case, backend: Backend) -> Record: ...

    def close(self) -> None: ...


@dataclass
class Schedule:
    info: RunInfo  # for the records of pruned measurements
    listener: Listener | None = None
    should_stop: Callable[[], bool] = lambda: False
    oom_pruning: bool = True
    # Why a measurement is skipped for what the compile phase could not build.
    not_built: Callable[[Case, Backend], str | None] = lambda case, backend: None

    def run(self, tasks: list[Task], sink: Callable[[Case, Record], None],
            measurers: Measurer | list[Measurer]) -> int:
        """Each measurer takes the next whole case (its inputs and reference are made once); after an `oom`, longer
        sequences of that backend and case group are skipped untried; `sink` gets each record with its case.
        Returns how many records were made."""
        measurers = measurers if isinstance(measurers, list) else [measurers]
        queue = TaskQueue(tasks)
        pruner = OomPruner(self.oom_pruning)
        lock = threading.Lock()
        done = 0

        def work(one: Measurer) -> None:
            nonlocal done
            while (group := queue.next_case()) is not None:
                for case, backend in group:
                    with lock:
                        if self.should_stop():
                            queue.clear()
                            return
                        if self.listener:
                            self.listener.started(done, len(tasks), case, backend)
                        reason = self.not_built(case, backend) or pruner.reason(case, backend)
                    record = (unmeasured(self.info, case, backend, "skipped", reason) if reason
                              else one.measure(case, backend))
                    with lock:
                        pruner.note(case, backend, record)
                        sink(case, record)
                        done += 1
                        if self.listener:
                            self.listener.finished(record)

        if len(measurers) == 1:
            try:
                work(measurers[0])
            except BaseException:  # a second Ctrl-C: a worker is killed, not waited for
                getattr(measurers[0], "abort", measurers[0].close)()
                raise
            measurers[0].close()
            return done
        run_threads(work, measurers, queue)
        return done


class TaskQueue:
    def __init__(self, tasks: list[Task]) -> None:
        self.groups: deque[list[Task]] = deque()
        for case, backend in tasks:
            if self.groups and self.groups[-1][0][0] == case:
                self.groups[-1].append((case, backend))
            else:
                self.groups.append([(case, backend)])
        self.lock = threading.Lock()

    def next_case(self) -> list[Task] | None:
        with self.lock:
            return self.groups.popleft() if self.groups else None

    def clear(self) -> None:
        with self.lock:
            self.groups.clear()


def run_threads(work: Callable[[Measurer], None], measurers: list[Measurer], queue: TaskQueue) -> None:
    """A failure in one thread empties the queue and is raised here once the others finish."""
    failures: list[BaseException] = []

    def guarded(one: Measurer) -> None:
        try:
            work(one)
        except BaseException as exc:  # noqa: BLE001 - raised in the calling thread below
            queue.clear()
            failures.append(exc)
        finally:
            one.close()

    def stop() -> None:
        queue.clear()
        for one in measurers:
            getattr(one, "abort", one.close)()

    join_threads(guarded, measurers, "attnbench-measurer", stop)
    if failures:
        raise failures[0]


class OomPruner:
    """The shortest sequence each (backend, case group) ran out of memory at."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.limits: dict[tuple, tuple[int, int]] = {}

    def reason(self, case: Case, backend: Backend) -> str | None:
        limit = self.limits.get((backend.name, group_of(case)))
        if self.enabled and limit is not None and longer_than(case, limit):
            return pruning_reason(limit)
        return None

    def note(self, case: Case, backend: Backend, record: Record) -> None:
        if record.status == "oom":
            key, length = (backend.name, group_of(case)), (case.seq_len, case.kv_seq_len)
            self.limits[key] = min(self.limits.get(key, length), length)


def longer_than(case: Case, limit: tuple[int, int]) -> bool:
    seq, kv = limit
    return case.seq_len >= seq and case.kv_seq_len >= kv and (case.seq_len, case.kv_seq_len) != limit


def pruning_reason(limit: tuple[int, int]) -> str:
    seq, kv = limit
    return f"oom at seq_len {seq}" + (f" (kv_seq_len {kv})" if kv != seq else "") + "; longer sequences not tried"
