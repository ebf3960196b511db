"""The command line end to end: through typer's CliRunner, and once as a real subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.results import load_records
from tests.helpers import assert_kernels_named

ROOT = Path(__file__).parent.parent
TINY = """\
name: tiny
device: cpu
backends: [naive, sdpa-math, sdpa-efficient]
timing: {warmup_ms: 1, budget_ms: 5, min_samples: 2}
sweep:
  seq_len: [64, 128]
  heads: [4]
  kv_heads: [heads, 1]
  head_dim: [32]
  causal: [true]
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.output.startswith("attnbench 0.")


def test_validate_prints_case_count(tiny: Path) -> None:
    result = invoke("validate", tiny, "--device", "cpu")
    assert result.exit_code == 0
    assert "valid; 4 cases on cpu" in result.output


def test_misspelt_key_exits_2_with_one_line(tiny: Path) -> None:
    tiny.write_text(TINY.replace("head_dim:", "head_dmi:"))
    result = invoke("validate", tiny)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "sweep.head_dmi: unknown key (did you mean 'head_dim'?)" in lines[0]
    assert "Traceback" not in result.output


def test_unknown_backend_in_suite_names_its_position(tiny: Path) -> None:
    tiny.write_text(TINY.replace("sdpa-math", "sdpa-maht"))
    result = invoke("run", tiny, "--out", tiny.parent / "out")
    assert result.exit_code == 2
    assert "backends[1]: unknown backend 'sdpa-maht' (did you mean 'sdpa-math'?)" in result.output
    assert not (tiny.parent / "out").exists(), "nothing runs or is written before the suite is valid"


def test_cuda_on_a_cpu_machine_is_a_user_error(tiny: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = invoke("run", tiny, "--device", "cuda")
    assert result.exit_code == 2 and "no CUDA device is available" in result.output


@pytest.mark.slow
def test_list_shows_every_backend_with_availability() -> None:
    result = CliRunner().invoke(app, ["list", "--device", "cpu"], terminal_width=200)
    assert result.exit_code == 0
    for name in ("naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"):
        assert name in result.output
    assert "needs CUDA (PyTorch has no CPU implementation of EFFICIENT_ATTENTION)" in result.output


def test_dry_run_prints_cases_and_runs_nothing(tiny: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tiny), "--dry-run", "--out", str(tiny.parent / "o")],
                                terminal_width=200)
    assert result.exit_code == 0
    assert "4 cases × 3 backends" in result.output and "seq 128" in result.output
    assert not (tiny.parent / "o").exists()


@pytest.mark.slow
def test_run_writes_results_and_env_and_refuses_to_overwrite(tiny: Path) -> None:
    out = tiny.parent / "run"
    result = invoke("run", tiny, "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "report.html").is_file() and (out / "summary.md").is_file()
    charts = sorted((out / "charts").glob("*.png"))
    assert len(charts) == 2 + 4, "one figure per case group (MHA, MQA) plus MQA/GQA, roofline, correctness, setup"
    assert (out / "charts" / "setup.png") in charts
    records = load_records(out)
    assert len(records) == 4 * 3
    assert {r.status for r in records if r.backend != "sdpa-efficient"} == {"ok"}
    assert {r.status for r in records if r.backend == "sdpa-efficient"} == {"skipped"}
    env = json.loads((out / "env.json").read_text())
    assert env["suite_text"] == TINY and env["device"] == "cpu" and env["torch"]
    again = invoke("run", tiny, "--out", out)
    assert again.exit_code == 2 and "already holds results.jsonl" in again.output
    assert len(load_records(out)) == 12, "earlier results are untouched"


@pytest.mark.slow
def test_no_report_writes_the_records_and_leaves_the_rendering_to_report(tiny: Path) -> None:
    out = tiny.parent / "bare"
    result = invoke("run", tiny, "--out", out, "--no-report", "--backend", "naive")
    assert result.exit_code == 0, result.output
    assert len(load_records(out)) == 4 and not (out / "report.html").exists() and (out / "env.json").is_file()
    assert invoke("report", out).exit_code == 0 and (out / "report.html").is_file()


@pytest.mark.slow
def test_a_mismatch_makes_run_exit_1_after_writing_everything(tiny: Path) -> None:
    out = tiny.parent / "bad"
    result = invoke("run", tiny, "--out", out, "--plugin", "attnbench.backends.testing:FAULTY",
                    "--backend", "faulty-wrong", "--backend", "faulty-raise", "--backend", "naive")
    assert result.exit_code == 1
    statuses = [(r.backend, r.status) for r in load_records(out)]
    assert statuses[:3] == [("faulty-wrong", "mismatch"), ("faulty-raise", "error"), ("naive", "ok")]
    assert len(statuses) == 12


@pytest.mark.slow
@pytest.mark.serial  # its wall time against its forecast: a test starting on the other core would skew it
def test_quick_suite_as_a_real_subprocess(tmp_path: Path) -> None:
    """`python -m attnbench run suites/quick.yaml`: every PyTorch backend ok or skipped with a reason, the
    harness's overhead printed last, and the wall time within 2x of the forecast (with an empty --cache-dir)."""
    out = tmp_path / "quick"
    proc = subprocess.run([sys.executable, "-m", "attnbench", "run", str(ROOT / "suites" / "quick.yaml"),
                           "--out", str(out), "--device", "cpu", "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = load_records(out)
    assert records and {r.status for r in records} <= {"ok", "skipped"}
    assert all(r.reason for r in records if r.status == "skipped")
    assert {r.backend for r in records if r.status == "ok"} >= {"naive", "sdpa", "sdpa-math", "sdpa-flash"}
    assert_kernels_named(records)  # each ok record names what ran, and the flash kernel is sdpa-flash's top one
    assert "Traceback" not in proc.stderr
    # The last line is the harness's overhead, from the records: samples, warm-up and the forwards' checked calls
    # (their first warm-up call) against the wall time from the process's start, which env.json keeps too.
    actual = json.loads((out / "env.json").read_text())["actual"]
    timed = sum(sum(r.times_ms) + r.extra["warmup_ms"]
                + (0.0 if r.extra.get("check_sampled") else r.extra.get("check_call_ms", 0.0))
                for r in records if r.status == "ok") / 1e3
    assert actual["timed_s"] == pytest.approx(timed, abs=0.006)
    assert any(r.extra.get("check_call_ms") and not r.extra["check_sampled"] for r in records)
    last = proc.stderr.strip().splitlines()[-1]
    printed = re.fullmatch(r"timed ([\d.]+) s of ([\d.]+) s wall \(([\d.]+)x\)", last)
    assert printed, last
    assert float(printed[1]) == pytest.approx(timed, abs=0.051)
    assert float(printed[2]) == pytest.approx(actual["wall_s"], abs=0.051)
    assert float(printed[3]) == pytest.approx(actual["wall_s"] / actual["timed_s"], rel=0.01)
    assert 1.0 < actual["wall_s"] / actual["timed_s"] < 10, "the wall includes the timing, the imports and the report"
    prediction = json.loads((out / "env.json").read_text())["prediction"]
    assert 0.5 <= actual["wall_s"] / prediction["total_s"] <= 2.0, (prediction, actual)
    assert prediction["machine"]["estimate"] is False


@pytest.mark.slow
def test_report_rerenders_the_same_charts_byte_for_byte(tiny: Path) -> None:
    out = tiny.parent / "run"
    assert invoke("run", tiny, "--out", out).exit_code == 0
    first = {p.name: p.read_bytes() for p in (out / "charts").glob("*.png")}
    again = tiny.parent / "again"
    result = invoke("report", out, "--out", again)
    assert result.exit_code == 0, result.output
    assert {p.name: p.read_bytes() for p in (again / "charts").glob("*.png")} == first
    only_md = invoke("report", out, "--out", tiny.parent / "md", "--format", "md")
    assert only_md.exit_code == 0 and [p.name for p in (tiny.parent / "md").iterdir()] == ["summary.md"]


def test_compare_exit_codes(tmp_path: Path) -> None:
    data = ROOT / "tests" / "data"
    regressed = invoke("compare", data / "compare-base", data / "compare-new", "--md", tmp_path / "c.md")
    assert regressed.exit_code == 1
    assert "regression" in regressed.output and "new failure" in regressed.output
    assert "oom" in (tmp_path / "c.md").read_text()
    assert invoke("compare", data / "compare-base", data / "compare-base").exit_code == 0
    bad = invoke("compare", data / "compare-base", tmp_path)
    assert bad.exit_code == 2 and "no attnbench results here" in bad.output
    assert invoke("compare", data / "compare-base", data / "compare-new", "--threshold", "lots").exit_code == 2
