"""The history store: the committed reports as its first history, trends with library changes, plots, and
compare --against history."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.history.store import Store, add_runs, default_path
from attnbench.history.trend import trends, version_changes
from attnbench.records.results import load_records
from attnbench.report.history_plot import change_positions, file_name
from tests.helpers import committed_runs

ROOT = Path(__file__).resolve().parent.parent
# Every committed run at the top of reports/ (CPU) or in a run/ folder there (H200).
COMMITTED = committed_runs("*", "*/run")
H200_LAST = ROOT / "reports" / "NVIDIA-H200-20261130-012712" / "run"
H200_FIRST = ROOT / "reports" / "NVIDIA-H200-first-run" / "run"
PAIR = dict(backends=["sdpa-cudnn"], cases=["*-s16384-h16-kv16-d128-causal-fwd"])  # a glob: not fwd_bwd


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=240)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh store holding every committed run."""
    db = tmp_path_factory.mktemp("history") / "history.sqlite"
    assert all(done.added for done in add_runs(COMMITTED, db))
    return db


def newer_torch(tmp_path: Path) -> Path:
    """The last H200 run again as if it ran a day later on torch 2.12 with flash-attn installed."""
    copy = tmp_path / "newer"
    shutil.copytree(H200_LAST, copy)
    env = json.loads((copy / "env.json").read_text())
    env.update(run_id="newer0000000", timestamp="2026-12-01T10:00:00+00:00", torch="2.12.0+cu130")
    env["libraries"].update(torch="2.12.0", **{"flash-attn": "2.8.3"})
    (copy / "env.json").write_text(json.dumps(env))
    records = [dict(r.to_dict(), run_id="newer0000000") for r in load_records(copy)]
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return copy


@pytest.mark.slow
def test_the_committed_reports_are_the_first_history(store: Path) -> None:
    assert len(COMMITTED) == 12
    with Store(store, create=False) as held:
        runs = held.runs()
        assert [r.run_id for r in runs] == ["a9d1b0bac54f", "093d64bb0106", "6275c2881691", "72df0c1bdf00",
                                            "2be845dab6aa", "eedc31c87e98", "6eaefdd7ede0", "d075629ca15a",
                                            "4ee8da8435ec", "883b5e24df33", "6515269bfe0d",
                                            "6a0067a09b02"]  # oldest first
        by_id = {r.run_id: r for r in runs}
        last = by_id["72df0c1bdf00"]
        assert (last.device, last.device_name, last.suite) == ("cuda", "NVIDIA H200", "gpu-check")
        assert last.versions["torch"] == "2.11.0+cu130" and last.versions["cudnn"] == 91900
        assert last.versions["driver"] == "580.159.04" and last.versions["xformers"] == "0.0.35"
        assert last.git_commit == "32d911d570f298df2ee726879b13509529fc18bc-dirty"
        assert last.clocks is not None and last.clocks[0]["clocks_locked"] is False
        assert last.clocks[0]["sm_clock_app_mhz"] == 1980
        assert by_id["eedc31c87e98"].clocks is None  # a CPU has no clock state
        for path in COMMITTED:
            records = load_records(path)
            pairs = {(r.case_id, r.backend) for r in records}
            assert len(held.records(records[0].run_id)) == len(pairs)
        version = held.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == ("1",)


def test_adding_a_run_twice_is_a_no_op(store: Path) -> None:
    before = sqlite3.connect(store).execute("SELECT count(*) FROM records").fetchone()
    again = add_runs([H200_FIRST], store)
    assert [(a.added, a.records) for a in again] == [(False, 0)]
    assert sqlite3.connect(store).execute("SELECT count(*) FROM records").fetchone() == before
    result = invoke("history", "add", H200_FIRST, "--db", store)
    assert result.exit_code == 0 and "already held: a9d1b0bac54f" in result.output


def test_the_default_store_is_under_the_users_data_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "attnbench" / "history.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "share" / "attnbench" / "history.sqlite"
    result = invoke("history", "add", H200_FIRST)
    assert result.exit_code == 0 and (tmp_path / "home" / ".local" / "share" / "attnbench" / "history.sqlite").is_file()


def test_a_foreign_or_newer_store_is_refused_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.commit()
    result = invoke("history", "add", H200_FIRST, "--db", foreign)
    assert result.exit_code == 2 and "not an attnbench history store" in result.output
    newer = tmp_path / "newer.sqlite"
    add_runs([H200_FIRST], newer)
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    result = invoke("history", "show", "--db", newer)
    assert result.exit_code == 2 and "history store schema 2, this attnbench reads 1" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert invoke("history", "show", "--db", tmp_path / "none.sqlite").exit_code == 2
    assert not (tmp_path / "none.sqlite").exists()


def test_show_gives_each_run_of_a_pair_with_its_interval(store: Path) -> None:
    result = invoke("history", "show", "--db", store, "--backend", "sdpa-cudnn", "--case", PAIR["cases"][0])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "│" in line and line.split("│")[2].strip()]
    assert len(lines) == 4
    # Four H200 runs timed it: the first flagged noisy (~, its interval computed from its samples), three throttled (!).
    assert [line.split("│")[4].strip() for line in lines[:4]] == [
        "~1.8 [1.79, 1.99]", "!1.92 [1.91, 1.94]", "!1.94 [1.88, 2]", "!1.9 [1.89, 1.91]"]
    assert "1.069×" in lines[1] and "(apart)" not in lines[1]  # 1.8 -> 1.92, intervals overlapping


def test_show_of_a_cpu_run_names_its_cpu_and_calls_nothing_a_gpu(store: Path) -> None:
    result = invoke("history", "show", "--db", store, "--gpu", "*EPYC*", "--backend", "sdpa")
    assert result.exit_code == 0, result.output
    assert "EPYC" in result.output and "GPU" not in result.output


def test_a_library_change_is_marked_in_show_and_in_the_plot(store: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    shutil.copy(store, db)
    add_runs([newer_torch(tmp_path)], db)
    with Store(db, create=False) as held:
        [trend] = trends(held, **PAIR)
    assert [p.run.run_id for p in trend.points][-2:] == ["72df0c1bdf00", "newer0000000"]
    assert trend.points[-1].changes == ("torch 2.11.0+cu130 → 2.12.0+cu130", "flash-attn 2.8.3 (new)")
    assert all(p.changes == () for p in trend.points[:-1])
    assert change_positions(trend) == [(3.5, "torch 2.11.0+cu130 → 2.12.0+cu130; flash-attn 2.8.3 (new)")]
    shown = invoke("history", "show", "--db", db, *("--backend", "sdpa-cudnn"), "--case", PAIR["cases"][0])
    assert "torch 2.11.0+cu130 → 2.12.0+cu130" in shown.output
    plotted = invoke("history", "plot", "--db", db, "--backend", "sdpa-cudnn",
                     "--case", "*-s16384-h16-kv16-d128-causal-fwd*", "--out", tmp_path / "plots")
    assert plotted.exit_code == 0 and "wrote 2 PNGs" in plotted.output  # fwd and fwd_bwd
    with Image.open(tmp_path / "plots" / file_name(trend)) as image:
        assert image.size == (900, 500)


def test_version_changes_name_what_was_installed_and_removed() -> None:
    assert version_changes({"torch": "2.11", "xformers": "0.0.35"}, {"torch": "2.12", "flash-attn": "2.8.3"}) == (
        "torch 2.11 → 2.12", "flash-attn 2.8.3 (new)", "xformers 0.0.35 (removed)")
    assert version_changes({"torch": "2.11"}, {"torch": "2.11"}) == ()


@pytest.mark.slow
def test_plot_skips_pairs_never_timed_and_refuses_when_nothing_is(store: Path, tmp_path: Path) -> None:
    result = invoke("history", "plot", "--db", store, "--backend", "flash-attn", "--out", tmp_path / "p")
    assert result.exit_code == 2 and "no timed record" in result.output  # skipped on every run: not installed


def test_compare_against_history_takes_the_latest_earlier_run_of_the_gpu_not_itself(store: Path) -> None:
    result = invoke("compare", "--against", "history", H200_LAST, "--db", store)
    assert result.exit_code == 0, result.output
    assert "base: history 6275c2881691 (2026-11-30T01:22:46+00:00" in result.output  # the run six minutes before
    assert "72df0c1bdf00" not in result.output.split("base:")[1].splitlines()[0]


def test_compare_against_history_says_when_there_is_no_earlier_comparable_run(store: Path) -> None:
    first = invoke("compare", "--against", "history", H200_FIRST, "--db", store)
    assert first.exit_code == 2 and "no run of cuda 'NVIDIA H200' started before a9d1b0bac54f" in first.output
    # The CPU documents run came earlier on the same CPU, but shares no measurement with the long run.
    cpu = invoke("compare", "--against", "history", ROOT / "reports" / "cpu-AMD-EPYC-2core-long", "--db", store)
    assert cpu.exit_code == 2 and "shares a measurement" in cpu.output


def test_compare_keeps_base_new_and_refuses_the_wrong_count(store: Path) -> None:
    both = invoke("compare", ROOT / "reports" / "NVIDIA-H200-20261130-012030" / "run", H200_LAST)
    assert both.exit_code == 0
    assert invoke("compare", H200_LAST).exit_code == 2
    assert invoke("compare", "--against", "history", H200_FIRST, H200_LAST, "--db", store).exit_code == 2
    assert invoke("compare", "--against", "yesterday", H200_LAST).exit_code == 2


def test_compare_against_history_says_when_the_software_changed_since(store: Path, tmp_path: Path) -> None:
    """The stored run's env.json is kept: a NEW run on another torch is said to be other software and judged raw."""
    upgraded = tmp_path / "upgraded"
    shutil.copytree(H200_LAST, upgraded)
    env = json.loads((upgraded / "env.json").read_text())
    (upgraded / "env.json").write_text(json.dumps(dict(env, torch="2.12.0+cu130")))
    result = invoke("compare", "--against", "history", upgraded, "--db", store)
    assert "NOT THE SAME SOFTWARE: torch: 2.11.0+cu130 vs 2.12.0+cu130" in result.output
