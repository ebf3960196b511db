"""Sharding: N shards cover every measurement once, balanced; merge rebuilds the whole run or refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench import session
from attnbench.cli import app
from attnbench.options import RunOptions
from attnbench.results import key_of, load_records
from attnbench.shard import cost, parse_shard, select

SUITE = """\
name: shards
device: cpu
backends: [naive, sdpa-math, sdpa-efficient]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 2}
sweep:
  seq_len: [32, 64, 128]
  heads: [2]
  kv_heads: [heads, 1]
  head_dim: [16]
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "shards.yaml"
    path.write_text(SUITE)
    return path


def invoke(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_shards_cover_every_measurement_once_with_balanced_cost(suite: Path) -> None:
    plan = session.plan(suite, RunOptions(device="cpu"))
    tasks = plan.tasks()
    assert len(tasks) == 6 * 3
    for count in (1, 2, 3, 5):
        shards = [select(tasks, parse_shard(f"{i}/{count}")) for i in range(count)]
        keys = [session.task_key(*t) for shard in shards for t in shard]
        assert len(keys) == len(set(keys)) == len(tasks), f"{count} shards: each measurement exactly once"
        assert [select(tasks, parse_shard(f"{i}/{count}")) for i in range(count)] == shards, "deterministic"
        for shard in shards:  # suite order kept inside a shard, so a worker reuses a case's inputs
            assert shard == [t for t in tasks if t in shard]
    loads = [sum(cost(*t) for t in select(tasks, parse_shard(f"{i}/3"))) for i in range(3)]
    assert max(loads) <= 1.5 * min(loads), loads


@pytest.mark.parametrize("text, problem", [("3/3", "I must be in 0..N-1"), ("1/0", "I must be in 0..N-1"),
                                           ("half", "expected I/N")])
def test_a_bad_shard_is_one_line(suite: Path, text: str, problem: str) -> None:
    result = invoke("run", suite, "--shard", text, "--out", suite.parent / "out")
    assert result.exit_code == 2 and problem in result.output and len(result.output.strip().splitlines()) == 1
    assert not (suite.parent / "out").exists()


def test_shards_merge_into_the_unsharded_key_set_and_overlaps_are_refused(suite: Path, tmp_path: Path) -> None:
    for i in range(2):
        result = invoke("run", suite, "--shard", f"{i}/2", "--out", tmp_path / f"s{i}")
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / f"s{i}" / "env.json").read_text())["shard"] == f"{i}/2"
    sizes = [len(load_records(tmp_path / f"s{i}")) for i in range(2)]
    assert sum(sizes) == 18 and min(sizes) > 0
    merged = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "all")
    assert merged.exit_code == 0, merged.output
    plan = session.plan(suite, RunOptions(device="cpu"))
    records = load_records(tmp_path / "all")
    assert sorted(key_of(r) for r in records) == sorted(session.task_key(*t) for t in plan.tasks())
    assert (tmp_path / "all" / "report.html").is_file()
    env = json.loads((tmp_path / "all" / "env.json").read_text())
    assert [m["shard"] for m in env["merged_from"]] == ["0/2", "1/2"]

    twice = invoke("merge", tmp_path / "s0", tmp_path / "s0", "--out", tmp_path / "dup")
    assert twice.exit_code == 2 and "both hold" in twice.output and "the shards overlap" in twice.output
    assert not (tmp_path / "dup" / "results.jsonl").exists(), "nothing written when refused"
    again = invoke("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "all")
    assert again.exit_code == 2 and "already holds results.jsonl" in again.output


def test_merge_refuses_mixed_devices_and_schema_versions(suite: Path, tmp_path: Path) -> None:
    for i in range(2):
        assert invoke("run", suite, "--shard", f"{i}/2", "--out", tmp_path / f"s{i}").exit_code == 0
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
