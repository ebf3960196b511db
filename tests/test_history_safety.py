"""The history store under concurrency and damage: first uses racing from many processes, the same run added at
once, damage deep in the file, and a resumed run's records updating the run the store already holds."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.history.store import Store, add_runs
from attnbench.records.results import load_records

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
RUNS = [REPORTS / "cpu-AMD-EPYC-2core-documents", REPORTS / "cpu-AMD-EPYC-2core-long",
        REPORTS / "NVIDIA-H200-first-run" / "run", REPORTS / "NVIDIA-H200-20261129-225523" / "run"]
WORKERS = 6


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=240)


def pairs_of(run: Path) -> int:
    return len({(r.case_id, r.backend) for r in load_records(run)})


def _add_at_barrier(index: int, barrier: Any, paths: list[str], runs: list[str], results: Any) -> None:
    """One process: for each store, wait until every process is ready, then add its run (one process per run)."""
    outcomes = []
    for path in paths:
        barrier.wait()
        try:
            done = add_runs([Path(run) for run in runs], Path(path))
            outcomes.append([(d.added, d.records) for d in done])
        except Exception as exc:  # the failure is the finding: report it rather than die
            outcomes.append(f"{type(exc).__name__}: {exc}")
    results.put((index, outcomes))


def race(paths: list[Path], runs_per_worker: list[list[Path]]) -> list[list[Any]]:
    """Each worker process adds its runs to each store in turn, all workers released at once per store."""
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
    barrier = context.Barrier(len(runs_per_worker))
    results = context.Queue()
    workers = [context.Process(target=_add_at_barrier, args=(i, barrier, [str(p) for p in paths],
                                                              [str(r) for r in runs], results))
               for i, runs in enumerate(runs_per_worker)]
    for worker in workers:
        worker.start()
    outcomes = dict(results.get(timeout=240) for _ in workers)  # in the order they finish: put back in theirs
    for worker in workers:
        worker.join(timeout=60)
    return [outcomes[i] for i in range(len(workers))]


@pytest.mark.slow
def test_first_uses_of_a_new_store_from_many_processes_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"fresh{i}.sqlite" for i in range(12)]
    small = RUNS[0]
    outcomes = race(paths, [[small]] * WORKERS)
    failures = [o for worker in outcomes for o in worker if isinstance(o, str)]
    assert failures == []  # before: "not an attnbench history store (table meta already exists)", "schema 0"
    for path in paths:
        with Store(path, create=False) as store:
            assert [r.run_id for r in store.runs()] == ["2be845dab6aa"]
            assert len(store.records("2be845dab6aa")) == pairs_of(small)
    # Of the six processes adding the same run to each fresh store, exactly one added it.
    for i in range(len(paths)):
        assert sorted(worker[i][0] for worker in outcomes) == [(False, 0)] * (WORKERS - 1) + [(True, pairs_of(small))]


@pytest.mark.slow
def test_the_same_run_and_different_runs_added_at_once_all_land(tmp_path: Path) -> None:
    paths = [tmp_path / f"store{i}.sqlite" for i in range(4)]
    for path in paths:  # an existing store: the race is in the adds, not the schema
        add_runs([RUNS[0]], path)
    # Two processes per run, each run added by both at once, every process releasing together.
    per_worker = [[RUNS[1]], [RUNS[1]], [RUNS[2]], [RUNS[2]], [RUNS[3]], [RUNS[3]]]
    outcomes = race(paths, per_worker)
    failures = [o for worker in outcomes for o in worker if isinstance(o, str)]
    assert failures == []  # before: sqlite3.IntegrityError: UNIQUE constraint failed: runs.run_id
    for i, path in enumerate(paths):
        for run in RUNS[1:]:
            both = [worker[i][0] for worker, runs in zip(outcomes, per_worker, strict=False) if runs == [run]]
            assert sorted(both) == [(False, 0), (True, pairs_of(run))]
        total = sum(pairs_of(run) for run in RUNS)
        assert sqlite3.connect(path).execute("SELECT count(*) FROM records").fetchone() == (total,)


def damaged_store(tmp_path: Path, offset_fraction: float) -> Path:
    """A store of four runs with 4 KiB in its data pages flipped (every bit of it)."""
    db = tmp_path / f"damaged-{offset_fraction}.sqlite"
    add_runs(RUNS, db)
    data = bytearray(db.read_bytes())
    start = int(len(data) * offset_fraction) // 4096 * 4096
    data[start:start + 4096] = bytes(b ^ 0xFF for b in data[start:start + 4096])
    db.write_bytes(bytes(data))
    return db


@pytest.mark.parametrize("where", [0.3, 0.5, 0.8])
def test_damage_deep_in_a_store_is_one_line_and_nothing_is_written(tmp_path: Path, where: float) -> None:
    db = damaged_store(tmp_path, where)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for args in (("history", "show"), ("history", "check"), ("history", "add", REPORTS / "cpu-AMD-EPYC-2core-long"),
                 ("history", "add", REPORTS / "NVIDIA-H200-20261130-012030" / "run"),
                 ("compare", "--against", "history", REPORTS / "NVIDIA-H200-20261130-012030" / "run")):
        result = invoke(*args, "--db", db)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code == 2, (args, result.output)
        [line] = result.output.strip().splitlines()
        assert str(db) in line and "integrity_check says" in line, line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # never written once damage is seen


def test_check_says_ok_with_the_size_of_a_whole_store(tmp_path: Path) -> None:
    db = tmp_path / "whole.sqlite"
    add_runs(RUNS[:2], db)
    result = invoke("history", "check", "--db", db)
    records = pairs_of(RUNS[0]) + pairs_of(RUNS[1])
    assert result.exit_code == 0 and f"{db}: ok (2 runs, {records} records)" in result.output
    assert invoke("history", "check", "--db", tmp_path / "none.sqlite").exit_code == 2


def partial_then_resumed(tmp_path: Path) -> tuple[Path, Path]:
    """A run cut after half its records, and the same run resumed: the rest appended, one record redone later."""
    full = RUNS[1]
    records = [r.to_dict() for r in load_records(full)]
    partial, resumed = tmp_path / "partial", tmp_path / "resumed"
    for folder, lines in ((partial, records[: len(records) // 2]), (resumed, records)):
        folder.mkdir()
        shutil.copy(full / "env.json", folder / "env.json")
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    redo = dict(records[0], timestamp="2099-01-01T00:00:00+00:00", time_ms=123.0)
    with open(resumed / "results.jsonl", "a") as file:
        file.write(json.dumps(redo) + "\n")
    return partial, resumed


def test_a_resumed_run_updates_the_partial_run_the_store_holds(tmp_path: Path) -> None:
    partial, resumed = partial_then_resumed(tmp_path)
    db = tmp_path / "h.sqlite"
    [first] = add_runs([partial], db)
    assert (first.added, first.records) == (True, pairs_of(partial))
    result = invoke("history", "add", resumed, "--db", db)
    assert result.exit_code == 0 and "updated eedc31c87e98" in result.output, result.output
    with Store(db, create=False) as store:
        held = store.records("eedc31c87e98")
    assert len(held) == pairs_of(resumed)  # before: the partial run's half, forever
    first_record = load_records(resumed)[0]
    redone = [r for r in held if r.case_id == first_record.case_id and r.backend == first_record.backend]
    assert [r.time_ms for r in redone] == [123.0]  # the newer record of the pair stands
    again = add_runs([resumed], db)
    assert [(a.added, a.records) for a in again] == [(False, 0)]  # the same records again: nothing written
    older = add_runs([partial], db)  # the partial copy holds an older record of the redone pair: kept as it is
    assert [(a.added, a.records) for a in older] == [(False, 0)]
