"""A run: its directory, records and env.json, as report, history, compare and recommend read it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnbench.core.errors import ResultsError
from attnbench.records.env import RunEnv, read_env
from attnbench.records.record import Record
from attnbench.records.results import load_records


def same_software(runs: list[Run], what: str = "recommend") -> None:
    """Refuse runs whose software differs in a version both name: the run-to-run noise bounds nothing across one."""
    first = runs[0]
    mine = first.env.software()
    for run in runs[1:]:
        theirs = run.env.software()
        differ = [f"{name} {mine[name]} ({first.run_id}) vs {theirs[name]} ({run.run_id})"
                  for name in mine if name in theirs and str(mine[name]) != str(theirs[name])]
        if differ:
            raise ResultsError(f"{what}: runs with different software: {'; '.join(differ)}; one table pools one "
                               "software's runs (recommend each version's runs apart; `attnbench compare` judges the "
                               "change)")


@dataclass(frozen=True)
class Run:
    """One run directory's records and environment."""

    path: Path
    run_id: str
    timestamp: str
    device: str
    device_name: str | None
    env: RunEnv
    records: list[Record]


def load_run(path: Path) -> Run:
    """A run directory (or results file) with its env.json; refused when it holds no records."""
    records = load_records(Path(path))
    if not records:
        raise ResultsError(f"{path}: holds no records")
    return run_of(Path(path), records, read_env(Path(path)))


def run_of(path: Path, records: list[Record], env: RunEnv) -> Run:
    """A Run from records already read (and their env.json, empty when none)."""
    stamps = sorted(str(r.timestamp or "") for r in records)
    return Run(Path(path), str(env.run_id or records[0].run_id or Path(path).name),
               str(env.timestamp or stamps[0]), str(env.device or records[0].device),
               env.device_name or records[0].device_name, env, records)


def load_runs(paths: list[Path], what: str = "recommend") -> list[Run]:
    """The runs at `paths`, oldest first; refused (one line) when they mix devices or GPUs, or repeat a run."""
    if not paths:
        raise ResultsError(f"{what}: name at least one run directory")
    runs = [load_run(Path(p)) for p in paths]
    seen: dict[str, Run] = {}
    for run in runs:
        if run.run_id in seen:
            raise ResultsError(f"{what}: {seen[run.run_id].path} and {run.path} are the same run ({run.run_id}); "
                               "name each run once")
        seen[run.run_id] = run
    devices = {(run.device, run.device_name) for run in runs}
    if len(devices) > 1:
        listed = ", ".join(f"{run.device} {run.device_name!r} ({run.path})" for run in runs)
        raise ResultsError(f"{what}: runs on different devices: {listed}; one table holds one device's "
                           "measurements (run it once per GPU)")
    return sorted(runs, key=lambda run: (run.timestamp, str(run.path)))


def case_name(record: Record) -> str:
    """A record's case as a name: its case_id, else its key's fields joined."""
    return str(record.case_id or "-".join(str(v) for v in record.case_key))
