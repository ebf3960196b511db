"""A run directory's paths and the one writer of its env.json, each write atomic (write_json_atomic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.core.errors import AttnbenchError
from attnbench.records.env import RunEnv, load_env
from attnbench.records.files import write_json_atomic
from attnbench.records.record import Record
from attnbench.records.results import (
    ENV_FILE,
    RESULTS_FILE,
    is_compressed,
    refuse_existing,
    write_records_atomic,
)
from attnbench.records.resume import check_compatible, done_keys, drop_cut_line, read_run_env, refuse_compressed

TRACES_DIR = "traces"  # --trace's
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.md"
CHARTS_DIR = "charts"
RENDERED_DIR = "rendered"  # a compressed run's report, unless --out says where


def report_directory(results: Path) -> Path:
    """Where `attnbench report` writes unless told: beside a run's results.jsonl; in a compressed run's rendered/,
    so that what was committed with it (its summary.md) stays as it was taken."""
    return results.parent / RENDERED_DIR if is_compressed(results) else results.parent


class RunFolder:
    """A run directory and its env.json as held here. `part`: where this part of the run notes what it did (a
    resumed part's own entry, else the env)."""

    def __init__(self, directory: Path, env: dict[str, Any] | None = None) -> None:
        self.directory = Path(directory)
        self.env: dict[str, Any] = env if env is not None else {}

    @property
    def env_file(self) -> Path:
        return self.directory / ENV_FILE

    @property
    def results(self) -> Path:
        """Where this run's records are written (results.jsonl, never the compressed file)."""
        return self.directory / RESULTS_FILE

    @property
    def traces(self) -> Path:
        return self.directory / TRACES_DIR

    @property
    def report(self) -> Path:
        return self.directory / REPORT_FILE

    @property
    def summary(self) -> Path:
        return self.directory / SUMMARY_FILE

    @property
    def charts(self) -> Path:
        return self.directory / CHARTS_DIR

    @property
    def facts(self) -> RunEnv:
        return RunEnv.from_dict(self.env)

    @property
    def part(self) -> dict[str, Any]:
        return self.env["resumed"][-1] if self.env.get("resumed") else self.env

    @classmethod
    def resume(cls, directory: Path, here: dict[str, Any], suite_name: str, shard: str | None,
               force: bool) -> RunFolder:
        """The run in `directory`, refused when compressed (refuse_compressed) or recorded elsewhere
        (check_compatible)."""
        refuse_compressed(Path(directory))
        recorded = read_run_env(Path(directory))
        check_compatible(Path(directory), recorded, RunEnv.from_dict(here), suite_name, shard, force)
        return cls(directory, dict(recorded.raw))

    @classmethod
    def load(cls, directory: Path) -> RunFolder | None:
        """The run in `directory`; None when load_env refuses its env.json."""
        folder = cls(directory)
        try:
            folder.env = dict(load_env(folder.env_file, str(folder.env_file), "missing", "not a JSON object").raw)
        except AttnbenchError:
            return None
        return folder

    def refuse_existing(self, hint: str = "") -> None:
        refuse_existing(self.directory, hint)

    def make(self) -> None:
        """An OSError is the caller's to word."""
        self.directory.mkdir(parents=True, exist_ok=True)

    def write_env(self, env: dict[str, Any]) -> None:
        self.env = env
        write_json_atomic(self.env_file, env)

    def add_part(self, entry: dict[str, Any]) -> None:
        """A resumed part's entry, appended to `resumed`: it becomes `part`."""
        self.env.setdefault("resumed", []).append(entry)
        self.write_env(self.env)

    def note(self, **facts: Any) -> None:
        self.part.update(facts)
        self.write_env(self.env)

    def drop_cut_line(self) -> bool:
        return drop_cut_line(self.results)

    def done_keys(self) -> set[tuple]:
        return done_keys(self.directory)

    def write_records(self, records: list[Record]) -> None:
        write_records_atomic(self.results, [r.to_dict() for r in records])
