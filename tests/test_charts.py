"""attnbench.report.charts and roofline: the unit each chart is drawn in, chosen once from its data, and legends
that name only the backends drawn there; the correctness chart's backend names stay apart and off the legend."""

from __future__ import annotations

import math
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from attnbench.core.units import GIB, MIB
from attnbench.report.charts import correctness_chart, group_chart
from attnbench.report.groups import group_records
from attnbench.report.roofline import roofline_chart
from attnbench.report.styles import backend_styles
from tests.helpers import loaded
from tests.test_report import a_record

LENGTHS = (1024, 2048, 4096)


def sweep(backend: str, memory: tuple[float, ...], tflops: tuple[float, ...], **extra: Any) -> list[dict[str, Any]]:
    """One backend's records over LENGTHS with these peak memories (bytes) and throughputs (TFLOP/s)."""
    return [a_record(backend=backend, seq_len=n, kv_seq_len=n, peak_memory_bytes=int(m), tflops=t, flops=1e9,
                     **extra) for n, m, t in zip(LENGTHS, memory, tflops, strict=False)]


def panels(records: list[dict[str, Any]], peak: float | None = None) -> tuple[Any, Any, list[str]]:
    """(memory axes, throughput axes, legend labels) of the group chart of these records."""
    styles = backend_styles(r["backend"] for r in records)
    fig = group_chart(group_records(loaded(records))[0], styles, None, peak, None)
    return fig.axes[1], fig.axes[2], [t.get_text() for t in fig.legends[0].get_texts()]


def drawn(ax: Any) -> list[float]:
    return sorted(y for line in ax.lines for y in line.get_ydata() if math.isfinite(y) and y > 0)


def test_memory_under_a_gib_is_in_mib_and_throughput_under_a_tflops_in_gflops() -> None:
    # a CPU run: 5 MiB to 4.6 GiB of peak memory, 3 to 90 GFLOP/s (the GiB axis had a tick at 0.005)
    records = sweep("sdpa", (5 * MIB, 9 * MIB, 17 * MIB), (0.09, 0.05, 0.016)) \
        + sweep("naive", (0.26 * GIB, 1.1 * GIB, 4.6 * GIB), (0.013, 0.008, 0.003))
    memory, throughput, _ = panels(records)
    assert memory.get_ylabel() == "peak memory (MiB, log)"
    assert drawn(memory)[0] == pytest.approx(5.0) and drawn(memory)[-1] == pytest.approx(4.6 * 1024)
    assert throughput.get_ylabel() == "GFLOP/s"
    assert drawn(throughput)[0] == pytest.approx(3.0) and drawn(throughput)[-1] == pytest.approx(90.0)


def test_gib_and_tflops_when_every_value_is_that_large() -> None:
    records = sweep("flash-attn", (1.5 * GIB, 3 * GIB, 6 * GIB), (0.6, 250.0, 400.0))
    memory, throughput, _ = panels(records)
    assert memory.get_ylabel() == "peak memory (GiB, log)" and drawn(memory)[0] == pytest.approx(1.5)
    assert throughput.get_ylabel() == "TFLOP/s" and drawn(throughput)[-1] == pytest.approx(400.0)


def test_the_peak_line_is_written_in_the_charts_unit() -> None:
    records = sweep("sdpa", (MIB, MIB, MIB), (0.05, 0.08, 0.1))
    _, throughput, _ = panels(records, peak=0.2)
    assert "peak 200 GFLOP/s (fp32 dense)" in [t.get_text() for t in throughput.texts]
    assert max(drawn(throughput)) == pytest.approx(200.0)


def test_a_backend_skipped_everywhere_is_not_in_the_legends() -> None:
    ran = sweep("sdpa", (MIB, MIB, MIB), (0.05, 0.08, 0.1))
    skipped = [a_record(backend="sdpa-cudnn", seq_len=n, kv_seq_len=n, status="skipped", reason="needs CUDA",
                        time_ms=None, tflops=None, peak_memory_bytes=None, max_abs_error=None, error_bound=None)
               for n in LENGTHS]
    records = ran + skipped
    _, _, legend = panels(records)
    assert "sdpa" in legend and "sdpa-cudnn" not in legend
    styles = backend_styles(r["backend"] for r in records)
    fig = correctness_chart(loaded(records), styles)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["sdpa"]  # and no "mismatch" entry: there is none
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["sdpa"]
    roof = roofline_chart(loaded(records), styles, None)
    assert [t.get_text() for t in roof.legends[0].get_texts()] == ["sdpa"]
    assert roof.axes[0].get_ylabel() == "achieved GFLOP/s (log)"


def test_the_correctness_charts_backend_names_overlap_neither_each_other_nor_the_legend() -> None:
    names = ["flash-attn", "flash-attn-3", "flash-attn-4", "flex", "flex-dynamic", "naive", "onnxruntime-gqa",
             "onnxruntime-mha", "sdpa", "sdpa-efficient", "sdpa-math", "sliding-window"]
    records = [a_record(backend=b, max_abs_error=1e-7 * (i + 1), error_bound=1e-5) for i, b in enumerate(names)]
    records.append(a_record(backend="sdpa", status="ok", max_abs_error=None))  # one note under the panels
    fig = correctness_chart(loaded(records), backend_styles(names))
    renderer = FigureCanvasAgg(fig).get_renderer()
    ticks = fig.axes[1].get_xticklabels()
    assert [t.get_text() for t in ticks] == names
    boxes = [t.get_window_extent(renderer) for t in ticks]
    # parallel names slanted at 45°: neighbours are apart when their anchors' spacing, across the slant, exceeds a line
    spacing = (boxes[1].x1 - boxes[0].x1) * math.sin(math.radians(ticks[0].get_rotation()))
    assert spacing > 1.3 * ticks[0].get_fontsize() * fig.dpi / 72
    notes = [t for t in fig.texts if t is not fig._suptitle]
    assert len(notes) == 1
    below = [fig.legends[0].get_window_extent(renderer)] + [t.get_window_extent(renderer) for t in notes]
    lowest = min(b.y0 for b in boxes)
    assert lowest > max(b.y1 for b in below)  # every name above the legend and the notes
    assert min(b.x0 for b in boxes) >= 0 and lowest >= 0
