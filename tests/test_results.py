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
    assert {r["schema_version"] for r in first + second} == {0}  # a run is one schema, its skips included
    assert {r["schema_version"] for r in later} == {1} and SCHEMA_VERSION == 2


def test_a_single_sample_carries_the_devices_run_to_run_noise_never_a_zero_width_interval() -> None:
    """One 4 s call has no interval from its samples: the record's interval is the device's run-to-run noise
    around it, and ci_source says so; six samples or more keep their own order-statistics interval."""
    from attnbench.core.interval import RUN_TO_RUN_NOISE
    from attnbench.run.recording import timing_fields
    from attnbench.timing.timers import TimingSettings

    one = timing_fields([4000.0], TimingSettings(), "cpu")
    noise = RUN_TO_RUN_NOISE["cpu"]
    assert (one["ci_low_ms"], one["ci_high_ms"], one["ci_source"]) == (4000.0 * (1 - noise), 4000.0 * (1 + noise),
                                                                       "run-to-run noise")
    assert one["noisy"] and one["ci_high_ms"] - one["ci_low_ms"] > 0
    many = timing_fields([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0], TimingSettings(), "cpu")
    assert many["ci_source"] == "samples" and many["ci_high_ms"] - many["ci_low_ms"] <= 0.041
