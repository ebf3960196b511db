"""The run's terminal tables (attnbench.cli.tables): what a user reads when a run ends."""

from __future__ import annotations

from tests.helpers import make_case


def test_the_run_summary_marks_a_throttled_median() -> None:
    from rich.console import Console

    from attnbench.cli.tables import print_summary
    from attnbench.records.results import Record

    case = make_case(device="cuda").fields()
    record = Record(run_id="r", suite="s", timestamp="t", backend="sdpa", status="ok", time_ms=1.0, time_ms_iqr=0.01,
                    throttled=True, case_id="c", **case)
    console = Console(record=True, width=200)
    print_summary([record, Record(**{**record.to_dict(), "backend": "naive", "throttled": False})], console)
    text = console.export_text()
    assert "!1.000" in text and text.count("!1.000") == 1
    assert "! before a median: timed on a throttled or shared GPU" in text
