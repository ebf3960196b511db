"""Non-repeatability where a reader looks: a findings line and a ≠ in the tables of report.html and summary.md, and
compare naming a measurement that turned non-repeatable (a failure where NEW asked for deterministic kernels)."""

from __future__ import annotations

import html
import json
import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.backends.registry import default_registry
from attnbench.records.parts import Timing
from attnbench.records.results import ResultsWriter
from attnbench.report.compare_table import comparison_markdown, comparison_table
from attnbench.report.render import render_report
from attnbench.report.rows import COLUMNS
from attnbench.stats.compare import Cause, Reason, Verdict, compare_runs
from tests.helpers import make_case, run_cases
from tests.test_repeat import flaky

DATA = Path(__file__).parent / "data"
BASE = DATA / "compare-base"


def small_run(directory: Path, deterministic: bool = False) -> Path:
    """naive and a backend that adds 1e-6 to its output on every other call, on two lengths."""
    directory.mkdir(parents=True)
    cases = [make_case(seq_len=s, causal=True) for s in (32, 64)]
    with ResultsWriter(directory / "results.jsonl") as writer:
        run_cases(cases, [default_registry().get("naive"), flaky(1e-6)], writer.append)
    (directory / "env.json").write_text(json.dumps({"suite_name": "planted", "deterministic": deterministic}))
    return directory


@pytest.mark.slow
def test_the_report_names_each_non_repeatable_record_and_marks_it(tmp_path: Path) -> None:
    run = small_run(tmp_path / "run")
    render_report(run, formats=("html", "md"))
    summary = (run / "summary.md").read_text()
    assert ("- 2 of 4 compared measurements were not repeatable: two calls on the same inputs gave different "
            "bits") in summary
    assert re.search(r"- Not repeatable: flaky on .*seq 32.*: out differs by up to 1(\.0+)?e-06 between two calls\.",
                     summary), summary
    rows = [line for line in summary.splitlines() if line.startswith("| flaky |")]
    assert len(rows) == 2 and all("| ok ≠ |" in row for row in rows)
    assert all("≠" not in line for line in summary.splitlines() if line.startswith("| naive |"))
    page = html.unescape((run / "report.html").read_text())
    assert "2 of 4 compared measurements were not repeatable" in page
    rows = json.loads(re.search(r'id="records-data">(.*?)</script>', page, re.S).group(1))
    status = [k for k, _, _ in COLUMNS].index("status")
    assert sorted(row[3][status] for row in rows) == ["ok", "ok", "ok ≠", "ok ≠"]
    assert {row[0] for row in rows if row[3][status] == "ok ≠"} == {"flaky"}


@pytest.mark.slow
def test_deterministic_runs_say_what_the_backends_made_of_it(tmp_path: Path) -> None:
    run = small_run(tmp_path / "run")
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    for record in lines:  # as a run that asked would have stored them
        record["extra"]["deterministic"] = "not applicable (a test)" if record["backend"] == "naive" else "honoured (x)"
    untimed = {k: v for k, v in lines[0].items() if k not in {f.name for f in fields(Timing)}}  # a skip has none
    lines.append({**untimed, "backend": "refusing", "status": "skipped", "repeatable": None, "extra": {},
                  "reason": "deterministic asked, refused: refusing does not say"})
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    render_report(run, formats=("md",))
    assert ("- Deterministic kernels were asked for: 2 measurements honoured it, 2 needed nothing (no atomics, or "
            "forward only), 1 were skipped: the backend or PyTorch refused.") in (run / "summary.md").read_text()


def turned(tmp_path: Path, deterministic: bool) -> Path:
    """compare-base with every record repeatable, and its copy whose first record's two calls differed."""
    def copy(target: Path, first_differs: bool) -> Path:
        shutil.copytree(BASE, target)
        records = [json.loads(line) for line in (target / "results.jsonl").read_text().splitlines()]
        for i, record in enumerate(records):
            record["repeatable"] = record["status"] in ("ok", "mismatch") or None
            if i == 0 and first_differs:
                record["repeatable"] = False
                record["extra"] = {**record.get("extra", {}), "repeat_max_diff": 0.0039, "repeat_tensor": "dq",
                                   **({"deterministic": "honoured (x)"} if deterministic else {})}
        (target / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return target

    copy(tmp_path / "base", False)
    return copy(tmp_path / "new", True)


def test_compare_names_a_measurement_that_turned_non_repeatable(tmp_path: Path) -> None:
    new = turned(tmp_path, deterministic=False)
    result = compare_runs(tmp_path / "base", new)
    (match,) = result.turned_unrepeatable
    assert match.new_repeat == "dq by up to 0.0039" and not result.determinism_broken
    assert result.verdict == Verdict.PASSED  # a kernel that promises nothing may agree by luck on one run, not the next
    text = comparison_markdown(result)
    assert "**pass**: 0 regression(s), 0 new failure(s), 0 improvement(s), 0 fixed, 1 turned non-repeatable." in text
    assert "### Turned non-repeatable" in text and "| dq by up to 0.0039 | no |" in text
    console = Console(record=True, width=200)
    console.print(comparison_table(result))
    assert re.search(r"not repeatable .* dq by up to 0\.0039", console.export_text())
    assert compare_runs(tmp_path / "base", tmp_path / "base").turned_unrepeatable == []
    assert compare_runs(new, tmp_path / "base").turned_unrepeatable == []  # back to repeatable is no finding


def test_compare_fails_when_a_deterministic_run_turned_non_repeatable(tmp_path: Path) -> None:
    result = compare_runs(tmp_path / "base", turned(tmp_path, deterministic=True))
    assert len(result.determinism_broken) == 1 and result.reasons == (Reason(Cause.DETERMINISM_BROKEN, 1),)
    assert result.verdict == Verdict.BROKE
    text = comparison_markdown(result)
    assert text.count("**FAIL**") == 1 and "1 turned non-repeatable (1 asked for deterministic kernels)" in text
    assert "| yes: fails |" in text
