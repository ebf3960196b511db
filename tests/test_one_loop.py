"""One measurement loop: a queue of whole cases feeding any number of measurers; devices.py goes through it.
And one pass: no call of the timed function is made only to read memory."""

from __future__ import annotations

import threading
import time

import pytest

from attnbench import devices
from attnbench.backends.base import Backend, Prepared
from attnbench.backends.naive import naive_attention
from attnbench.backends.testing import OutOfMemory
from attnbench.case import Case
from attnbench.registry import default_registry
from attnbench.results import Record
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import ClockTimer, TimingSettings
from tests.conftest import ONE_SAMPLE, make_case


class FakeMeasurer:
    """Answers every task `ok` after a short sleep, noting which thread measured what."""

    def __init__(self, runner: Runner, log: list[tuple[str, str, str]]) -> None:
        self.runner, self.log, self.closed = runner, log, False

    def measure(self, case: Case, backend: Backend) -> Record:
        self.log.append((threading.current_thread().name, case.case_id, backend.name))
        if backend.name == "faulty-oom":  # at once: every other measurer is still busy with its case's naive
            return self.runner.unmeasured(case, backend, "oom", "planted")
        time.sleep(0.05)
        record = self.runner.unmeasured(case, backend, "skipped", "fake")
        record.status, record.reason = "ok", None
        return record

    def close(self) -> None:
        self.closed = True


def tasks() -> list[tuple[Case, Backend]]:
    naive, oom = default_registry().get("naive"), OutOfMemory()
    cases = [make_case(seq_len=s, heads=h) for h in (2, 4) for s in (16, 32, 64)]
    return [(case, backend) for case in cases for backend in (oom, naive)]


def test_several_measurers_share_one_queue_of_whole_cases_and_one_oom_pruner() -> None:
    runner = Runner(RunInfo("r", "t"), ClockTimer(), ONE_SAMPLE)
    log: list[tuple[str, str, str]] = []
    measurers = [FakeMeasurer(runner, log) for _ in range(2)]
    records: list[Record] = []
    made = runner.run_tasks(tasks(), records.append, measurers)
    assert made == len(records) == 12
    assert all(m.closed for m in measurers)
    by_case: dict[str, set[str]] = {}
    for thread, case_id, _ in log:
        by_case.setdefault(case_id, set()).add(thread)
    assert all(len(threads) == 1 for threads in by_case.values()), "a case's backends stay on one measurer"
    assert len({thread for thread, _, _ in log}) > 1, "the cases were shared out"
    # Two measurers start on lengths 16 and 32 together; the oom at 16 is known long before either takes the
    # 64 case of its head count, so that one is pruned, whichever measurer the 16 went to.
    pruned = {(r.heads, r.seq_len): r.reason for r in records if r.backend == "faulty-oom" and r.status == "skipped"}
    assert pruned[(2, 64)] == pruned[(4, 64)] == "oom at seq_len 16; longer sequences not tried"


def test_the_multi_gpu_path_calls_the_runners_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(Runner, "run_tasks", lambda self, t, sink, measurer=None: seen.append(measurer) or 7)
    runner = Runner(RunInfo("r", "t"), ClockTimer(), ONE_SAMPLE)
    measurers = [FakeMeasurer(runner, []), FakeMeasurer(runner, [])]
    assert devices.run_on_devices(runner, tasks(), lambda r: None, measurers) == 7
    assert seen == [measurers]


def test_a_stop_request_lets_every_measurer_finish_its_current_measurement_only() -> None:
    stop = threading.Event()
    runner = Runner(RunInfo("r", "t"), ClockTimer(), ONE_SAMPLE, should_stop=stop.is_set)
    records: list[Record] = []

    def sink(record: Record) -> None:
        records.append(record)
        if len(records) == 3:
            stop.set()

    runner.run_tasks(tasks(), sink, [FakeMeasurer(runner, []) for _ in range(2)])
    assert 3 <= len(records) <= 4  # the other measurer may be finishing the one it had started


class Counting(Backend):
    """Naive attention that counts its forward calls."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def prepare(self, case: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        def call(q, k, v):  # type: ignore[no-untyped-def]
            self.calls += 1
            return naive_attention(q, k, v, case.mask())

        return Prepared((q, k, v), call, kernel="counting")


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_peak_memory_costs_no_call_of_its_own(mode: str) -> None:
    """Forward on a CPU: the checked call is profiled. Otherwise the first timed warm-up call is. Either way the
    backend runs once to be checked plus once per warm-up call and sample (the check may be one of the samples),
    and the peak is measured."""
    backend = Counting()
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=4, max_samples=4)
    record = Runner(RunInfo("r", "t"), ClockTimer(), settings).measure(
        CaseData(make_case(seq_len=256, causal=True, mode=mode)), backend)
    assert record.status == "ok"
    timed_calls = record.samples + record.extra["warmup_calls"]
    check_is_a_sample = record.extra.get("check_sampled", False)  # a forward's check may also be a sample
    assert backend.calls == timed_calls + (0 if check_is_a_sample else 1)
    assert record.peak_memory_bytes >= 4 * 256 * 256 * 4  # one head's worth of scores, at least
    assert record.memory_method == "torch.profiler CPU allocator events"
