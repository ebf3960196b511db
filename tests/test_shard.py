"""Sharding: N shards cover every measurement once, balanced (merging them back is tests/test_merge.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.run import session
from attnbench.run.options import RunOptions
from attnbench.run.shard import cost, parse_shard, select

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
