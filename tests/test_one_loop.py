"""One measurement loop (attnbench.run.schedule): a queue of whole cases feeding any number of measurers; a run on
several GPUs goes through it. And one pass: no call of the timed function is made only to read memory."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.backends.testing import OutOfMemory
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.records.results import Record
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo, unmeasured
from attnbench.run.schedule import Schedule
from attnbench.timing.timers import ClockTimer, TimingSettings
from attnbench.verify.inputs import CaseData, naive_attention
from tests.helpers import make_case


class FakeMeasurer:
    """Answers every task `ok` after a short sleep, noting which thread measured what."""

    def __init__(self, log: list[tuple[str, str, str]]) -> None:
        self.log, self.closed = log, False

    def measure(self, case: Case, backend: Backend) -> Record:
        self.log.append((threading.current_thread().name, case.case_id, backend.name))
        if backend.name == "faulty-oom":  # at once: every other measurer is still busy with its case's naive
            return unmeasured(INFO, case, backend, "oom", "planted")
        time.sleep(0.05)
        return dataclasses.replace(unmeasured(INFO, case, backend, "skipped", "fake"), status="ok", reason=None)

    def close(self) -> None:
        self.closed = True


INFO = RunInfo("r", "t")


def tasks() -> list[tuple[Case, Backend]]:
    naive, oom = default_registry().get("naive"), OutOfMemory()
    cases = [make_case(seq_len=s, heads=h) for h in (2, 4) for s in (16, 32, 64)]
    return [(case, backend) for case in cases for backend in (oom, naive)]


def test_several_measurers_share_one_queue_of_whole_cases_and_one_oom_pruner() -> None:
    log: list[tuple[str, str, str]] = []
    measurers = [FakeMeasurer(log) for _ in range(2)]
    records: list[Record] = []
    made = Schedule(INFO).run(tasks(), lambda case, record: records.append(record), measurers)
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


@pytest.mark.slow
def test_a_run_on_several_gpus_goes_through_the_one_loop_with_a_worker_per_gpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from attnbench.cli.main import app
    from attnbench.run.isolation import Isolated

    seen: list[list[object]] = []
    monkeypatch.setattr(Schedule, "run", lambda self, tasks, sink, measurers: seen.append(measurers) or 0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    CliRunner().invoke(app, ["run", "quick", "--devices", "0,1", "--backend", "naive", "--out", str(tmp_path / "o")])
    (measurers,) = seen
    assert all(isinstance(m, Isolated) for m in measurers)
    assert [m.config.env["CUDA_VISIBLE_DEVICES"] for m in measurers] == ["0", "1"]


def test_a_stop_request_lets_every_measurer_finish_its_current_measurement_only() -> None:
    stop = threading.Event()
    records: list[Record] = []

    def sink(case: object, record: Record) -> None:
        records.append(record)
        if len(records) == 3:
            stop.set()

    Schedule(INFO, should_stop=stop.is_set).run(tasks(), sink, [FakeMeasurer([]) for _ in range(2)])
    assert 3 <= len(records) <= 4  # the other measurer may be finishing the one it had started


class Counting(Backend):
    """Naive attention that counts its forward calls."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def prepare(self, case: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        def call(q, k, v):  # type: ignore[no-untyped-def]
            self.calls += 1
            return naive_attention(q, k, v, workload.mask(case))

        return Prepared((q, k, v), call, kernel="counting")


@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_peak_memory_costs_no_call_of_its_own(mode: str) -> None:
    """Forward on a CPU: the checked call is profiled. Otherwise the first timed warm-up call is. Either way the
    backend runs once to be checked plus once per warm-up call and sample (the check may be one of the samples),
    and the peak is measured."""
    backend = Counting()
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=4, max_samples=4)
    record = measure(CaseData(make_case(seq_len=256, causal=True, mode=mode)), backend, ClockTimer(),
                     Settings(INFO, settings))
    assert record.status == "ok"
    timed_calls = record.samples + record.extra["warmup_calls"]
    check_is_a_sample = record.extra.get("check_sampled", False)  # a forward's check may also be a sample
    profiled = 1  # the one call under the profiler, after the samples (attnbench.run.profiled)
    # the integrity guard's call on sign-flipped inputs (attnbench.verify.integrity): a forward's is its profiled call
    guarded = 0 if mode == "fwd" else 1
    assert backend.calls == timed_calls + (0 if check_is_a_sample else 1) + profiled + guarded
    assert record.peak_memory_bytes >= 4 * 256 * 256 * 4  # one head's worth of scores, at least
    assert record.memory_method == "torch.profiler CPU allocator events"
