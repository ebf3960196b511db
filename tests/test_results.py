"""The record store (attnbench.records.results): the loader reads every schema version, relabelled by its real shape."""

from __future__ import annotations

from pathlib import Path

from attnbench.records.results import SCHEMA_VERSION, load_records

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
