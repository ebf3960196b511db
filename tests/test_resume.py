"""Resume: a run killed halfway is finished with exactly the measurements it lacks."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.results import load_records
from attnbench.run import session
from attnbench.run.options import RunOptions

ROOT = Path(__file__).parent.parent
SUITE = """\
name: resumable
device: cpu
backends: [naive, sdpa-math]
timing: {warmup_ms: 5, budget_ms: 200, min_samples: 2}
sweep:
  seq_len: [64, 96, 128, 160, 192]
  heads: [2]
  head_dim: [16]
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "resumable.yaml"
    path.write_text(SUITE)
    return path


def start(suite: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnbench", "run", str(suite), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_records(out: Path, n: int, proc: subprocess.Popen) -> None:
    results, deadline = out / "results.jsonl", time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.read_text().count("\n") >= n:
            return
        time.sleep(0.02)
    pytest.fail(f"the run never wrote {n} records (exit {proc.poll()})")


def planned_keys(suite: Path) -> list[tuple]:
    return sorted(session.task_key(*t) for t in session.plan(suite, RunOptions(device="cpu")).tasks())


@pytest.mark.slow
def test_resume_after_sigkill_completes_exactly_the_missing_measurements(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = start(suite, out)
    wait_for_records(out, 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with (out / "results.jsonl").open("a") as file:  # as if the kill had cut a record in half
        file.write('{"schema_version": 1, "backend": "na')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = len(load_records(out))
    assert 3 <= before < 10
    result = CliRunner().invoke(app, ["run", str(suite), "--resume", str(out)])
    assert result.exit_code == 0, result.output
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cut line is gone: every line is a whole record
        records = load_records(out)
    keys = [r.key for r in records]
    assert Counter(keys).most_common(1)[0][1] == 1, "no measurement twice"
    assert sorted(keys) == planned_keys(suite), "the union is the full run"
    assert len({r.run_id for r in records}) == 1, "one run, continued"
    env = json.loads((out / "env.json").read_text())
    assert env["resumed"][0]["measurements"] == 10 - before and env["resumed"][0]["already_done"] == before


@pytest.mark.slow
def test_ctrl_c_stops_after_the_current_measurement_and_prints_the_command_that_finishes_the_run(
        suite: Path, tmp_path: Path) -> None:
    """Ctrl-C stops `attnbench run` (exit 130) with every finished measurement on disk and fewer than planned, says
    so without a traceback, and prints the command that finishes the run; that command does."""
    out = tmp_path / "stopped"
    proc = start(suite, out)
    wait_for_records(out, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "stopped after" in stderr and "Traceback" not in stderr
    assert 2 <= len(load_records(out)) < len(planned_keys(suite))
    (line,) = [line for line in stderr.splitlines() if line.startswith("to finish the run: ")]
    command = shlex.split(line.removeprefix("to finish the run: "))
    assert command == ["attnbench", "run", str(suite), "--resume", str(out)]
    finished = subprocess.run([sys.executable, "-m", "attnbench", *command[1:]], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert sorted(r.key for r in load_records(out)) == planned_keys(suite)


@pytest.mark.slow
def test_resume_refuses_another_device_or_library_set_unless_forced(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    fast = suite.read_text().replace("budget_ms: 200", "budget_ms: 1").replace("[64, 96, 128, 160, 192]", "[32]")
    suite.write_text(fast)
    assert CliRunner().invoke(app, ["run", str(suite), "--out", str(out), "--no-report"]).exit_code == 0
    env_file = out / "env.json"
    env = json.loads(env_file.read_text())
    env_file.write_text(json.dumps({**env, "device_name": "NVIDIA H100 80GB HBM3",
                                    "libraries": {**env["libraries"], "torch": "2.5.1"}}))
    (out / "results.jsonl").write_text((out / "results.jsonl").read_text().splitlines()[0] + "\n")
    refused = CliRunner().invoke(app, ["run", str(suite), "--resume", str(out)])
    assert refused.exit_code == 2
    assert len(refused.output.strip().splitlines()) == 1
    assert "device_name 'NVIDIA H100 80GB HBM3' there" in refused.output and "torch 2.5.1 there" in refused.output
    assert "--force" in refused.output
    assert len(load_records(out)) == 1, "nothing appended when refused"
    forced = CliRunner().invoke(app, ["run", str(suite), "--resume", str(out), "--force", "--no-report"])
    assert forced.exit_code == 0, forced.output
    assert sorted(r.key for r in load_records(out)) == planned_keys(suite)


def test_force_without_resume_never_overwrites(suite: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "x"), "--force"])
    assert result.exit_code == 2 and "--force only applies with --resume" in result.output
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_resume_keeps_a_shard_to_its_own_part(suite: Path, tmp_path: Path) -> None:
    text = suite.read_text()
    suite.write_text(text.replace("budget_ms: 200", "budget_ms: 1").replace("warmup_ms: 5", "warmup_ms: 0"))
    out = tmp_path / "shard0"
    shard = CliRunner().invoke(app, ["run", str(suite), "--shard", "0/2", "--out", str(out), "--no-report"])
    assert shard.exit_code == 0
    before = len(load_records(out))
    whole = CliRunner().invoke(app, ["run", str(suite), "--resume", str(out)])
    assert whole.exit_code == 2
    assert "that run was shard 0/2, this one has no --shard; resume with the run's own --shard" in whole.output
    same = CliRunner().invoke(app, ["run", str(suite), "--resume", str(out), "--shard", "0/2"])
    assert same.exit_code == 0 and len(load_records(out)) == before, "a finished shard has nothing left to run"
