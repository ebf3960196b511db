"""A bad line in results.jsonl (cut off, not UTF-8, not JSON, another schema, a field missing or of the wrong type)
is skipped and counted by every reader: one line on stderr naming the file and the lines, every good record kept,
the command's own exit code. A file with lines but not one record is refused: one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.results import Record, load_records, parse_record

DATA = Path(__file__).parent / "data"
GOOD = json.loads((DATA / "cpu-like" / "results.jsonl").read_text().splitlines()[0])

BAD_LINES = {
    "cut off": (b'{"schema_version": 2, "backend": "na', "a record cut off mid-write"),
    "not UTF-8": (b'{"schema_version": 2, "backend": "\xff\xfe"}', "not UTF-8 text"),
    "not JSON": (b"hello", "not a JSON record"),
    "a list": (b"[1, 2]", "not an attnbench record"),
    "NaN": (json.dumps({**GOOD, "time_ms": "@"}).replace('"@"', "NaN").encode(), "NaN is not a JSON number"),
    "newer schema": (json.dumps({**GOOD, "schema_version": 99}).encode(), "schema_version 99 is newer"),
    "field missing": (json.dumps({k: v for k, v in GOOD.items() if k != "seq_len"}).encode(),
                      "field seq_len is missing"),
    "wrong type": (json.dumps({**GOOD, "batch": "one"}).encode(), 'field batch: "one" is not int'),
    "wrong list": (json.dumps({**GOOD, "times_ms": [1.0, "x"]}).encode(), "field times_ms"),
    "size zero": (json.dumps({**GOOD, "kv_seq_len": 0}).encode(), "field kv_seq_len: 0 is not a size"),
    "unknown status": (json.dumps({**GOOD, "status": "great"}).encode(), "status 'great' is not one of"),
    "failure without a reason": (json.dumps({**GOOD, "status": "error", "reason": None}).encode(),
                                 "status error without a reason"),
}


@pytest.mark.parametrize("name", list(BAD_LINES))
def test_each_kind_of_bad_line_is_named(name: str) -> None:
    line, reason = BAD_LINES[name]
    found = parse_record(line)
    assert isinstance(found, str) and reason in found, found


def test_a_good_line_is_its_record() -> None:
    record = parse_record(json.dumps(GOOD).encode() + b"\n")
    assert isinstance(record, Record) and {k: v for k, v in record.to_dict().items() if k in GOOD} == GOOD


def damaged(tmp: Path, source: str = "cpu-like", name: str = "run") -> tuple[Path, int]:
    """A copy of a fixture run with bad lines put in as lines 3 and 7 (one cut off, one not UTF-8) and a last line
    cut off; returns it and the number of good records."""
    run = tmp / name
    shutil.copytree(DATA / source, run)
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(2, BAD_LINES["not JSON"][0] + b"\n")
    lines.insert(6, BAD_LINES["not UTF-8"][0] + b"\n")
    (run / "results.jsonl").write_bytes(b"".join(lines) + BAD_LINES["cut off"][0])
    return run, len(lines) - 2


def invoke(args: list[str]):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    return result


def skip_line(result, run: Path) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("skipped ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"skipped 3 bad line(s) of {run / 'results.jsonl'} (lines 3, 7, 27): not a JSON "
                               "record"), lines[0]
    return lines[0]


def test_the_loader_keeps_every_good_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, good = damaged(tmp_path)
    records = load_records(run)
    assert len(records) == good == 24
    assert records == load_records(DATA / "cpu-like")
    assert "skipped 3 bad line(s)" in capsys.readouterr().err


def test_report_skips_and_counts(tmp_path: Path) -> None:
    run, good = damaged(tmp_path)
    result = invoke(["report", run, "--out", tmp_path / "out", "--format", "md"])
    assert result.exit_code == 0, result.output
    skip_line(result, run)
    invoke(["report", DATA / "cpu-like", "--out", tmp_path / "clean", "--format", "md"])
    assert (tmp_path / "out" / "summary.md").read_text() == (tmp_path / "clean" / "summary.md").read_text()


@pytest.mark.slow
def test_merge_skips_and_counts(tmp_path: Path) -> None:
    run, good = damaged(tmp_path)
    result = invoke(["merge", run, "--out", tmp_path / "merged"])
    assert result.exit_code == 0, result.output
    skip_line(result, run)
    assert len(load_records(tmp_path / "merged")) == good


def test_compare_skips_and_counts(tmp_path: Path) -> None:
    run, _ = damaged(tmp_path)
    result = invoke(["compare", DATA / "cpu-like", run])
    assert result.exit_code == 0, result.output  # the same records: no regression
    skip_line(result, run)
    clean = invoke(["compare", DATA / "cpu-like", DATA / "cpu-like"])
    assert result.stdout.splitlines()[1:] == clean.stdout.splitlines()[1:]  # below the title: the same table


def test_recommend_skips_and_counts(tmp_path: Path) -> None:
    run, _ = damaged(tmp_path)
    result = invoke(["recommend", run])
    clean = invoke(["recommend", DATA / "cpu-like"])
    assert result.exit_code == clean.exit_code == 0, result.output
    skip_line(result, run)
    assert result.stdout.replace(str(run), "RUN") == clean.stdout.replace(str(DATA / "cpu-like"), "RUN")


def test_history_add_skips_and_counts(tmp_path: Path) -> None:
    run, good = damaged(tmp_path)
    result = invoke(["history", "add", run, "--db", tmp_path / "h.sqlite"])
    assert result.exit_code == 0, result.output
    skip_line(result, run)
    clean = invoke(["history", "add", DATA / "cpu-like", "--db", tmp_path / "clean.sqlite"])
    assert result.stdout.split(": ")[-1] == clean.stdout.split(": ")[-1] == "12 records\n"  # one per (case, backend)


@pytest.mark.slow
def test_resume_skips_and_counts_and_measures_what_the_bad_lines_held(tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("name: b\ndevice: cpu\nbackends: [naive]\ntiming: {warmup_ms: 0, budget_ms: 1, min_samples: 1, "
                     "max_samples: 1}\nsweep:\n  seq_len: [16, 24, 32]\n  heads: [2]\n  head_dim: [8]\n")
    out = tmp_path / "run"
    assert invoke(["run", suite, "--out", out, "--no-report"]).exit_code == 0
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    lines[1] = lines[1][:-1].replace(b'"status"', b'"statut"') + b"\n"  # the second measurement's line: no status
    (out / "results.jsonl").write_bytes(b"".join(lines))
    result = invoke(["run", suite, "--resume", out, "--no-report"])
    assert result.exit_code == 0, result.output
    assert f"skipped 1 bad line(s) of {out / 'results.jsonl'} (line 2): field status is missing" in result.stderr
    records = load_records(out)
    assert sorted(r.seq_len for r in records) == [16, 24, 32], "the bad line's measurement is made again"


@pytest.mark.parametrize("command", ["report", "merge", "compare", "recommend", "history"])
def test_a_file_without_one_record_is_refused(tmp_path: Path, command: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_bytes(b"hello\n\xff\n")
    args = {"report": ["report", run, "--out", tmp_path / "out"], "merge": ["merge", run, "--out", tmp_path / "out"],
            "compare": ["compare", run, run], "recommend": ["recommend", run],
            "history": ["history", "add", run, "--db", tmp_path / "out"]}[command]
    result = invoke(args)
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: {run / 'results.jsonl'}:1: not a JSON record (Expecting value) (and 1 "
                                     "more bad line(s)); no line of it is an attnbench record")
    assert not (tmp_path / "out").exists()
