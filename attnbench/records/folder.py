"""A run folder: one run directory's paths (env.json, results.jsonl, traces/, the report) and the one writer of its
env.json. Each write replaces the file whole (temporary name, fsync, rename): a kill leaves it whole or as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnbench.records.files import write_json_atomic
from attnbench.records.record import Record
from attnbench.records.results import ENV_FILE, RESULTS_FILE, refuse_existing, write_records_atomic
from attnbench.records.resume import check_compatible, done_keys, drop_cut_line, read_run_env

TRACES_DIR = "traces"  # one Chrome trace per measurement with --trace (attnbench.run.profiled)
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.md"
CHARTS_DIR = "charts"


class RunFolder:
    """A run directory and its env.json as this process holds it. `part` is where this part of the run writes what
    it did: a resumed part's own entry under `resumed`, else the env itself."""

    def __init__(self, directory: Path, env: dict[str, Any] | None = None) -> None:
        self.directory = Path(directory)
        self.env: dict[str, Any] = env if env is not None else {}

    @property
    def env_file(self) -> Path:
        return self.directory / ENV_FILE

    @property
    def results(self) -> Path:
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
    def part(self) -> dict[str, Any]:
        return self.env["resumed"][-1] if self.env.get("resumed") else self.env

    @classmethod
    def resume(cls, directory: Path, here: dict[str, Any], suite_name: str, shard: str | None,
               force: bool) -> RunFolder:
        """The run in `directory` with its recorded env.json, refused when it was recorded on another machine,
        library set, suite or shard (check_compatible) unless forced."""
        folder = cls(directory, read_run_env(Path(directory)))
        check_compatible(folder.directory, folder.env, here, suite_name, shard, force)
        return folder

    @classmethod
    def load(cls, directory: Path) -> RunFolder | None:
        """The run in `directory` with its env.json; None when that cannot be read as JSON."""
        folder = cls(directory)
        try:
            folder.env = json.loads(folder.env_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return folder

    def refuse_existing(self, hint: str = "") -> None:
        """Refused when the directory already holds results: a run never writes over them."""
        refuse_existing(self.directory, hint)

    def make(self) -> None:
        """Create the directory (and its parents); an OSError is the caller's to word."""
        self.directory.mkdir(parents=True, exist_ok=True)

    def write_env(self, env: dict[str, Any]) -> None:
        """Hold `env` as the run's and write it to env.json."""
        self.env = env
        write_json_atomic(self.env_file, env)

    def add_part(self, entry: dict[str, Any]) -> None:
        """Append a resumed part's entry to `resumed` (it becomes `part`) and write env.json."""
        self.env.setdefault("resumed", []).append(entry)
        self.write_env(self.env)

    def note(self, **facts: Any) -> None:
        """Add facts of this part of the run (`part`) and write env.json."""
        self.part.update(facts)
        self.write_env(self.env)

    def drop_cut_line(self) -> bool:
        """Remove a last results line cut off by a kill (resume.drop_cut_line); whether there was one."""
        return drop_cut_line(self.results)

    def done_keys(self) -> set[tuple]:
        """The keys of the measurements the results already hold."""
        return done_keys(self.directory)

    def write_records(self, records: list[Record]) -> None:
        """Write the whole results file at once (a merge, an A/B side)."""
        write_records_atomic(self.results, [r.to_dict() for r in records])
