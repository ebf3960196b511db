"""The record is one type, written and read back as itself (attnbench.records.record): every committed run loads into
it and writes back what it held, the upgrade of an older line is stated here, and no reader outside attnbench/records
reads a record's field by string key."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from attnbench.core.memory_methods import STORED_RSS_ON_GPU, host_peak_on_gpu
from attnbench.records.record import BEFORE_PROFILING, Record, Status, upgrade
from attnbench.records.results import load_records, stored_lines
from tests.helpers import committed_runs

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {f.name for f in dataclasses.fields(Record)}
# The layers that read records back (or write them): every module there reads a record by its attributes.
SCANNED = ("report", "history", "cli", "cluster", "run")
# Mappings those modules read that are not records, though some of their keys are a record field's name: env.json
# (env, run.env, recorded: a resumed run's), a case group's or dispatch bucket's shape (shape, s, bucket), a dispatch
# table and its rows (data, row), an A/B summary and its rows (summary, u, m), a cluster manifest, the fields a
# record is built from before it exists (fields), the facts of an A/B side (facts), and a run's seconds by phase
# (phases, run.tally's phase names: "samples", "timer"...).
NOT_RECORDS = {"env", "run.env", "recorded", "shape", "s", "self.shape", "group.shape", "fam.shape", "g.shape",
               "bucket", "data", "row", "summary", "u", "m", "manifest", "fields", "facts", "phases"}


def string_key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of each read `X["field"]` and `X.get("field", ...)` whose key is a Record field and X is no
    mapping of NOT_RECORDS (a write `X["field"] = ...` builds a record's fields: no record is read)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.ctx, ast.Load):
            key, receiver = node.slice.value, node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            key, receiver = node.args[0].value, node.func.value
        else:
            continue
        name = _name(receiver)
        if key in FIELDS and name not in NOT_RECORDS and not name.endswith((".env", ".phases")):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _name(receiver: ast.expr) -> str:
    """What a mapping is called: `X or {}` is X, and `Y.get("env")` or `Y["env"]` is env."""
    if isinstance(receiver, ast.BoolOp) and isinstance(receiver.op, ast.Or):
        return _name(receiver.values[0])
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and receiver.func.attr == "get" \
            and receiver.args and isinstance(receiver.args[0], ast.Constant):
        return str(receiver.args[0].value)
    if isinstance(receiver, ast.Subscript) and isinstance(receiver.slice, ast.Constant):
        return str(receiver.slice.value)
    return ast.unparse(receiver)


def test_the_scan_finds_a_string_key_read_and_passes_other_mappings() -> None:
    source = ('x = r["time_ms"]\ny = (record.get("extra") or {})\nz = (env or {}).get("device")\n'
              'w = r["median_ms"]\nv = side.get("env")["device"]\nu["time_ms"] = 1\n')
    assert [line for line, _ in string_key_reads(ast.parse(source))] == [1, 2]


def test_no_reader_outside_the_records_package_reads_a_record_field_by_string_key() -> None:
    offenders = []
    for package in SCANNED:
        for path in sorted((ROOT / "attnbench" / package).rglob("*.py")):
            for line, text in string_key_reads(ast.parse(path.read_text(encoding="utf-8"))):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert not offenders, "read the record's attribute instead:\n" + "\n".join(offenders)


@pytest.mark.slow
@pytest.mark.parametrize("path", committed_runs(), ids=lambda p: str(p.relative_to(ROOT / "reports")))
def test_every_committed_run_loads_into_the_record_and_writes_back_what_it_held(path: Path) -> None:
    lines = stored_lines(path)
    records = load_records(path)
    assert len(records) == len(lines) and all(isinstance(r, Record) for r in records)
    relabelled = {r.schema_version for r in records} != {line["schema_version"] for line in lines}
    for line, record in zip(lines, records, strict=False):
        dumped = record.to_dict()
        if host_peak_on_gpu(line["device"], line.get("memory_method")):  # a GPU peak read from host RSS: none
            assert (dumped["peak_memory_bytes"], dumped["memory_method"]) == (None, STORED_RSS_ON_GPU)
            line = {**line, "peak_memory_bytes": None, "memory_method": STORED_RSS_ON_GPU}
        # Every field the line holds survives with its value; the schema version only where the file was written
        # before intervals (labelled 1, relabelled 0: docs/results.md "Schema versions").
        held = {k: v for k, v in line.items() if k != "schema_version"}
        if record.status == "implausible" and line["status"] != "implausible":  # judged as read: a timing beyond
            held.update(status="implausible", reason=record.reason,  # physics (docs/results.md "Status")
                        extra={**line["extra"], "implausible": record.extra["implausible"]})
        assert {k: v for k, v in dumped.items() if k in line and k != "schema_version"} == held
        assert dumped["schema_version"] == (0 if relabelled else line["schema_version"])
        # The upgrade adds only fields of the record, at their defaults but for the two it computes.
        added = {k: v for k, v in dumped.items() if k not in line}
        assert set(added) <= FIELDS
        if "noisy" not in line:
            assert added["noisy"] == record.spread
        if "kernels" not in line and "kernels_reason" not in line:
            assert added["kernels_reason"] == BEFORE_PROFILING
        assert json.loads(json.dumps(dumped)) == dumped and isinstance(dumped["status"], str)
    # Loaded, written, loaded: the same records (an upgraded record upgrades to itself).
    assert upgrade([r.to_dict() for r in records]) == records


def test_the_status_is_an_enum_whose_json_is_its_word() -> None:
    record = load_records(ROOT / "tests" / "data" / "cpu-like")[0]
    assert isinstance(record.status, Status) and record.status == "ok" and f"{record.status}" == "ok"
    assert json.dumps(record.to_dict()["status"]) == '"ok"'
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = Status.ERROR  # type: ignore[misc]


def test_what_is_read_off_a_record() -> None:
    base = load_records(ROOT / "tests" / "data" / "cpu-like")[0]
    timed = dataclasses.replace(base, time_ms=1.0, time_ms_iqr=0.5, ci_low_ms=0.9, ci_high_ms=1.2, repeatable=False,
                                overhead="declared kernels 40% of the call")
    assert timed.interval == (0.9, 1.2) and dataclasses.replace(timed, ci_high_ms=None).interval is None
    assert timed.spread and not dataclasses.replace(timed, time_ms_iqr=0.01).spread
    assert timed.unrepeatable and not dataclasses.replace(timed, repeatable=None).unrepeatable
    assert timed.kernel_trouble == "overhead"
    assert dataclasses.replace(timed, status=Status.WRONG_KERNEL, reason="x").kernel_trouble == "wrong kernel"
    assert timed.key == base.key and timed.case_key == base.key[1:]
    assert {timed: 1}[dataclasses.replace(timed)] == 1  # a record keys a dict by its value


def test_a_line_without_the_noise_flag_gets_it_from_its_spread() -> None:
    line = load_records(ROOT / "tests" / "data" / "cpu-like")[0].to_dict()
    del line["noisy"]
    assert Record.from_dict({**line, "time_ms": 1.0, "time_ms_iqr": 0.5}).noisy is True
    assert Record.from_dict({**line, "time_ms": 1.0, "time_ms_iqr": 0.01}).noisy is False


def test_a_long_reason_is_cut_to_its_limit_and_says_so() -> None:
    """A library's refusal can run to pages; the record keeps MAX_REASON characters, the last one "…"."""
    from attnbench.run.recording import MAX_REASON, RunInfo, make_record
    from tests.helpers import make_case

    def reason_of(reason: str) -> str | None:
        return make_record(RunInfo("r", "t"), make_case(), "naive", "skipped", reason, {}).reason

    long = "x" * (MAX_REASON + 50)
    assert reason_of(long) == "x" * (MAX_REASON - 1) + "…"
    assert reason_of("x" * MAX_REASON) == "x" * MAX_REASON
