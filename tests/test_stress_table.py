"""scripts/stress_table.py: the verdict table of a stress run, and docs/results.md "Numerics stress" holding the table
of the committed CPU run (reports/cpu-AMD-EPYC-2core-stress) as the script prints it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from attnbench.records.results import stored_lines

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "reports" / "cpu-AMD-EPYC-2core-stress"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("stress_table", ROOT / "scripts" / "stress_table.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _record(backend: str, status: str, inputs: str | None = None, error: float | None = 0.5, **extra: object) -> dict:
    return {"backend": backend, "dtype": "float16", "inputs": inputs, "status": status, "max_abs_error": error,
            "error_bound": 1.0, "extra": extra, "case_id": f"cpu-fp16-{inputs or 'randn'}", "reason": "why"}


def test_a_cell_shows_the_worst_status_its_largest_share_of_the_bound_and_a_dtype_that_cannot_hold_it() -> None:
    table = _script().table([
        _record("k", "ok", "sink", 0.2), _record("k", "mismatch", "sink", 3.0),
        _record("k", "ok", "large_logits", 0.1, naive_relative_error=0.4),
        _record("k", "mismatch", "outliers", None, nonfinite=True), _record("k", "skipped", "denormal", None),
    ])
    row = next(line for line in table.splitlines() if line.startswith("| k |"))
    cells = [c.strip() for c in row.strip("|").split("|")][2:]
    kinds = ("randn", "outliers", "sink", "large_logits", "shifted_keys", "near_constant", "denormal")
    by = dict(zip(kinds, cells, strict=False))
    assert by == {"randn": "—", "outliers": "mismatch NaN", "sink": "mismatch 3.00", "large_logits": "ok 0.10 †",
                  "shifted_keys": "—", "near_constant": "—", "denormal": "—"}
    assert "- `k` on `cpu-fp16-sink`: mismatch, why" in table


def test_the_manual_holds_the_committed_runs_table() -> None:
    records = stored_lines(RUN)
    docs = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert _script().table(records) in docs
