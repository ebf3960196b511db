"""The CPU's roofs end to end (behaviour-wide): measured at a run's start as the best repetition, written to
env.json, every ok CPU record's percent_of_peak against them, and a record above its roof flagged and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.backends.registry import default_registry
from attnbench.cli.main import app
from attnbench.core.peaks import MatmulRoof, MeasuredRoofs
from attnbench.records.env import read_env
from attnbench.records.results import load_records
from attnbench.report.findings import build_findings
from attnbench.report.groups import group_records
from attnbench.report.render import roofs_of
from attnbench.report.roofline import device_peaks, roofline_chart
from attnbench.report.styles import backend_styles
from attnbench.run.calibration import ROOF_BUDGET_VAR, matmul_roof, measure_roofs, timed_rounds
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import loaded, make_case


class LoadedClock:
    """A clock that only the timed calls move: each call takes the next of `durations` (seconds)."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.durations = 0.0, list(durations)

    def __call__(self) -> float:
        return self.now

    def call(self) -> None:
        self.now += self.durations.pop(0)


def test_a_planted_load_cannot_pull_the_roof_below_the_best_repetition() -> None:
    """Three of four rounds slowed 10× by a fake load: the roof is the one unslowed repetition's rate, where the
    mean over the window (how the forecast's calibration times its matmul) would read less than a third of it."""
    fast = 0.001  # an unloaded 512×512 matmul: 268 GFLOP/s
    script = [10 * fast, 80 * fast, 10 * fast, 80 * fast, fast, 6 * fast, 10 * fast, 80 * fast]  # 512, 1024 in turn
    clock = LoadedClock(script)
    times = timed_rounds({512: clock.call, 1024: clock.call}, budget_s=0.0, clock=clock, min_rounds=4)
    assert times == {512: pytest.approx([10 * fast, 10 * fast, fast, 10 * fast]),
                     1024: pytest.approx([80 * fast, 80 * fast, 6 * fast, 80 * fast])}
    roof = matmul_roof("float32", times)
    best = 2 * 1024 ** 3 / (6 * fast) / 1e9  # 358 GFLOP/s, above 512²'s best (268)
    assert roof.gflops == pytest.approx(best) and roof.size == 1024 and roof.reps == 8
    mean = 2 * 1024 ** 3 / (sum(times[1024]) / 4) / 1e9
    assert roof.gflops > 3 * mean
    assert roof.median_gflops == pytest.approx(2 * 1024 ** 3 / (80 * fast) / 1e9)


def test_the_rounds_stop_on_the_budget_once_the_minimum_is_met() -> None:
    clock = LoadedClock([0.3] * 20)
    times = timed_rounds({"a": clock.call, "b": clock.call}, budget_s=1.0, clock=clock, min_rounds=1)
    assert len(times["a"]) + len(times["b"]) == 4  # 1.2 s: the call that crossed 1 s is the last


def test_measured_roofs_are_on_the_runs_threads_and_never_below_their_own_median() -> None:
    import torch

    roofs = measure_roofs(("float32", "bfloat16"), budget_s=0.05, sizes=(64, 128), copy_bytes=1 << 22)
    assert roofs is not None and roofs.threads == torch.get_num_threads()
    assert [m.dtype for m in roofs.matmul] == ["float32", "bfloat16"]
    for m in roofs.matmul:
        assert m.size in (64, 128) and m.reps >= 2 and m.gflops >= m.median_gflops > 0
    assert roofs.copy_gbs > 0 and roofs.copy_reps >= 3 and roofs.copy_bytes == 1 << 22
    assert MeasuredRoofs.from_dict(json.loads(json.dumps(roofs.to_dict()))) == roofs
    assert measure_roofs(("float32",), budget_s=0) is None  # a budget of 0 measures none


@pytest.mark.slow
def test_a_run_writes_its_roofs_and_every_ok_cpu_record_is_judged_against_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROOF_BUDGET_VAR, "0.05")
    suite = tmp_path / "roofs.yaml"
    suite.write_text("name: roofs\ndevice: cpu\nbackends: [naive, sdpa-flash, sdpa-math]\n"
                     "timing: {warmup_ms: 0, budget_ms: 2, min_samples: 2}\n"
                     "sweep: {seq_len: [64, 1], kv_seq_len: [128], heads: [2], head_dim: [16], "
                     "dtype: [float32, bfloat16], causal: [true]}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(out), "--no-isolate"])
    assert result.exit_code == 0, result.output
    env = json.loads((out / "env.json").read_text())
    roofs = roofs_of(read_env(out))
    assert roofs is not None and {m.dtype for m in roofs.matmul} == {"float32", "bfloat16"}
    assert env["roofs"]["copy_gbs"] == roofs.copy_gbs > 0 and "best" in env["roofs"]["method"]
    assert env["prediction"]["roofs_s"] > 0
    ok = [r for r in load_records(out) if r.status == "ok"]
    assert len(ok) == 12
    threads = f"{roofs.threads} thread{'s' if roofs.threads != 1 else ''}"
    for r in ok:
        extra = r.extra
        if r.seq_len == 1:  # decode-like: bytes against the copy
            assert extra["peak_bound"] == "memory"
            assert r.percent_of_peak == pytest.approx(100 * r.bandwidth_gbs / roofs.copy_gbs)
            assert extra["peak_source"] == f"measured roof: {roofs.copy_gbs:.1f} GB/s copy, {threads}"
        else:
            m = roofs.matmul_for(r.dtype)
            assert extra["peak_bound"] == "compute"
            assert r.percent_of_peak == pytest.approx(100 * r.tflops / (m.gflops / 1e3))
            assert extra["peak_source"] == f"measured roof: {m.gflops:.0f} GFLOP/s {r.dtype} matmul, {threads}"
        assert extra.get("above_roof", False) == (r.percent_of_peak > 100)
    peaks = device_peaks(ok, None, None, None, roofs)  # the report's roofline draws both roofs
    assert all(p.tflops and p.bandwidth_gbs for p in peaks.values()) and (out / "charts" / "roofline.png").is_file()
    fig = roofline_chart(ok, backend_styles(r.backend for r in ok), env["device_name"], roofs=roofs)
    texts = [t.get_text() for t in fig.axes[0].texts]
    fp32 = roofs.matmul_for("float32").gflops
    assert f"fp32 measured roof {fp32:.0f} GFLOP/s" in texts and f"memory {roofs.copy_gbs:.4g} GB/s" in texts
    assert "compute and bandwidth roof drawn" in fig.axes[0].get_title()


def test_a_bad_roof_budget_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROOF_BUDGET_VAR, "lots")
    result = CliRunner().invoke(app, ["run", "quick", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and f"{ROOF_BUDGET_VAR}='lots'" in result.output
    assert not (tmp_path / "out" / "env.json").exists()


def planted(gflops: float) -> MeasuredRoofs:
    return MeasuredRoofs(2, (MatmulRoof("float32", gflops, 512, 4, gflops / 2),), 10.0, 1 << 28, 3, 1.0, "planted")


def test_a_record_above_a_planted_low_roof_is_flagged_and_the_findings_say_the_roof_is_wrong() -> None:
    case = make_case(seq_len=64, heads=4, head_dim=32)
    timing = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)

    def judged(roofs: MeasuredRoofs) -> dict:
        from tests.test_peaks import FixedTimer

        record = measure(CaseData(case), default_registry().get("naive"), FixedTimer(1.0),
                         Settings(RunInfo("r", "t", "cpu", roofs=roofs), timing))
        return record.to_dict()

    achieved_gflops = judged(planted(1e6))["tflops"] * 1e3
    fine = judged(planted(4 * achieved_gflops))
    assert fine["percent_of_peak"] == pytest.approx(25.0) and "above_roof" not in fine["extra"]
    assert not build_findings(group_records(loaded([fine])), loaded([fine]), None).roofs
    low = judged(planted(achieved_gflops / 2))
    assert low["percent_of_peak"] == pytest.approx(200.0) and low["extra"]["above_roof"] is True
    lines = build_findings(group_records(loaded([low])), loaded([low]), None).roofs
    assert len(lines) == 1 and lines[0].startswith("Above its roof: naive on ")
    assert "200% of measured roof:" in lines[0] and "measured under load, or on too small a matmul" in lines[0]
