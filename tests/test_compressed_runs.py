"""A compressed run (results.jsonl.gz, how runs are committed under reports/) through every reader: it loads as the
plain file does, is re-rendered without its evidence being touched, and is never resumed or written into."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.core.errors import ResultsError
from attnbench.records.env import read_env
from attnbench.records.merge import merge_runs
from attnbench.records.results import load_records, results_path, stored_lines

DATA = Path(__file__).parent / "data"


def compressed(source: Path, target: Path) -> Path:
    """A copy of the run in `source` with its results gzip-compressed, as reports/ holds them."""
    target.mkdir(parents=True)
    (target / "results.jsonl.gz").write_bytes(gzip.compress((source / "results.jsonl").read_bytes(), mtime=0))
    shutil.copy(source / "env.json", target / "env.json")
    return target


def invoke(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def evidence(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


def test_a_compressed_run_loads_as_the_plain_one_by_folder_or_file(tmp_path: Path) -> None:
    run = compressed(DATA / "cpu-run", tmp_path / "run")
    plain = load_records(DATA / "cpu-run")
    assert len(plain) == 96
    assert load_records(run) == plain and load_records(run / "results.jsonl.gz") == plain
    assert results_path(run) == run / "results.jsonl.gz" and read_env(run) == read_env(DATA / "cpu-run")
    assert stored_lines(run) == [json.loads(line) for line in (DATA / "cpu-run" / "results.jsonl").open()]


def test_results_jsonl_beside_the_compressed_file_is_the_one_read(tmp_path: Path) -> None:
    """A run decompressed beside its .gz (gunzip -k) to be continued: the plain file is the live one."""
    run = compressed(DATA / "cpu-run", tmp_path / "run")
    first = (DATA / "cpu-run" / "results.jsonl").read_text().splitlines(keepends=True)[0]
    (run / "results.jsonl").write_text(first)
    assert results_path(run) == run / "results.jsonl" and len(load_records(run)) == 1


def test_a_damaged_compressed_file_is_one_line_naming_it(tmp_path: Path) -> None:
    run = compressed(DATA / "cpu-like", tmp_path / "run")
    data = (run / "results.jsonl.gz").read_bytes()
    (run / "results.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ResultsError, match=r"results.jsonl.gz: cannot be read \(Compressed file ended"):
        load_records(run)
    (run / "results.jsonl.gz").write_bytes(b"not gzip at all\n")
    result = invoke("report", run, "--format", "md")
    assert result.exit_code == 2 and "results.jsonl.gz: cannot be read (Not a gzipped file" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_report_of_a_compressed_run_goes_to_its_rendered_folder_and_touches_nothing_committed(tmp_path: Path) -> None:
    """Its summary.md is what the run's commit rendered; a re-render of today's code goes beside it, in rendered/, and
    is byte for byte the re-render of the plain file. With --out the run's own folder, the same files land there and
    the results and env.json are still untouched."""
    plain = tmp_path / "plain"
    shutil.copytree(DATA / "cpu-like", plain)
    run = compressed(DATA / "cpu-like", tmp_path / "run")
    (run / "summary.md").write_text("as committed\n")
    before = evidence(run)
    result = invoke("report", run, "--format", "md,html")
    assert result.exit_code == 0, result.output
    assert result.output.split() == [str(run / "rendered" / "report.html"), str(run / "rendered" / "summary.md")]
    assert evidence(run) == before
    assert invoke("report", plain, "--format", "md").exit_code == 0
    assert (run / "rendered" / "summary.md").read_bytes() == (plain / "summary.md").read_bytes()
    assert invoke("report", run, "--out", run, "--format", "md,html,png").exit_code == 0
    after = evidence(run)
    assert {k: after[k] for k in ("results.jsonl.gz", "env.json")} == {k: before[k] for k in ("results.jsonl.gz",
                                                                                              "env.json")}
    assert after["summary.md"] == (plain / "summary.md").read_bytes() and "report.html" in after


def test_resume_of_a_compressed_run_is_refused_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text("name: tiny\ndevice: cpu\nbackends: [naive]\nsweep: {seq_len: [32], heads: [2], head_dim: [8]}\n")
    run = compressed(DATA / "cpu-like", tmp_path / "run")
    before = evidence(run)
    result = invoke("run", suite, "--resume", run)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"error: --resume {run}: its results are compressed (results.jsonl.gz), a committed run kept read-only; " \
           f"to continue it, decompress them beside it first (gunzip -k {run / 'results.jsonl.gz'})" in \
           " ".join(result.output.split())
    assert evidence(run) == before
    out = invoke("run", suite, "--out", run, "--no-report")
    assert out.exit_code == 2 and "already holds results.jsonl.gz" in out.output and evidence(run) == before


def test_compressed_shards_merge_into_a_plain_run_and_are_never_merged_into(tmp_path: Path) -> None:
    records = (DATA / "cpu-run" / "results.jsonl").read_text().splitlines(keepends=True)
    halves = []
    for i, part in enumerate((records[::2], records[1::2])):
        folder = tmp_path / f"half{i}"
        folder.mkdir()
        (folder / "results.jsonl.gz").write_bytes(gzip.compress("".join(part).encode(), mtime=0))
        shutil.copy(DATA / "cpu-run" / "env.json", folder / "env.json")
        halves.append(folder)
    merge_runs(halves, tmp_path / "merged")
    assert (tmp_path / "merged" / "results.jsonl").is_file()
    assert {r.key for r in load_records(tmp_path / "merged")} == {r.key for r in load_records(DATA / "cpu-run")}
    again = invoke("merge", halves[0], "--out", halves[1])
    assert again.exit_code == 2 and "already holds results.jsonl.gz" in again.output
