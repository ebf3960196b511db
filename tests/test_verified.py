"""docs/verified.md holds the figures of the H200 runs of 2026-12-04 as scripts/h200_figures.py computes them from the
committed records and logs, word for word, so the page cannot drift from the records (nor the records' reading from
the page)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "verified.md"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("h200_figures", ROOT / "scripts" / "h200_figures.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


FIGURES = _script()


@pytest.mark.parametrize("block", FIGURES.BLOCKS, ids=lambda block: block.__name__)
def test_the_page_quotes_what_the_script_computes_from_the_records(block) -> None:  # type: ignore[no-untyped-def]
    assert block() in PAGE.read_text(encoding="utf-8"), (
        f"docs/verified.md does not hold {block.__name__}'s output: run `python scripts/h200_figures.py` and put "
        f"what it prints in the page")


def test_the_check_runs_jax_cudnn_records_read_implausible_and_are_never_given_a_rate() -> None:
    row = next(line for line in FIGURES.tflops_block().splitlines() if line.startswith("| `jax-cudnn` |"))
    assert row.count("implausible") == 4 and "TFLOP" not in row
    assert "78 ok, 4 implausible, 105 skipped, 9 error" in FIGURES.runs_block()


def test_the_timer_agrees_with_do_bench_within_2_percent_in_the_same_device_call() -> None:
    gaps: dict[str, float] = {}
    for record, bench, _, same in FIGURES.do_bench_pairs():
        if same:
            gaps[record.backend] = max(gaps.get(record.backend, 0), abs(record.time_ms / bench["ms"] - 1))
    assert set(gaps) == {"sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "flash-attn-4"}
    assert max(gaps.values()) < 0.02


def test_every_backend_that_ran_names_a_declared_kernel_but_jax_cudnn() -> None:
    measured = [r for run in ("check", "fa4", "fijit/cold") for r in FIGURES.records(run)
                if r.device == "cuda" and r.status in ("ok", "implausible")]
    missing = {r.backend for r in measured if not FIGURES.declares(r)}
    assert missing == {"jax-cudnn"}
    assert len({r.backend for r in measured} - missing) == 14
