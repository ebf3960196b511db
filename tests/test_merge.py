"""Merging shard runs: the merged run holds exactly the unsharded run's measurements, once each; overlapping shards,
mixed devices and mixed schema versions are refused with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnbench.records.results import load_records
from attnbench.run import session
from attnbench.run.options import RunOptions
from tests.test_shard import SUITE, invoke


@pytest.fixture(scope="module")
def shard_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """tests/test_shard.py's suite (18 measurements: six cases, three backends) run once as shards 0/2 and 1/2, into
    s0 and s1 of the folder returned with the suite; each test merges its own copies."""
    runs = tmp_path_factory.mktemp("shard-runs")
    suite = runs / "shards.yaml"
    suite.write_text(SUITE)
    for i in range(2):
        result = invoke("run", suite, "--shard", f"{i}/2", "--out", runs / f"s{i}", "--no-report")
        assert result.exit_code == 0, result.output
    return suite, runs


@pytest.fixture
def suite(shard_runs: tuple[Path, Path], tmp_path: Path) -> Path:
    """The shard suite, its two shard runs copied into this test's s0 and s1."""
    suite, runs = shard_runs
    for i in range(2):
        shutil.copytree(runs / f"s{i}", tmp_path / f"s{i}")
    return suite


@pytest.mark.slow
def test_shards_merge_into_the_unsharded_key_set_and_overlaps_are_refused(suite: Path, tmp_path: Path) -> None:
    for i in range(2):
        assert json.loads((tmp_path / f"s{i}" / "env.json").read_text())["shard"] == f"{i}/2"
    sizes = [len(load_records(tmp_path / f"s{i}")) for i in range(2)]
    assert sum(sizes) == 18 and min(sizes) > 0
    merged = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "all")
    assert merged.exit_code == 0, merged.output
    plan = session.plan(suite, RunOptions(device="cpu"))
    records = load_records(tmp_path / "all")
    assert sorted(r.key for r in records) == sorted(session.task_key(*t) for t in plan.tasks())
    assert (tmp_path / "all" / "report.html").is_file()
    env = json.loads((tmp_path / "all" / "env.json").read_text())
    assert [m["shard"] for m in env["merged_from"]] == ["0/2", "1/2"]

    twice = invoke("merge", tmp_path / "s0", tmp_path / "s0", "--out", tmp_path / "dup")
    assert twice.exit_code == 2 and "both hold" in twice.output and "the shards overlap" in twice.output
    assert not (tmp_path / "dup" / "results.jsonl").exists(), "nothing written when refused"
    again = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "all")
    assert again.exit_code == 2 and "already holds results.jsonl" in again.output


@pytest.mark.slow
def test_merge_refuses_mixed_devices_and_schema_versions(suite: Path, tmp_path: Path) -> None:
    env_file = tmp_path / "s1" / "env.json"
    env = json.loads(env_file.read_text())
    env_file.write_text(json.dumps({**env, "device_name": "NVIDIA H100 80GB HBM3"}))
    mixed = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "m1")
    assert mixed.exit_code == 2 and "runs on different devices" in mixed.output and "H100" in mixed.output
    env_file.write_text(json.dumps(env))
    results = tmp_path / "s1" / "results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps({**r, "schema_version": 0}) + "\n" for r in lines))
    old = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "m2")
    assert old.exit_code == 2 and "mixed schema versions 0" in old.output
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m2").exists()
