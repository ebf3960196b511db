"""The history store: every added run's records and environment in one SQLite file (docs/history.md). A run is
keyed by its run_id, a record by (run_id, case_id, backend); a store written by a newer attnbench is refused."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnbench.core.errors import AttnbenchError
from attnbench.records.env import RunEnv
from attnbench.records.record import Record, upgrade
from attnbench.records.run import Run, case_name, load_run

STORE_VERSION = 1
# Each GPU's clock state when the run started (env.json's gpu_state).
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
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "attnbench" / "history.sqlite"


@dataclass(frozen=True)
class StoredRun:

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
    added: bool  # False: the store already held this run_id
    records: int  # records written: those the store did not hold, or held older
    known: bool = False


# How long a command waits for another's write before it gives up.
BUSY_SECONDS = 60.0


class Store:
    """An open history store (a context manager). Every write is one immediate transaction, so concurrent commands
    serialise on the file's lock; any damage SQLite reports is one user error, and a damaged store is never written."""

    def __init__(self, path: Path | None = None, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.damaged = False
        if not self.path.exists() and not create:
            raise AttnbenchError(f"{self.path}: no history store here; add runs first with "
                                 f"`attnbench history add RUN_DIR...`")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # no implicit transactions: each write says BEGIN IMMEDIATE itself
            self.db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
        except OSError as exc:
            raise AttnbenchError(f"{self.path}: cannot open the history store ({exc.strerror})") from None
        except sqlite3.Error as exc:
            raise AttnbenchError(f"{self.path}: cannot open the history store ({exc})") from None
        try:
            self._check_or_create()
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise self.fault(exc) from None
        except AttnbenchError:
            self.db.close()
            raise

    def _tables(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _check_or_create(self) -> None:
        found = [str(row[0]) for row in self.db.execute("PRAGMA quick_check(5)")]
        if found != ["ok"]:  # damage anywhere is refused before any use
            raise sqlite3.DatabaseError("PRAGMA quick_check found damage")
        tables = self._tables()
        if not tables:
            with self.write():  # whoever takes the lock first creates the schema
                if not self._tables():
                    for statement in SCHEMA.split(";\n"):  # not executescript: it would commit first
                        if statement.strip():
                            self.db.execute(statement)
                    self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(STORE_VERSION),))
            tables = self._tables()
        if "meta" not in tables:
            raise AttnbenchError(f"{self.path}: not an attnbench history store: an SQLite file with other tables "
                                 f"({', '.join(sorted(tables))})")
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version != STORE_VERSION:
            raise AttnbenchError(f"{self.path}: history store schema {version}, this attnbench reads "
                                 f"{STORE_VERSION}; use the attnbench that wrote it, or start another with --db")

    @contextmanager
    def write(self) -> Iterator[None]:
        """One immediate transaction (the lock taken before anything is read), committed or rolled back whole."""
        if self.damaged:
            raise AttnbenchError(f"{self.path}: the history store was found damaged; nothing more is written to it")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self.db.in_transaction:
                self.db.rollback()
            raise
        self.db.commit()

    def integrity(self) -> list[str]:
        """PRAGMA integrity_check's ['ok'], or up to 5 problems."""
        try:
            check = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_SECONDS)
            try:
                # each finding on one line, without '*** in database main ***'
                return [" ".join(str(row[0]).replace("*** in database main ***", "").split())
                        for row in check.execute("PRAGMA integrity_check(5)")]
            finally:
                check.close()
        except sqlite3.Error as exc:
            return [str(exc)]

    def fault(self, exc: BaseException) -> AttnbenchError:
        """The one user error for an exception SQLite (or a stored record) raised."""
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return AttnbenchError(f"{self.path}: the history store stayed locked by another command for "
                                  f"{BUSY_SECONDS:.0f} s; nothing was written, try again")
        self.damaged = True
        found = self.integrity()
        said = "ok" if found == ["ok"] else "; ".join(found)
        return AttnbenchError(f"{self.path}: the history store is damaged ({exc}); PRAGMA integrity_check says: "
                              f"{said}. Nothing was written; keep a copy, restore it from a backup or start "
                              "another with --db")

    def check(self) -> tuple[int, int]:
        """(runs, records) when PRAGMA integrity_check finds the store whole, else one user error."""
        found = self.integrity()
        if found != ["ok"]:
            self.damaged = True
            raise AttnbenchError(f"{self.path}: the history store is damaged; PRAGMA integrity_check says: "
                                 f"{'; '.join(found)}")
        try:
            return (self.db.execute("SELECT count(*) FROM runs").fetchone()[0],
                    self.db.execute("SELECT count(*) FROM records").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise self.fault(exc) from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.close()
        # Whatever SQLite raised inside the block is one line.
        if isinstance(exc, (sqlite3.DatabaseError, json.JSONDecodeError, UnicodeDecodeError)):
            raise self.fault(exc) from None

    def add(self, run: Run) -> Added:
        """Add a run and the records the store does not hold, or holds older (a resumed run)."""
        env = run.env
        clocks = [{k: state.get(k) for k in CLOCK_FIELDS} for state in env.gpu_state or []
                  if isinstance(state, dict)] or None
        latest: dict[tuple[str, str], Record] = {}
        for record in run.records:  # a repeated measurement's last record stands for it
            latest[(case_name(record), record.backend)] = record
        lines = {key: json.dumps(r.to_dict()) for key, r in latest.items()}
        try:
            with self.write():
                known = self.db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone() is not None
                held = {} if not known else {(case, backend): text for case, backend, text in self.db.execute(
                    "SELECT case_id, backend, record FROM records WHERE run_id = ?", (run.run_id,))}
                fresh = [key for key in latest if key not in held or held[key] != lines[key] and newer(
                    latest[key], Record.from_dict(json.loads(held[key])))]
                if known and not fresh:
                    return Added(run, False, 0, known=True)
                self.db.execute(
                    "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run.run_id, run.timestamp, run.device, run.device_name, env.suite_name
                     or run.records[0].suite, str(run.path.resolve()), datetime.now(timezone.utc).isoformat(
                         timespec="seconds"), env.git_commit, json.dumps(env.versions()),
                     json.dumps(clocks) if clocks else None, json.dumps(env.raw, default=str)))
                self.db.executemany(
                    "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(run.run_id, case, backend, str(latest[(case, backend)].status),
                      latest[(case, backend)].time_ms, latest[(case, backend)].ci_low_ms,
                      latest[(case, backend)].ci_high_ms, lines[(case, backend)]) for case, backend in fresh])
        except sqlite3.DatabaseError as exc:
            raise self.fault(exc) from None
        return Added(run, not known, len(fresh), known=known)

    def runs(self) -> list[StoredRun]:
        """Every run, oldest first."""
        rows = self.db.execute("SELECT run_id, timestamp, device, device_name, suite, source, git_commit, versions, "
                               "clocks FROM runs ORDER BY timestamp, run_id").fetchall()
        return [StoredRun(*row[:7], json.loads(row[7]), json.loads(row[8]) if row[8] else None) for row in rows]

    def records(self, run_id: str) -> list[Record]:
        """One run's records, upgraded as the loader does."""
        return upgrade([json.loads(row[0]) for row in
                        self.db.execute("SELECT record FROM records WHERE run_id = ? ORDER BY rowid", (run_id,))])

    def env(self, run_id: str) -> RunEnv:
        """The env.json a stored run was added with (empty when none)."""
        row = self.db.execute("SELECT env FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return RunEnv.from_dict(json.loads(row[0]) if row and row[0] else {})

    def pairs(self) -> Iterator[tuple[str, str, str, str]]:
        yield from self.db.execute("SELECT r.run_id, runs.device_name, r.case_id, r.backend FROM records r "
                                   "JOIN runs USING (run_id)")

    def latest_comparable(self, new: Run) -> StoredRun:
        """The latest run before `new` on the same device and GPU that shares a measurement with it; one user error
        when there is none."""
        mine = {(case_name(r), r.backend) for r in new.records}
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


def newer(record: Record, held: Record) -> bool:
    """Whether a record measured no earlier than the one the store holds for its pair."""
    return str(record.timestamp or "") >= str(held.timestamp or "")


def add_runs(paths: list[Path], db: Path | None = None) -> list[Added]:
    """Load every run first (nothing is written when one is not a run), then add each."""
    runs = [load_run(Path(p)) for p in paths]
    with Store(db) as store:
        return [store.add(run) for run in runs]
