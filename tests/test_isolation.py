"""Measurements in a worker process: a crash, an exit or a hang costs one record and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.backends.registry import default_registry
from attnbench.cli.main import app
from attnbench.records.results import Record, load_records
from attnbench.run.isolation import Isolated, WorkerConfig
from attnbench.run.recording import RunInfo
from attnbench.run.schedule import Schedule
from tests.helpers import ONE_SAMPLE, make_case

PLUGINS = ("attnbench.backends.testing:FAULTY", "attnbench.backends.testing:CRASHING")
SUITE = """\
name: faults
device: cpu
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 2, timeout_s: 3}
sweep:
  seq_len: [32]
  heads: [2]
  head_dim: [16]
"""


@pytest.mark.slow
def test_every_fault_becomes_its_record_and_the_others_are_ok(tmp_path: Path) -> None:
    """The suite's timing.timeout_s alone turns isolation on for a CPU run."""
    suite = tmp_path / "faults.yaml"
    suite.write_text(SUITE)
    names = ["faulty-raise", "faulty-oom", "faulty-hang", "faulty-exit", "faulty-segfault", "faulty-wrong",
             "naive", "sdpa"]
    args = ["run", str(suite), "--out", str(tmp_path / "out"), "--no-report"]
    for spec in PLUGINS:
        args += ["--plugin", spec]
    for name in names:
        args += ["--backend", name]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # the planted mismatch
    records = {r.backend: r for r in load_records(tmp_path / "out")}
    assert [records[n].status for n in names] == ["error", "oom", "timeout", "error", "error", "mismatch",
                                                     "ok", "ok"]
    assert records["faulty-raise"].reason == "ValueError: planted failure in the faulty backend"
    assert records["faulty-hang"].reason == "no result within --timeout 3 s; the worker was killed"
    assert records["faulty-exit"].reason == ("worker process exited with code 3; "
                                                "last stderr: planted exit in the faulty backend")
    segfault = records["faulty-segfault"].reason
    assert segfault.startswith("worker process was killed by signal SIGSEGV (11); last stderr: ")
    assert "Fatal Python error: Segmentation fault" in segfault
    for name in ("naive", "sdpa"):
        assert records[name].time_ms > 0
        assert records[name].case_id == "cpu-fp32-b1-s32-h2-kv2-d16-full-fwd"


@pytest.mark.slow
def test_the_worker_lives_on_after_an_exception_and_is_replaced_after_an_exit() -> None:
    registry = default_registry(list(PLUGINS))
    info = RunInfo("r", "unit", "cpu")
    isolated = Isolated(WorkerConfig(info, "cpu", ONE_SAMPLE, PLUGINS), timeout_s=60)
    case, other = make_case(seq_len=32), make_case(seq_len=48)
    tasks = [(case, registry.get(name)) for name in ("faulty-raise", "naive", "faulty-exit", "naive")]
    tasks.append((other, registry.get("sdpa")))
    records: list[Record] = []
    Schedule(info).run(tasks, lambda case, record: records.append(record), isolated)
    assert [r.status for r in records] == ["error", "ok", "error", "ok", "ok"]
    assert isolated.started == 2, "one worker until the exit, a fresh one after it"
    assert records[4].seq_len == 48 and records[4].backend == "sdpa"


@pytest.mark.slow
def test_a_fresh_workers_first_measurement_does_not_pay_the_profilers_first_use() -> None:
    """A fresh worker's first measurement pays no one-time cost of the profiler inside its time limit: the worker
    opens the profiler's first session (Kineto's start; CUPTI's on a GPU) before it says it is ready."""
    registry = default_registry([])
    info = RunInfo("r", "unit", "cpu")
    isolated = Isolated(WorkerConfig(info, "cpu", ONE_SAMPLE), timeout_s=60)
    records: list[Record] = []
    Schedule(info).run([(make_case(seq_len=32), registry.get("naive"))], lambda case, record: records.append(record),
                       isolated)
    isolated.close()
    assert records[0].status == "ok"
    assert records[0].extra["setup_parts"]["profile"] < 500, records[0].extra["setup_parts"]


def test_a_time_limit_without_isolation_is_refused(tmp_path: Path) -> None:
    suite = tmp_path / "faults.yaml"
    suite.write_text(SUITE)
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(tmp_path / "out"), "--no-isolate"])
    assert result.exit_code == 2
    assert "--timeout 3: a time limit needs a worker process to kill; drop --no-isolate" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_devices_share_one_queue_of_cases_and_one_results_file_on_the_visible_gpus(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the "devices" are fake (CUDA_VISIBLE_DEVICES is set for each worker and unused): what this
    checks is the dispatch: one worker per device, every measurement once, one results file; and under
    CUDA_VISIBLE_DEVICES=4,5 (SLURM, a shared box), --devices 0,1 measures on physical 4 and 5."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    suite = tmp_path / "four.yaml"
    suite.write_text(SUITE.replace("seq_len: [32]", "seq_len: [16, 32, 48, 64]").replace(", timeout_s: 3", ""))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(out), "--no-report", "--devices", "0,1",
                                      "--backend", "naive", "--backend", "sdpa"])
    assert result.exit_code == 0, result.output
    records = load_records(out)
    assert sorted((r.seq_len, r.backend) for r in records) == sorted(
        (s, b) for s in (16, 32, 48, 64) for b in ("naive", "sdpa"))
    assert {r.status for r in records} == {"ok"}
    by_case: dict[int, set[str]] = {}
    for r in records:
        by_case.setdefault(r.seq_len, set()).add(r.extra["gpu"])
    assert all(len(gpus) == 1 for gpus in by_case.values()), "a case's backends stay on one worker"
    assert set().union(*by_case.values()) == {"4", "5"}, "both workers took cases, each on its physical GPU"
