"""A run from the user's side (attnbench.run.session): the plan decided before anything runs, the dry run's forecast,
isolation chosen per device, and what execute writes and returns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.core.errors import AttnbenchError
from attnbench.run import session
from attnbench.run.options import RunOptions
from attnbench.run.shard import parse_shard

SUITE = """name: planned
device: cpu
backends: [naive, sdpa]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep: {seq_len: [32, 64], heads: [2], kv_heads: [heads], head_dim: [16], causal: [true]}
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "planned.yaml"
    path.write_text(SUITE)
    return path


def test_the_plan_is_the_suites_cases_times_its_backends(suite: Path) -> None:
    plan = session.plan(suite, RunOptions())
    assert plan.device == "cpu" and [b.name for b in plan.backends] == ["naive", "sdpa"]
    assert [(c.seq_len, b.name) for c, b in plan.tasks()] == [(32, "naive"), (32, "sdpa"), (64, "naive"),
                                                               (64, "sdpa")]
    only = session.plan(suite, RunOptions(backends=("sdpa",)))
    assert [b.name for b in only.backends] == ["sdpa"]
    with pytest.raises(AttnbenchError, match="--backend: unknown backend 'sdpaa' \\(did you mean 'sdpa'"):
        session.plan(suite, RunOptions(backends=("sdpaa",)))
    assert session.plan(suite, RunOptions(), estimate_gpu="H100").device == "cuda"  # a GPU that is not here


def test_isolation_is_on_for_cuda_and_for_a_time_limit_and_a_limit_needs_it() -> None:
    assert session.resolve_isolation("cuda", None, None) and not session.resolve_isolation("cpu", None, None)
    assert session.resolve_isolation("cpu", None, 30.0) and not session.resolve_isolation("cuda", False, None)
    with pytest.raises(AttnbenchError, match="a time limit needs a worker process"):
        session.resolve_isolation("cpu", False, 30.0)


def test_the_dry_run_forecasts_every_task_and_the_cpu_timing(suite: Path, tmp_path: Path) -> None:
    plan = session.plan(suite, RunOptions())
    dry = session.dry_run(plan, RunOptions(cache_dir=tmp_path / "cache"))
    assert len(dry.forecast.tasks) == 4 and all(t.runs for t in dry.forecast.tasks)
    assert dry.forecast.total_s > 0 and not dry.cpu_timing and dry.timing.min_samples == 1


@pytest.mark.slow
def test_execute_writes_env_first_then_every_record_and_refuses_an_existing_run(suite: Path, tmp_path: Path) -> None:
    plan = session.plan(suite, RunOptions())
    quiet = Console(file=open("/dev/null", "w"))
    out = tmp_path / "run"
    outcome = session.execute(plan, out, quiet, lambda: False, RunOptions(cache_dir=tmp_path / "cache"))
    assert (outcome.planned, outcome.measured, outcome.mismatches, outcome.stopped) == (4, 4, 0, False)
    assert [r.status for r in outcome.records] == ["ok"] * 4 and outcome.results == out / "results.jsonl"
    env = json.loads((out / "env.json").read_text())
    assert env["suite_name"] == "planned" and env["prediction"]["measurements"] == 4 and not env["isolated"]
    session.record_actual(out, outcome, 12.5)
    assert json.loads((out / "env.json").read_text())["actual"]["measured"] == 4
    with pytest.raises(AttnbenchError, match="--resume"):
        session.execute(plan, out, quiet, lambda: False, RunOptions(cache_dir=tmp_path / "cache"))
    assert len((out / "results.jsonl").read_text().splitlines()) == 4  # the earlier results are untouched


@pytest.mark.slow
def test_a_backend_that_cannot_run_here_is_named_once_before_the_first_measurement(tmp_path: Path) -> None:
    """sdpa-cudnn needs CUDA: its reason is printed once before the progress, none of its two skips prints a
    progress line or a row in the final tables, and every one of them is still recorded with that reason."""
    import io

    from attnbench.cli.tables import print_summary

    path = tmp_path / "mixed.yaml"
    path.write_text(SUITE.replace("backends: [naive, sdpa]", "backends: [naive, sdpa-cudnn]"))
    plan = session.plan(path, RunOptions())
    screen = io.StringIO()
    outcome = session.execute(plan, tmp_path / "run", Console(file=screen, width=200), lambda: False,
                              RunOptions(cache_dir=tmp_path / "cache"))
    reason = "needs CUDA (PyTorch has no CPU implementation of CUDNN_ATTENTION)"
    text = screen.getvalue()
    assert text.count(reason) == 1 and text.index(reason) < text.index("naive ")
    assert not [line for line in text.splitlines() if line.startswith("[") and "sdpa-cudnn" in line]
    assert [line.startswith("[") for line in text.splitlines() if "naive " in line].count(True) == 2
    skipped = [r for r in outcome.records if r.backend == "sdpa-cudnn"]
    assert len(skipped) == 2 and {(r.status, r.reason) for r in skipped} == {("skipped", reason)}
    tables = io.StringIO()
    print_summary(outcome.records, Console(file=tables, width=200), outcome.unavailable)
    assert "│ sdpa-cudnn" not in tables.getvalue() and "│ naive" in tables.getvalue()
    assert tables.getvalue().count("sdpa-cudnn") == 1


def test_the_sustained_state_loop_is_on_for_a_gpu_and_off_for_a_cpu_unless_the_suite_says(tmp_path: Path) -> None:
    from attnbench.sweep.suite import load_suite

    default = load_suite(write(tmp_path / "a.yaml", SUITE))
    assert session.settings_of(default, "cuda").energy_ms == 1000 and session.settings_of(default, "cpu").energy_ms == 0
    asked = load_suite(write(tmp_path / "b.yaml", SUITE.replace("max_samples: 1}", "max_samples: 1, energy_ms: 1500}")))
    assert session.settings_of(asked, "cpu").energy_ms == session.settings_of(asked, "cuda").energy_ms == 1500


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


SIX = SUITE.replace("seq_len: [32, 64]", "seq_len: [32, 48, 64]")


@pytest.mark.parametrize("options", [RunOptions(shard=parse_shard("1/3")), RunOptions(devices=(0, 1))],
                         ids=["shard", "devices"])
def test_the_dry_run_and_the_runs_own_forecast_agree(options: RunOptions, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """--dry-run prints what the run predicts for itself (env.json's prediction and its ETA): its shard's
    measurements only, a worker per --devices GPU, isolated."""
    import dataclasses

    path = tmp_path / "six.yaml"
    path.write_text(SIX)
    options = dataclasses.replace(options, cache_dir=tmp_path / "cache")
    plan = session.plan(path, options)
    dry = session.dry_run(plan, options).forecast
    alone = session.dry_run(plan, RunOptions(cache_dir=tmp_path / "cache")).forecast
    seen = {}

    def spy(plan, options, directory, run, precompiled, errors, should_stop, phases):  # the measurements aside
        seen.update(predicted=run.predicted, workers=run.mode.workers, isolate=run.mode.isolate, tasks=run.tasks)
        return 0, []

    monkeypatch.setattr(session, "measure_all", spy)
    quiet = Console(file=open("/dev/null", "w"))
    session.execute(plan, tmp_path / "run", quiet, lambda: False, options)
    written = json.loads((tmp_path / "run" / "env.json").read_text())["prediction"]
    assert written == dry.to_dict() == seen["predicted"].to_dict()
    if options.shard is not None:
        assert dry.to_dict()["measurements"] == len(seen["tasks"]) == 2 < alone.to_dict()["measurements"] == 6
    else:
        assert seen["workers"] == 2 and seen["isolate"] and dry.to_dict() != alone.to_dict()
