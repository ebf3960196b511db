"""`history plot`: one PNG per (GPU, case, backend) trend, drawn on matplotlib's Agg canvas (docs/history.md)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from attnbench.history.trend import Point, Trend
from attnbench.report.plotting import DPI, render_chart
from attnbench.report.styles import MISMATCH_COLOR, STATUS_LABELS

FIGSIZE = (9.0, 5.0)  # 900 x 500 px at the report's DPI
COLOR = "#1f77b4"
CHANGE_COLOR = "#7b4173"
CHANGE_CHARS = 60  # a version change's label wraps here


def file_name(trend: Trend) -> str:
    """'NVIDIA_H200-cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd-sdpa.png': unique per trend."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", f"{trend.gpu}-{trend.case_id}-{trend.backend}") + ".png"


def run_label(point: Point) -> str:
    """The x tick of a run: its start (month-day hour:minute) over its id."""
    stamp = point.run.timestamp
    return f"{stamp[5:10]} {stamp[11:16]}\n{point.run.run_id[:8]}"


def change_positions(trend: Trend) -> list[tuple[float, str]]:
    """Where the vertical markers go (halfway between the two runs) and what changed."""
    return [(i - 0.5, "; ".join(p.changes)) for i, p in enumerate(trend.points) if i > 0 and p.changes]


def draw_trend(trend: Trend) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    xs = list(range(len(trend.points)))
    timed = [(x, p) for x, p in zip(xs, trend.points, strict=False) if p.timed]
    if timed:
        ax.plot([x for x, _ in timed], [p.time_ms for _, p in timed], color=COLOR, alpha=0.4, linewidth=1)
    for x, p in timed:
        low, high = p.interval if p.interval is not None else (p.time_ms, p.time_ms)
        hollow = p.noisy or p.throttled
        color = MISMATCH_COLOR if p.status == "mismatch" else COLOR
        ax.errorbar([x], [p.time_ms], yerr=[[p.time_ms - low], [high - p.time_ms]], fmt="o", color=color,
                    markerfacecolor="white" if hollow else color, markersize=8, capsize=6, elinewidth=1.5)
        mark = " (throttled)" if p.throttled else " (noisy)" if p.noisy else ""
        ax.annotate(f"{p.time_ms:.3g} ms{mark}", (x, high), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=9, color=color)
    if timed:
        values = [v for _, p in timed for v in (p.interval or (p.time_ms, p.time_ms))]
        low, high = min(values), max(values)
        pad = max((high - low) * 0.25, high * 0.02)
        ax.set_ylim(max(0.0, low - 2 * pad), high + 2 * pad)
    for x, p in zip(xs, trend.points, strict=False):
        if not p.timed:
            ax.plot([x], [0.04], marker="x", color="#57606a", markersize=10, transform=ax.get_xaxis_transform())
            ax.annotate(STATUS_LABELS.get(p.status, p.status), (x, 0.08), xycoords=ax.get_xaxis_transform(),
                        ha="center", fontsize=9, color="#57606a")
    for x, text in change_positions(trend):  # the change written up the line, on its left
        ax.axvline(x, color=CHANGE_COLOR, linestyle="--", linewidth=1.2)
        ax.text(x - 0.02, 0.98, textwrap.fill(text, CHANGE_CHARS), transform=ax.get_xaxis_transform(), va="bottom",
                ha="right", rotation=90, rotation_mode="anchor", fontsize=8, color=CHANGE_COLOR,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_xticks(xs, [run_label(p) for p in trend.points], fontsize=8)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylabel("median ms per call (interval as error bar)")
    ax.set_xlabel("run (start time, UTC, and id), oldest first")
    ax.set_title(f"{trend.backend} · {trend.case_id}\n{trend.gpu}", fontsize=11)
    return fig


def plot_trends(found: list[Trend], out_dir: Path) -> list[Path]:
    """One PNG per trend with at least one timed run, under `out_dir` (a file of the same name is redrawn)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for trend in found:
        if not trend.timed:
            continue
        path = out_dir / file_name(trend)
        path.write_bytes(render_chart(draw_trend, trend))
        written.append(path)
    return written
