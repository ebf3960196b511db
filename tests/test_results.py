"""The record store (attnbench.records.results): the loader reads every schema version, relabelled by its real shape,
and refuses a record that breaks its status's rule of which parts it carries (records.carries)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import pytest

from attnbench.core.errors import AttnbenchError
from attnbench.records.carries import RELEASE_FAILED, RULE, rule_problem
from attnbench.records.record import Record, Status
from attnbench.records.results import SCHEMA_VERSION, ResultsWriter, load_records, write_records_atomic
from tests.helpers import committed_runs

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def test_records_written_before_intervals_existed_load_as_schema_0() -> None:
    """The first H200 runs were labelled schema 1 but carry no interval: they are schema 0's shape. The runs after
    them carry intervals and stay 1; today's records are 2 (bytes_moved with the score traffic)."""
    first = load_records(REPORTS / "NVIDIA-H200-first-run" / "run")
    second = load_records(REPORTS / "NVIDIA-H200-20261129-225523" / "run")
    later = load_records(REPORTS / "NVIDIA-H200-20261130-012712" / "run")
    assert {r.schema_version for r in first + second} == {0}  # a run is one schema, its skips included
    assert {r.schema_version for r in later} == {1} and SCHEMA_VERSION == 2


def test_a_single_sample_carries_the_devices_run_to_run_noise_never_a_zero_width_interval() -> None:
    """One 4 s call has no interval from its samples: the record's interval is at least the device's run-to-run
    noise around it, and the record is noisy; samples that spread keep at least their own order-statistics interval."""
    from attnbench.core.interval import RUN_TO_RUN_NOISE, median_interval
    from attnbench.run.recording import timing_fields
    from attnbench.timing.timers import TimingSettings

    one = timing_fields([4000.0], TimingSettings(), "cpu")
    noise = RUN_TO_RUN_NOISE["cpu"]
    assert one["ci_low_ms"] <= 4000.0 / (1 + noise) and one["ci_high_ms"] >= 4000.0 * (1 + noise)
    assert one["ci_source"] == "windows" and one["noisy"]
    samples = [1.0, 1.2, 0.8, 1.0, 1.3, 0.7, 1.0]
    many = timing_fields(samples, TimingSettings(), "cpu")
    own = median_interval(samples)
    assert many["ci_low_ms"] <= own.low and many["ci_high_ms"] >= own.high


def measured(status: Status = Status.OK, reason: str | None = None, **fields: object) -> Record:
    """A CPU record with every part a measured one carries."""
    made = dict(run_id="r", suite="s", timestamp="t", backend="b", device="cpu", dtype="float32", batch=1,
                seq_len=4, kv_seq_len=4, heads=1, kv_heads=1, head_dim=8, causal=False, window=None, mode="fwd",
                status=status, reason=reason, kernel="k", time_ms=1.0, samples=2, times_ms=[0.9, 1.1],
                timer="perf_counter", ci_low_ms=0.9, ci_high_ms=1.1, ci_level=0.95, stop="precision",
                max_abs_error=0.0, error_bound=1e-5, rows_checked=4, memory_method="m", memory_estimate_bytes=64)
    return Record(**{**made, **fields})  # type: ignore[arg-type]


UNTIMED = dict(time_ms=None, samples=0, times_ms=[], timer=None, ci_low_ms=None, ci_high_ms=None, ci_level=None,
               stop=None)
# A record of each status that breaks its rule, and the line the loader refuses it with.
BROKEN = {
    Status.OK: (measured(**UNTIMED), "status ok without its timing"),
    Status.MISMATCH: (measured(Status.MISMATCH, "max |error| 2 exceeds bound 1", max_abs_error=None,
                               error_bound=None, rows_checked=None), "status mismatch without its correctness"),
    Status.WRONG_KERNEL: (measured(Status.WRONG_KERNEL, "ran another kernel", kernel=None),
                          "status wrong_kernel without its kernels"),
    Status.IMPLAUSIBLE: (measured(Status.IMPLAUSIBLE, "beyond the datasheet"),
                         "status implausible without its implausibility"),
    Status.SKIPPED: (measured(Status.SKIPPED, "not here"),
                     "status skipped with timing: no skipped record carries it"),
    Status.OOM: (measured(Status.OOM, "out of memory"), "status oom with timing: no oom record carries it"),
    Status.ERROR: (measured(Status.ERROR, "integrity: stale output"),
                   "status error with timing: no error record carries it"),
    Status.TIMEOUT: (measured(Status.TIMEOUT, "no result within --timeout 1 s", **UNTIMED),
                     "status timeout with correctness: no timeout record carries it"),
}


def test_every_committed_record_carries_the_parts_its_status_rule_asks() -> None:
    """The rule is the code's that makes records (run/measure.py, recording.py, isolation.py); every version's
    committed records follow it, each status that was ever committed among them."""
    broken: collections.Counter[str] = collections.Counter()
    statuses = set()
    for run in committed_runs():
        for record in load_records(run):
            statuses.add(record.status)
            problem = rule_problem(record)
            if problem:
                broken[f"{record.status} v{record.schema_version}: {problem}"] += 1
    assert broken == collections.Counter()
    assert statuses >= {Status.OK, Status.SKIPPED, Status.ERROR, Status.IMPLAUSIBLE, Status.MISMATCH,
                        Status.TIMEOUT}


def test_the_rule_states_each_status() -> None:
    assert set(RULE) == set(Status) == set(BROKEN)


@pytest.mark.parametrize("status", list(Status))
def test_a_record_breaking_its_status_rule_is_refused_in_one_line_on_loading(status: Status,
                                                                                tmp_path: Path) -> None:
    record, words = BROKEN[status]
    path = tmp_path / "results.jsonl"
    write_records_atomic(path, [measured().to_dict(), record.to_dict()])
    with pytest.raises(AttnbenchError) as refused:
        load_records(path)
    assert str(refused.value) == f"{path}:2: {words}"
    with ResultsWriter(tmp_path / "written.jsonl") as writer, pytest.raises(AttnbenchError, match=words):
        writer.append(record)
    assert (tmp_path / "written.jsonl").read_text() == ""


def test_a_timed_record_holds_the_timing_fields_of_its_schema_version(tmp_path: Path) -> None:
    """Version 1 brought the interval; a version-0 record has none and follows the rule."""
    without = measured(ci_low_ms=None, ci_high_ms=None, ci_level=None)
    assert rule_problem(without) == "status ok without its timing's ci_low_ms (schema_version 2)"
    assert rule_problem(dataclasses.replace(without, schema_version=0)) is None
    assert rule_problem(measured(times_ms=[])) == "status ok without its timing's times_ms (schema_version 2)"


def test_only_an_error_whose_memory_release_failed_after_the_measurement_keeps_its_timing() -> None:
    kept = measured(Status.ERROR, f"RuntimeError {RELEASE_FAILED}: CUDA error")
    assert rule_problem(kept) is None
    assert rule_problem(measured(Status.OK, extra={"implausible": {"compute": 5.0}})) == (
        "status ok with implausibility: no ok record carries it")
