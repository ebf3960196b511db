"""The schedule never aborts a sweep: planted failures become records in order, land on disk one by one, an oom
prunes longer sequences, a stop request finishes the current measurement only."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.backends.registry import default_registry
from attnbench.backends.testing import OutOfMemory, Raising, Wrong
from attnbench.records.results import SCHEMA_VERSION, Record, load_records
from attnbench.run.recording import RunInfo
from attnbench.run.schedule import Schedule
from tests.helpers import make_case, run_cases, run_into


@pytest.mark.slow
def test_faults_are_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    naive = default_registry().get("naive")
    cases = [make_case(causal=True), make_case(causal=True, kv_heads=1, mode="fwd_bwd")]
    records = run_into(tmp_path / "results.jsonl", cases, [Raising(), OutOfMemory(), Wrong(), naive])
    statuses = [(r.backend, r.status) for r in records]
    assert statuses == [("faulty-raise", "error"), ("faulty-oom", "oom"), ("faulty-wrong", "mismatch"),
                        ("naive", "ok")] * 2
    by_name = {r.backend: r for r in records[:4]}
    assert by_name["faulty-raise"].reason == "ValueError: planted failure in the faulty backend"
    assert by_name["faulty-oom"].reason.startswith("out of memory: planted out of memory")
    assert by_name["faulty-wrong"].reason.startswith("out max |error|")
    assert [r.kernel for r in records[:3]] == ["faulty (raise)", "faulty (oom)", "faulty (wrong)"]  # what was prepared
    assert by_name["faulty-wrong"].max_abs_error == pytest.approx(0.01, rel=0.01)
    # every record is on disk, in order, as JSON
    stored = load_records(tmp_path)
    assert [(r.backend, r.status) for r in stored] == statuses
    assert all(r.schema_version == SCHEMA_VERSION and r.run_id == "r1" for r in stored)


@pytest.mark.slow
def test_stop_request_finishes_the_current_measurement_only(tmp_path: Path) -> None:
    naive, sdpa = default_registry().get("naive"), default_registry().get("sdpa")
    made: list[int] = []
    records = run_into(tmp_path / "results.jsonl", [make_case(), make_case(causal=True)], [naive, sdpa],
                  should_stop=lambda: len(made.append(1) or made) > 3)
    assert len(records) == 3
    assert len(load_records(tmp_path)) == 3


@pytest.mark.slow
def test_a_cut_last_line_loads_with_one_line_saying_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = default_registry()
    run_into(tmp_path / "results.jsonl", [make_case()], [registry.get("naive"), registry.get("sdpa")])
    path = tmp_path / "results.jsonl"
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:40])
    records = load_records(tmp_path)
    assert len(records) == 2
    said = capsys.readouterr().err
    assert "skipped 1 bad line(s)" in said and "(line 3): a record cut off mid-write" in said


@pytest.mark.slow
def test_after_an_oom_longer_sequences_of_that_backend_and_group_are_skipped() -> None:
    naive = default_registry().get("naive")
    cases = [make_case(seq_len=s) for s in (32, 64, 128)] + [make_case(seq_len=64, causal=True)]
    records: list[Record] = []
    run_cases(cases, [OutOfMemory(), naive], records.append)
    got = [(r.backend, r.seq_len, r.causal, r.status, r.reason) for r in records if r.backend == "faulty-oom"]
    assert got == [
        ("faulty-oom", 32, False, "oom", "out of memory: planted out of memory in the faulty backend"),
        ("faulty-oom", 64, False, "skipped", "oom at seq_len 32; longer sequences not tried"),
        ("faulty-oom", 128, False, "skipped", "oom at seq_len 32; longer sequences not tried"),
        ("faulty-oom", 64, True, "oom", "out of memory: planted out of memory in the faulty backend"),  # other group
    ]
    assert {r.status for r in records if r.backend == "naive"} == {"ok"}
    unpruned: list[Record] = []
    run_cases(cases[:3], [OutOfMemory()], unpruned.append, oom_pruning=False)
    assert [r.status for r in unpruned] == ["oom"] * 3


class Progress:
    """A listener that writes down what the CLI would draw."""

    def __init__(self) -> None:
        self.lines: list[tuple] = []

    def started(self, index: int, total: int, case, backend) -> None:  # type: ignore[no-untyped-def]
        self.lines.append(("started", index, total, case.seq_len, backend.name))

    def finished(self, record: Record) -> None:
        self.lines.append(("finished", record.seq_len, record.backend, record.status))


@pytest.mark.slow
def test_listener_hears_each_measurement_in_order_and_the_count_is_returned() -> None:
    naive = default_registry().get("naive")
    progress = Progress()
    records: list[Record] = []
    done = run_cases([make_case(seq_len=16), make_case(seq_len=32)], [naive, OutOfMemory()], records.append,
                     listener=progress)
    assert done == 4
    assert progress.lines == [
        ("started", 0, 4, 16, "naive"), ("finished", 16, "naive", "ok"),
        ("started", 1, 4, 16, "faulty-oom"), ("finished", 16, "faulty-oom", "oom"),
        ("started", 2, 4, 32, "naive"), ("finished", 32, "naive", "ok"),
        ("started", 3, 4, 32, "faulty-oom"), ("finished", 32, "faulty-oom", "skipped"),  # pruned after the oom
    ]
    assert run_cases([make_case(seq_len=16)], [naive, naive], records.append,
                     should_stop=lambda: len(records) >= 5) == 1


def test_an_interrupt_aborts_the_measurer_instead_of_waiting_for_it() -> None:
    class Measurer:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def measure(self, case, backend) -> Record:  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

        def close(self) -> None:
            self.calls.append("close")

        def abort(self) -> None:
            self.calls.append("abort")

    measurer = Measurer()
    with pytest.raises(KeyboardInterrupt):
        Schedule(RunInfo("r", "unit")).run([(make_case(seq_len=16), default_registry().get("naive"))],
                                           lambda case, record: None, measurer)
    assert measurer.calls == ["abort"]
