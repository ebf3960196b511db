"""The history store: every added run's records and environment in one SQLite file (stdlib sqlite3).

Where: `--db FILE`, else $XDG_DATA_HOME/attnbench/history.sqlite, else ~/.local/share/attnbench/history.sqlite.
A run is keyed by its run_id and a record by (run_id, case_id, backend): adding a run twice is a no-op. The
store's schema version is in its `meta` table; a store written by a newer attnbench is refused, never altered.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from attnbench.core.errors import AttnbenchError
from attnbench.report.pooling import Run, case_name, load_run, versions_of

STORE_VERSION = 1
# What each GPU's clock state was when the run started (env.json's gpu_state), kept beside the versions.
CLOCK_FIELDS = ("index", "name", "sm_clock_mhz", "sm_clock_app_mhz", "sm_clock_max_mhz", "clocks_locked",
                "power_limit_w", "persistence_mode", "clock_event_reasons", "throttled")
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    timestamp TEXT NOT NULL,      -- when the run started (env.json)
    device TEXT NOT NULL,         -- cuda or cpu
    device_name TEXT,             -- the GPU's (or CPU's) name
    suite TEXT,
    source TEXT NOT NULL,         -- the directory it was added from
    added_at TEXT NOT NULL,
    git_commit TEXT,              -- attnbench's commit that ran it
    versions TEXT NOT NULL,       -- JSON: torch, cuda, cudnn, driver and every library installed
    clocks TEXT,                  -- JSON: each GPU's clock state before the run (CLOCK_FIELDS), null on CPU
    env TEXT NOT NULL             -- env.json as it was read
);
CREATE TABLE records (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    case_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    time_ms REAL,
    ci_low_ms REAL,
    ci_high_ms REAL,
    record TEXT NOT NULL,         -- the record as results.jsonl holds it
    PRIMARY KEY (run_id, case_id, backend)
);
CREATE INDEX records_by_pair ON records (case_id, backend);
"""


def default_path() -> Path:
    """$XDG_DATA_HOME/attnbench/history.sqlite, else ~/.local/share/attnbench/history.sqlite."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "attnbench" / "history.sqlite"


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it."""

    run_id: str
    timestamp: str
    device: str
    device_name: str | None
    suite: str | None
    source: str
    git_commit: str | None
    versions: dict[str, Any]
    clocks: list[dict[str, Any]] | None


@dataclass(frozen=True)
class Added:
    """What `add` did with one run."""

    run: Run
    added: bool  # False: the store already held this run_id (nothing was written)
    records: int


class Store:
    """An open history store. Use as a context manager, or call close()."""

    def __init__(self, path: Path | None = None, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_path()
        if not self.path.exists() and not create:
            raise AttnbenchError(f"{self.path}: no history store here; add runs first with "
                                 f"`attnbench history add RUN_DIR...`")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
            self._check_or_create()
        except sqlite3.DatabaseError as exc:
            raise AttnbenchError(f"{self.path}: not an attnbench history store ({exc})") from None
        except OSError as exc:
            raise AttnbenchError(f"{self.path}: cannot open the history store ({exc.strerror})") from None

    def _check_or_create(self) -> None:
        tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with self.db:
                self.db.executescript(SCHEMA)
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(STORE_VERSION),))
            return
        if "meta" not in tables:
            raise AttnbenchError(f"{self.path}: an SQLite file that is not an attnbench history store "
                                 f"(tables: {', '.join(sorted(tables))})")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version != STORE_VERSION:
            raise AttnbenchError(f"{self.path}: history store schema {version}, this attnbench reads "
                                 f"{STORE_VERSION}; use the attnbench that wrote it, or start another with --db")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, run: Run) -> Added:
        """Append a run and its records; a run_id already held is left as it is."""
        if self.db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
            return Added(run, False, 0)
        env = run.env
        clocks = [{k: state.get(k) for k in CLOCK_FIELDS} for state in env.get("gpu_state") or []
                  if isinstance(state, dict)] or None
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for record in run.records:  # a run that repeated a measurement: its last record stands for it
            latest[(case_name(record), str(record["backend"]))] = record
        with self.db:
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run.run_id, run.timestamp, run.device, run.device_name, env.get("suite_name")
                 or run.records[0].get("suite"), str(run.path.resolve()), datetime.now(timezone.utc).isoformat(
                     timespec="seconds"), env.get("git_commit"), json.dumps(versions_of(env)),
                 json.dumps(clocks) if clocks else None, json.dumps(env, default=str)))
            self.db.executemany(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(run.run_id, case, backend, r["status"], r.get("time_ms"), r.get("ci_low_ms"), r.get("ci_high_ms"),
                  json.dumps(r)) for (case, backend), r in latest.items()])
        return Added(run, True, len(latest))

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        rows = self.db.execute("SELECT run_id, timestamp, device, device_name, suite, source, git_commit, versions, "
                               "clocks FROM runs ORDER BY timestamp, run_id").fetchall()
        return [StoredRun(*row[:7], json.loads(row[7]), json.loads(row[8]) if row[8] else None) for row in rows]

    def records(self, run_id: str) -> list[dict[str, Any]]:
        """One run's records, as results.jsonl held them."""
        return [json.loads(row[0]) for row in
                self.db.execute("SELECT record FROM records WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def pairs(self) -> Iterator[tuple[str, str, str, str]]:
        """(run_id, device_name, case_id, backend) of every stored record."""
        yield from self.db.execute("SELECT r.run_id, runs.device_name, r.case_id, r.backend FROM records r "
                                   "JOIN runs USING (run_id)")

    def latest_comparable(self, new: Run) -> StoredRun:
        """The latest run before `new` on the same device and GPU that shares a measurement with it (never `new`
        itself); one user error when there is none."""
        mine = {(case_name(r), str(r["backend"])) for r in new.records}
        for run in reversed(self.runs()):
            if run.run_id == new.run_id or run.timestamp >= new.timestamp:
                continue
            if (run.device, run.device_name) != (new.device, new.device_name):
                continue
            theirs = {(str(case), str(backend)) for case, backend in
                      self.db.execute("SELECT case_id, backend FROM records WHERE run_id = ?", (run.run_id,))}
            if mine & theirs:
                return run
        raise AttnbenchError(f"{self.path}: no run of {new.device} {new.device_name!r} started before {new.run_id} "
                             f"({new.timestamp}) shares a measurement with it; add one with "
                             "`attnbench history add RUN_DIR`")


def add_runs(paths: list[Path], db: Path | None = None) -> list[Added]:
    """Load every run first (one user error, nothing written, when one is not a run), then add each."""
    runs = [load_run(Path(p)) for p in paths]
    with Store(db) as store:
        return [store.add(run) for run in runs]
