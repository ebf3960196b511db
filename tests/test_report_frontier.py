"""The report's accuracy–speed frontier, FP8 speed-ups and "not faster" findings (attnbench.report.frontier), from a
recorded CPU run of suites/fp8.yaml (tests/data/fp8-cpu: naive and sdpa in bf16, naive-fp8 in six FP8 formats at
seq 256, and a decode step over a bf16 and an FP8 K/V cache) and from records made here."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from attnbench.records.results import load_records
from attnbench.report.frontier import (
    error_vs_original,
    faster,
    findings_lines,
    format_of,
    frontier_chart,
    frontier_groups,
    pareto,
)
from attnbench.report.plotting import render_chart
from attnbench.report.render import render_report
from attnbench.report.styles import backend_styles
from tests.helpers import loaded
from tests.test_report import a_record, write_run

RUN = Path(__file__).parent / "data" / "fp8-cpu"


def test_each_case_is_one_frontier_of_its_formats() -> None:
    records = load_records(RUN)
    groups = frontier_groups(records)
    assert len(groups) == 2  # the dense causal case, the decode step
    dense = next(g for g in groups if g.lengths[0][0] != 1)
    assert dense.shape.dtype == "bfloat16"  # its FP8 records' originals are the bf16 case's
    formats = sorted(format_of(r) for r in dense.records)
    assert formats == ["bf16", "bf16", "bf16", "fp8e4m3 per-block 128", "fp8e4m3 per-head", "fp8e4m3 per-tensor",
                       "fp8e5m2 per-block 128", "fp8e5m2 per-head", "fp8e5m2 per-tensor"]
    decode = next(g for g in groups if g.lengths[0][0] == 1)
    assert sorted(format_of(r) for r in decode.records) == ["K/V fp8e4m3 per-head", "K/V fp8e4m3 per-tensor", "bf16",
                                                            "bf16", "bf16"]


def test_the_y_axis_is_the_error_against_the_original_inputs() -> None:
    for r in load_records(RUN):
        if r.status != "ok":
            continue
        extra = r.extra
        if r.quant:  # attnbench quantized: the kernel's output against the reference on the originals
            assert error_vs_original(r) == extra["error_vs_original"]["rel_l2"]
            assert extra["error_vs_original"]["rel_l2"] > extra["kernel_error"]["rel_l2"]
        else:  # the inputs are the originals
            assert error_vs_original(r) == extra["kernel_error"]["rel_l2"]


@pytest.mark.slow
def test_the_chart_is_drawn_and_repeatable() -> None:
    groups = frontier_groups(load_records(RUN))
    styles = backend_styles(r.backend for g in groups for r in g.records)
    first = render_chart(frontier_chart, groups[0], styles)
    assert first == render_chart(frontier_chart, groups[0], styles)
    width, height = Image.open(io.BytesIO(first)).size
    assert (width, height) == (1300, 680)


def test_findings_say_the_speed_up_and_what_is_not_faster() -> None:
    lines = findings_lines(load_records(RUN))
    records = [r for r in load_records(RUN) if r.status == "ok" and r.seq_len == 256]
    naive = next(r for r in records if r.backend == "naive")
    tensor = next(r for r in records if r.backend == "naive-fp8" and r.dtype == "float8_e4m3fn"
                  and r.quant == "tensor")
    speed = next(line for line in lines if line.startswith("FP8 speed-up on causal") and "seq 256" in line)
    ratio = float(naive.time_ms) / float(tensor.time_ms)
    assert f"fp8e4m3 per-tensor {ratio:.2g}×" in speed and speed.endswith("the speed of naive in bf16.")
    best = min((r for r in records if not r.quant), key=lambda r: float(r.time_ms))
    slow = next(line for line in lines if line.startswith(f"Not faster than {best.backend} in bf16"))
    assert "naive-fp8 in fp8e4m3 per-tensor" in slow and f"error {error_vs_original(tensor):.2g}" in slow


def frontier_records(fp8_ms: float, fp8_interval: tuple[float, float] | None) -> list[dict[str, Any]]:
    base = dict(dtype="bfloat16", causal=True, seq_len=512, kv_seq_len=512)
    bf16 = a_record(backend="cudnn", time_ms=2.0, ci_low_ms=1.9, ci_high_ms=2.1,
                    extra={"kernel_error": {"max_abs": 0.01, "rel_l2": 0.002, "cosine": 1.0}}, **base)
    fp8 = a_record(backend="cudnn-fp8", time_ms=fp8_ms, ci_low_ms=None if fp8_interval is None else fp8_interval[0],
                   ci_high_ms=None if fp8_interval is None else fp8_interval[1],
                   extra={"quantized": "attnbench", "error_vs_original": {"max_abs": 0.1, "rel_l2": 0.04, "cosine": 1},
                          "kernel_error": {"max_abs": 0.01, "rel_l2": 0.003, "cosine": 1.0}},
                   **{**base, "dtype": "float8_e4m3fn", "quant": "tensor"})
    return [bf16, fp8]


def test_an_fp8_kernel_measurably_faster_gets_no_not_faster_line() -> None:
    lines = findings_lines(loaded(frontier_records(1.0, (0.95, 1.05))))
    assert lines == ["FP8 speed-up on causal · 8 heads · d=64 · fwd · cpu · seq 512: cudnn-fp8 runs at fp8e4m3 "
                     "per-tensor 2× the speed of cudnn in bf16."]


def test_an_fp8_kernel_within_the_bf16_ones_interval_is_not_faster() -> None:
    lines = findings_lines(loaded(frontier_records(1.95, (1.85, 2.05))))  # lower median, overlapping intervals
    assert lines[1] == ("Not faster than cudnn in bf16 (2 ms, error 0.002 against the original inputs) on causal · "
                        "8 heads · d=64 · fwd · cpu · seq 512: cudnn-fp8 in fp8e4m3 per-tensor 1.95 ms, error 0.04.")
    assert not faster(*loaded(frontier_records(3.0, None))[::-1])


def test_pareto_keeps_what_nothing_beats_on_both() -> None:
    assert pareto([(1.0, 0.1), (2.0, 0.01), (3.0, 0.05), (4.0, 0.001), (0.5, 0.2)]) == [
        (0.5, 0.2), (1.0, 0.1), (2.0, 0.01), (4.0, 0.001)]


@pytest.mark.slow
def test_the_report_puts_the_frontiers_first(tmp_path: Path) -> None:
    render_report(RUN, tmp_path)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    figures = [line.split('"')[1] for line in page.splitlines() if line.startswith('<figure id="chart-')]
    figures = [f for f in figures if not f.startswith("chart-group-")]  # drawn beside each group's answer, first
    assert figures[0].startswith("chart-frontier-01-") and figures[1].startswith("chart-frontier-02-")
    assert "FP8 speed-up on" in (tmp_path / "summary.md").read_text(encoding="utf-8")
    # a render of other results leaves no stale frontier behind
    write_run(tmp_path / "plain", [a_record()], json.loads((RUN / "env.json").read_text()))
    render_report(tmp_path / "plain", tmp_path)
    assert not list((tmp_path / "charts").glob("frontier-*.png"))
    assert math.isfinite(float(json.loads((RUN / "results.jsonl").read_text().splitlines()[0])["flops"]))
