"""core.policy: every text that states a threshold is made from the table, so a change of it changes them all."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.core import policy
from attnbench.records.results import open_results, results_path
from attnbench.report.html import how_to_read
from attnbench.report.render import render_report

QUICK = Path(__file__).parents[1] / "reports" / "cpu-Intel-Xeon-2core-quick"


def test_the_report_states_the_precision_the_device_is_held_to() -> None:
    legend = " ".join(how_to_read())
    assert "±10% on a CPU, ±1% on a GPU" in legend and "±1% by default" not in legend


@pytest.mark.slow
def test_a_changed_constant_changes_every_text_that_states_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cpu = dataclasses.replace(policy.DEVICES["cpu"], precision=0.07)
    monkeypatch.setitem(policy.DEVICES, "cpu", cpu)
    monkeypatch.setattr(policy, "NOISE_THRESHOLD", 0.13)
    monkeypatch.setattr(policy, "CHANGE_THRESHOLD", 0.21)
    legend = " ".join(how_to_read())
    assert "±7% on a CPU" in legend and "over 13% of its median" in legend and "(21% by default)" in legend
    assert "| cpu | ±7% |" in policy.policy_table()
    out = tmp_path / "run"
    out.mkdir()
    with open_results(results_path(QUICK)) as results:
        (out / "results.jsonl").write_bytes(results.read())
    (out / "env.json").write_bytes((QUICK / "env.json").read_bytes())
    render_report(out)
    assert "IQR over 13% of the median" in (out / "summary.md").read_text()


def test_compare_help_states_the_threshold_in_force() -> None:
    """The CLI reads the table when it is built: a patched threshold shows in --help's default."""
    script = ("import attnbench.core.policy as p; p.CHANGE_THRESHOLD = 0.21\n"
              "from typer.testing import CliRunner\nfrom attnbench.cli.main import app\n"
              "print(CliRunner().invoke(app, ['compare', '--help'], env={'COLUMNS': '200'}).output)")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "21%" in shown and json.dumps("10%") not in shown


def test_a_suite_without_timing_settings_takes_the_devices_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.sweep.suite import load_suite

    monkeypatch.setitem(policy.DEVICES, "cpu", dataclasses.replace(policy.DEVICES["cpu"], precision=0.07, rounds=5))
    timing = load_suite(Path(__file__).parents[1] / "suites" / "quick.yaml").timing("cpu")
    assert (timing.precision, timing.rounds) == (0.07, 5)


def test_the_verdicts_page_shows_the_table_in_force() -> None:
    """docs/verdicts.md's copy of the policy table is the table the code judges by (a changed figure fails here)."""
    page = (Path(__file__).parents[1] / "docs" / "verdicts.md").read_text(encoding="utf-8")
    shown = page.split("<!-- policy-table")[1].split("-->", 1)[1].split("<!-- /policy-table -->")[0].strip()
    assert shown == policy.policy_table()


def test_the_conventions_state_the_events_rule_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/conventions.md's statement of the events-against-host rule is the one the code judges by; a changed
    share or factor changes the text (and fails here until the page follows)."""
    page = (Path(__file__).parents[1] / "docs" / "conventions.md").read_text(encoding="utf-8")
    shown = " ".join(page.split("<!-- bracket-rule -->")[1].split("<!-- /bracket-rule -->")[0].split())
    assert shown == policy.bracket_words()
    assert "under 10% of the host's time" in shown and "within 2x an empty pair's time" in shown
    monkeypatch.setattr(policy, "EVENTS_SHARE", 0.2)
    monkeypatch.setattr(policy, "EMPTY_PAIR_FACTOR", 3.0)
    assert "under 20% of the host's time" in policy.bracket_words() and "within 3x" in policy.bracket_words()
