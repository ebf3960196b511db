"""`compare --against history NEW`: NEW against the latest earlier run of its GPU that the history store holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from attnbench.history.store import Store
from attnbench.records.env import machine_differences, software_differences
from attnbench.records.run import load_run
from attnbench.stats.compare import Comparison, compare_records


def compare_with_history(new: Path, db: Path | None, threshold: float, relative: bool = True) -> Comparison:
    """Compare the run at `new` with the latest earlier run of its device and GPU that shares a measurement."""
    run = load_run(Path(new))
    with Store(db, create=False) as store:
        base = store.latest_comparable(run)
        records = store.records(base.run_id)
        base_env = store.env(base.run_id)
    label = f"history {base.run_id} ({base.timestamp}, from {base.source})"
    comparison = compare_records(records, run.records, label, str(new), threshold)
    return replace(comparison, machine_notes=machine_differences(base_env, run.env),
                   software_notes=software_differences(base_env, run.env), relative=relative)
