"""The run folder (attnbench.records.folder): a new run's env.json, a resumed part's own entry, the facts each part
adds, and a damaged env.json left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.core.errors import AttnbenchError
from attnbench.records.folder import RunFolder


def written(folder: RunFolder) -> dict:
    return json.loads(folder.env_file.read_text(encoding="utf-8"))


def test_a_new_run_writes_its_env_and_notes_its_facts_at_the_top_level(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.refuse_existing()
    folder.make()
    folder.write_env({"device": "cpu", "run_id": "abc"})
    folder.note(rounds={"rounds": 2})
    folder.note(pace_probe={"median_ms": 1.0})
    assert list(written(folder)) == ["device", "run_id", "rounds", "pace_probe"]
    assert folder.part is folder.env and not list(folder.directory.glob("*.tmp"))
    run = tmp_path / "run"
    assert (folder.results, folder.traces, folder.report) == (run / "results.jsonl", run / "traces",
                                                             run / "report.html")


def test_a_resumed_part_writes_to_its_own_entry(tmp_path: Path) -> None:
    here = {"device": "cpu", "device_name": "x", "libraries": {"torch": "2"}}
    RunFolder(tmp_path).write_env({**here, "suite_name": "s", "shard": None, "run_id": "abc"})
    folder = RunFolder.resume(tmp_path, here, "s", None, force=False)
    folder.add_part({"timestamp": "t", "measurements": 3})
    folder.note(actual={"measured": 3})
    env = written(folder)
    assert env["resumed"] == [{"timestamp": "t", "measurements": 3, "actual": {"measured": 3}}]
    assert "actual" not in env and folder.part is folder.env["resumed"][-1]
    assert RunFolder.load(tmp_path).part == env["resumed"][-1]


def test_a_resume_elsewhere_is_refused_and_a_damaged_env_is_not_loaded(tmp_path: Path) -> None:
    with pytest.raises(AttnbenchError, match="no env.json there"):
        RunFolder.resume(tmp_path, {}, "s", None, force=False)
    RunFolder(tmp_path).write_env({"device": "cpu", "suite_name": "s"})
    with pytest.raises(AttnbenchError, match="suite 's' there, 't' here"):
        RunFolder.resume(tmp_path, {"device": "cpu"}, "t", None, force=False)
    (tmp_path / "env.json").write_text("{not json")
    assert RunFolder.load(tmp_path) is None and RunFolder.load(tmp_path / "absent") is None
