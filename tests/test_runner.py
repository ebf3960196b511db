"""The sweep never aborts: planted failures become records, and the records land on disk one by one."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from attnbench.backends.testing import OutOfMemory, Raising, Wrong
from attnbench.registry import default_registry
from attnbench.results import Record, ResultsWriter, load_records
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import ClockTimer
from tests.conftest import ONE_SAMPLE, ScriptedTimer, make_case


def run(cases, backends, path: Path, should_stop=lambda: False, timer=None) -> list[Record]:  # type: ignore[no-untyped-def]
    records: list[Record] = []
    with ResultsWriter(path) as writer:
        def sink(record: Record) -> None:
            writer.append(record)
            records.append(record)

        Runner(RunInfo("r1", "unit"), timer or ClockTimer(), ONE_SAMPLE, should_stop=should_stop).run(
            cases, backends, sink)
    return records


def test_faults_are_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    naive = default_registry().get("naive")
    cases = [make_case(causal=True), make_case(causal=True, kv_heads=1, mode="fwd_bwd")]
    records = run(cases, [Raising(), OutOfMemory(), Wrong(), naive], tmp_path / "results.jsonl")
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
    assert [(r["backend"], r["status"]) for r in stored] == statuses
    assert all(r["schema_version"] == 1 and r["run_id"] == "r1" for r in stored)


def test_stop_request_finishes_the_current_measurement_only(tmp_path: Path) -> None:
    naive, sdpa = default_registry().get("naive"), default_registry().get("sdpa")
    made: list[int] = []
    records = run([make_case(), make_case(causal=True)], [naive, sdpa], tmp_path / "results.jsonl",
                  should_stop=lambda: len(made.append(1) or made) > 3)
    assert len(records) == 3
    assert len(load_records(tmp_path)) == 3


def test_a_cut_last_line_loads_with_a_warning(tmp_path: Path) -> None:
    run([make_case()], [default_registry().get("naive"), default_registry().get("sdpa")], tmp_path / "results.jsonl")
    path = tmp_path / "results.jsonl"
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:40])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(tmp_path)
    assert len(records) == 2
    assert "last line is incomplete" in str(caught[0].message)


def test_record_fields_follow_the_guide(tmp_path: Path) -> None:
    (record,) = run([make_case(causal=True, window=8, mode="fwd_bwd")], [default_registry().get("sdpa-math")],
                    tmp_path / "results.jsonl", timer=ScriptedTimer([2.5, 0.5, 1.5]))
    stored = json.loads((tmp_path / "results.jsonl").read_text())
    for field in ("schema_version", "run_id", "suite", "timestamp", "backend", "kernel", "device", "dtype", "batch",
                  "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim", "causal", "window", "mode", "status",
                  "time_ms", "time_ms_iqr", "time_ms_min", "samples", "times_ms", "timer", "flops", "tflops",
                  "peak_memory_bytes", "memory_method", "memory_estimate_bytes", "max_abs_error", "error_bound",
                  "rows_checked", "grad_checked", "kv_expanded"):
        assert field in stored, field
    assert stored["times_ms"] == [2.5, 0.5, 1.5] and stored["samples"] == 3
    assert (stored["time_ms"], stored["time_ms_min"], stored["time_ms_iqr"]) == (1.5, 0.5, 1.0)
    assert stored["timer"] == "scripted"
    assert stored["flops"] == make_case(causal=True, window=8, mode="fwd_bwd").flops()
    assert stored["tflops"] == pytest.approx(stored["flops"] / (stored["time_ms"] * 1e-3) / 1e12)
    assert record.grad_checked


def test_after_an_oom_longer_sequences_of_that_backend_and_group_are_skipped() -> None:
    naive = default_registry().get("naive")
    cases = [make_case(seq_len=s) for s in (32, 64, 128)] + [make_case(seq_len=64, causal=True)]
    records: list[Record] = []
    Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE).run(cases, [OutOfMemory(), naive], records.append)
    got = [(r.backend, r.seq_len, r.causal, r.status, r.reason) for r in records if r.backend == "faulty-oom"]
    assert got == [
        ("faulty-oom", 32, False, "oom", "out of memory: planted out of memory in the faulty backend"),
        ("faulty-oom", 64, False, "skipped", "oom at seq_len 32; longer sequences not tried"),
        ("faulty-oom", 128, False, "skipped", "oom at seq_len 32; longer sequences not tried"),
        ("faulty-oom", 64, True, "oom", "out of memory: planted out of memory in the faulty backend"),  # other group
    ]
    assert {r.status for r in records if r.backend == "naive"} == {"ok"}
    unpruned: list[Record] = []
    Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE, oom_pruning=False).run(cases[:3], [OutOfMemory()],
                                                                                  unpruned.append)
    assert [r.status for r in unpruned] == ["oom"] * 3


def test_a_case_far_beyond_free_device_memory_is_skipped_with_the_estimate() -> None:
    naive = default_registry().get("naive")
    case = make_case(seq_len=256)  # naive: scores and probabilities, 2 x 4 x 256² fp32, plus the output: 2.1 MiB
    runner = Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE, free_memory=lambda device: 1 << 19)
    record = runner.measure(CaseData(case), naive)
    assert record.status == "skipped" and record.time_ms is None
    assert record.reason == "estimated memory 2.1 MiB exceeds 2x the free device memory 0.5 MiB; not tried"
    roomy = Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE, free_memory=lambda device: 2 << 20)
    assert roomy.measure(CaseData(case), naive).status == "ok", "within 2x of free memory: tried"


def test_the_reference_is_float64_on_cuda_too_so_fp32_bounds_do_not_collapse() -> None:
    """An fp32 reference on CUDA is naive in fp32 itself: err(naive) = 0 and the bound a bare 1e-5 floor."""
    import dataclasses

    import torch

    from attnbench import inputs as inputs_mod
    from attnbench.check import max_abs_error

    cpu = make_case(dtype="float32", seq_len=512, heads=2, kv_heads=2, head_dim=64, causal=True)
    cuda = dataclasses.replace(cpu, device="cuda")  # the reference's precision must not depend on the device
    inputs = inputs_mod.make_inputs(cpu)
    ref = inputs_mod.reference(cuda, inputs, None)
    assert ref.out.dtype == torch.float64
    naive = inputs_mod.blocked_attention(cuda, inputs, None, False)
    assert max_abs_error(naive.out, ref.out) > 0  # an fp32 reference would make this exactly 0


class Progress:
    """A listener that writes down what the CLI would draw."""

    def __init__(self) -> None:
        self.lines: list[tuple] = []

    def started(self, index: int, total: int, case, backend) -> None:  # type: ignore[no-untyped-def]
        self.lines.append(("started", index, total, case.seq_len, backend.name))

    def finished(self, record: Record) -> None:
        self.lines.append(("finished", record.seq_len, record.backend, record.status))


def test_listener_hears_each_measurement_in_order_and_the_count_is_returned() -> None:
    naive = default_registry().get("naive")
    progress = Progress()
    runner = Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE, listener=progress)
    records: list[Record] = []
    done = runner.run([make_case(seq_len=16), make_case(seq_len=32)], [naive, OutOfMemory()], records.append)
    assert done == 4
    assert progress.lines == [
        ("started", 0, 4, 16, "naive"), ("finished", 16, "naive", "ok"),
        ("started", 1, 4, 16, "faulty-oom"), ("finished", 16, "faulty-oom", "oom"),
        ("started", 2, 4, 32, "naive"), ("finished", 32, "naive", "ok"),
        ("started", 3, 4, 32, "faulty-oom"), ("finished", 32, "faulty-oom", "skipped"),  # pruned after the oom
    ]
    stopped = Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE, should_stop=lambda: len(records) >= 5)
    assert stopped.run([make_case(seq_len=16)], [naive, naive], records.append) == 1


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
    runner = Runner(RunInfo("r", "unit"), ClockTimer(), ONE_SAMPLE)
    with pytest.raises(KeyboardInterrupt):
        runner.run_tasks([(make_case(seq_len=16), default_registry().get("naive"))], lambda r: None, measurer)
    assert measurer.calls == ["abort"]


def test_setup_is_the_whole_prepare_with_the_parts_the_backend_reports() -> None:
    """A backend whose prepare takes 30 ms, 10 of them a reported compile: setup_ms covers all of it, outside the
    samples, and the part not reported is `other`."""
    import time

    from attnbench.backends.base import Prepared
    from attnbench.backends.testing import FaultyBackend

    class SlowToPrepare(FaultyBackend):
        name = "slow-to-prepare"

        def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
            prepared = super().prepare(case, q, k, v)
            time.sleep(0.03)
            prepared.extra["compile_s"] = 0.01
            return prepared

    record = Runner(RunInfo("s", "t"), ScriptedTimer([1.0] * 5), ONE_SAMPLE).measure(
        CaseData(make_case()), SlowToPrepare())
    assert record.status == "ok", record.reason
    setup, parts = record.extra["setup_ms"], record.extra["setup_parts"]
    assert 30 <= setup < 1000 and parts["compile"] == pytest.approx(10.0)
    assert parts["other"] == pytest.approx(setup - 10.0) and parts["other"] >= 20
    assert record.time_ms == 1.0  # the samples are the timer's alone
