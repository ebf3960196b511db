"""The committed runs under reports/ (reports/README.md's rule): every results file is compressed, nothing a report
renders is committed, a committed run re-renders through `attnbench report` without one committed byte changing, and
the repository's tracked files stay under 20 MB. Every committed run loads: tests/test_record_type.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.results import COMPRESSED_RESULTS_FILE, RESULTS_FILE, load_records
from tests.helpers import REPORTS, ROOT, committed_runs

TREE_LIMIT_BYTES = 20_000_000  # a newcomer's clone, and the working tree a lent GPU machine receives (64 MiB at most)
RENDERED = (".html", ".png", ".svg", ".jpg", ".jpeg", ".gif", ".pdf")  # what a report or a chart writes
GZIP_MAGIC = b"\x1f\x8b"
RERENDERED = REPORTS / "NVIDIA-H200-20261204-c671d98" / "check"  # the newest GPU run, its 196 records

needs_git = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="a copy without .git: no list of tracked files")


def tracked(*paths: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", *paths], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split("\0") if name]


@needs_git
def test_every_committed_results_file_is_gzip() -> None:
    files = tracked("reports")
    assert [f for f in files if PurePosixPath(f).name == RESULTS_FILE] == [], \
        "compress a committed run's results: gzip -9n reports/<run>/results.jsonl (reports/README.md)"
    compressed = [ROOT / f for f in files if PurePosixPath(f).name == COMPRESSED_RESULTS_FILE]
    assert len(compressed) == len(committed_runs()) > 100
    not_gzip = [str(p) for p in compressed if p.open("rb").read(2) != GZIP_MAGIC]
    assert not_gzip == []


@needs_git
def test_nothing_a_report_renders_is_committed_under_reports() -> None:
    rendered = [f for f in tracked("reports") if f.lower().endswith(RENDERED)]
    assert rendered == [], "attnbench report draws these again from the records; remove them (reports/README.md)"


@needs_git
def test_the_tracked_tree_is_under_20_mb() -> None:
    sizes = {f: os.lstat(ROOT / f).st_size for f in tracked() if os.path.lexists(ROOT / f)}
    total = sum(sizes.values())
    largest = ", ".join(f"{f} {n / 1e6:.1f} MB" for f, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
    assert total < TREE_LIMIT_BYTES, f"tracked files: {total / 1e6:.1f} MB, over 20 MB; the largest: {largest}"


@pytest.mark.slow
def test_a_committed_run_re_renders_into_its_rendered_folder_and_no_committed_byte_changes(tmp_path: Path) -> None:
    """The H200 gpu-check run, copied as it is committed, re-rendered by the command a reader types."""
    run = Path(shutil.copytree(RERENDERED, tmp_path / "check"))
    committed = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert Path(COMPRESSED_RESULTS_FILE) in committed and Path("summary.md") in committed
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and "rendered" not in p.parts} \
        == committed
    records = load_records(run)
    summary = (run / "rendered" / "summary.md").read_text(encoding="utf-8")
    assert f"{len(records)} records" in summary and "NVIDIA H200" in summary and len(records) == 196
    assert "NVIDIA H200" in (run / "rendered" / "report.html").read_text(encoding="utf-8")
    assert sorted((run / "rendered" / "charts").glob("group-*.png")), "a chart per case group"
