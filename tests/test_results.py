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
