"""The roofline chart: arithmetic intensity against achieved TFLOP/s, under the device's compute and bandwidth roofs."""

from __future__ import annotations

import dataclasses
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from attnbench.core import counting
from attnbench.core.case import Case
from attnbench.core.peaks import MeasuredRoofs, Peak, peak_for, roofs_peak
from attnbench.core.units import throughput_unit
from attnbench.records.record import TIMED, Record, Status
from attnbench.records.words import dtype_word
from attnbench.report.plotting import DPI, GROUP_FIGSIZE, figure_legend, plain_number
from attnbench.report.styles import MISMATCH_COLOR, BackendStyle

# The case's shape: Case's fields without a default (a record from before the workload axes has those only).
CASE_FIELDS = tuple(f.name for f in dataclasses.fields(Case) if f.default is dataclasses.MISSING)


def bytes_of(record: Record) -> int | None:
    """The record's bytes_moved, recomputed from its case where absent or from before schema 2 (then with the score
    matrix's traffic of a backend that materialises it)."""
    stored = int(record.bytes_moved) if record.bytes_moved else None
    if stored is not None and record.schema_version >= 2:
        return stored
    try:
        case = Case(**{name: getattr(record, name) for name in CASE_FIELDS})
    except TypeError:
        return stored
    from attnbench.backends.registry import default_registry

    registry = default_registry()
    memory = registry.get(record.backend).cost.memory if record.backend in registry else None
    floor = stored if stored is not None else counting.bytes_moved(case)
    return floor + (counting.score_traffic(case, memory) if memory is not None else 0)


def roofline_points(records: list[Record]) -> list[tuple[str, float, float, bool]]:
    """(backend, FLOPs per byte, TFLOP/s, mismatch) for every measured record with work and bytes."""
    points = []
    for r in records:
        if r.status not in TIMED or not r.tflops or not r.flops:
            continue
        moved = bytes_of(r)
        if moved:
            points.append((r.backend, float(r.flops) / moved, float(r.tflops), r.status == Status.MISMATCH))
    return points


def device_peaks(records: list[Record], device_name: str | None, peak_tflops: float | None,
                 peak_bandwidth_gbs: float | None, roofs: MeasuredRoofs | None = None) -> dict[str, Peak]:
    """The roofs per dtype: the overrides, else a CUDA device's datasheet row, or a CPU run's measured roofs."""
    cuda = any(r.device == "cuda" for r in records)
    dtypes = sorted({r.dtype for r in records if r.status in TIMED})
    if not cuda:
        return {d: roofs_peak(roofs, d, peak_tflops, peak_bandwidth_gbs) for d in dtypes}
    return {d: peak_for(device_name, d, peak_tflops, peak_bandwidth_gbs) for d in dtypes}


def roof_words(value_tflops: float, source: str | None) -> str:
    """A compute roof's label: GFLOP/s under one TFLOP/s (a CPU's), and whether it was measured or is a datasheet's."""
    kind = "measured roof" if source and source.startswith("measured roof") else "dense peak"
    rate = f"{value_tflops * 1e3:.0f} GFLOP/s" if value_tflops < 1 else f"{value_tflops:g} TFLOP/s"
    return f"{kind} {rate}"


def bandwidth_of(peaks: dict[str, Peak]) -> float | None:
    """The memory roof (GB/s): the same for every dtype."""
    return next((p.bandwidth_gbs for p in peaks.values() if p.bandwidth_gbs), None)


def _plot_points(ax: Any, points: list, backends: list[str], styles: dict[str, BackendStyle]) -> None:
    for backend in backends:
        mine = [p for p in points if p[0] == backend]
        style = styles[backend]
        ax.plot([p[1] for p in mine], [p[2] for p in mine], marker=style.marker, color=style.color, linestyle="none",
                markersize=7, alpha=0.85, zorder=3)
        bad = [p for p in mine if p[3]]
        if bad:
            ax.plot([p[1] for p in bad], [p[2] for p in bad], marker="o", markersize=14, markerfacecolor="none",
                    markeredgecolor=MISMATCH_COLOR, markeredgewidth=2.0, linestyle="none", zorder=4)


def _compute_roofs(ax: Any, peaks: dict[str, Peak], lo: float, hi: float, per_unit: float) -> list[str]:
    """Each compute roof from its ridge point on; fp16 and bf16 usually share one roof: one line, one label."""
    drawn = []
    by_value: dict[float, list[str]] = {}
    sources: dict[float, str | None] = {}
    for dtype, peak in peaks.items():
        if peak.tflops:
            by_value.setdefault(peak.tflops, []).append(dtype_word(dtype))
            sources[peak.tflops] = peak.tflops_source
    for value, words in by_value.items():
        ridge = value * 1e3 / bandwidth_of(peaks) if bandwidth_of(peaks) else lo
        ax.plot([ridge, hi], [value / per_unit] * 2, color="black", linestyle="--", linewidth=1.3, zorder=2)
        ax.annotate(f"{'/'.join(words)} {roof_words(value, sources[value])}", (hi, value / per_unit),
                    xytext=(-4, 4), textcoords="offset points", ha="right", va="bottom", fontsize=9)
        drawn.append("compute")
    return drawn


def _bandwidth_roof(ax: Any, peaks: dict[str, Peak], lo: float, ys: list[float], per_unit: float) -> list[str]:
    """The bandwidth slope, up to the FLOPs per byte where it reaches the highest roof."""
    bandwidth = bandwidth_of(peaks)
    if not bandwidth:
        return []
    top = max((p.tflops or 0) for p in peaks.values()) or max(ys) * per_unit * 3
    end = top * 1e3 / bandwidth
    ax.plot([lo, end], [bandwidth * lo / 1e3 / per_unit, top / per_unit], color="black", linestyle="-.",
            linewidth=1.3, zorder=2)
    ax.annotate(f"memory {bandwidth:.4g} GB/s", (lo, bandwidth * lo / 1e3 / per_unit), xytext=(4, 6),
                textcoords="offset points", ha="left", va="bottom", fontsize=9, rotation=0)
    return ["bandwidth"]


def _title(where: str, drawn: list[str]) -> str:
    if not drawn:
        return f"Roofline on {where} (no known peaks for this device: roofs not drawn; pass --peak-tflops)"
    title = f"Roofline on {where}: " + " and ".join(dict.fromkeys(drawn)) + " roof drawn"
    missing = [r for r in ("compute", "bandwidth") if r not in drawn]
    if missing:
        title += f" ({missing[0]} peak not known)"
    return title


def _legend(fig: Figure, points: list, backends: list[str], styles: dict[str, BackendStyle]) -> int:
    handles = [Line2D([], [], color=styles[b].color, marker=styles[b].marker, linestyle="none", label=b)
               for b in backends]
    if any(p[3] for p in points):
        handles.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none", linestyle="none",
                              markeredgecolor=MISMATCH_COLOR, markeredgewidth=2.0, label="mismatch (time flagged)"))
    return figure_legend(fig, handles) if handles else 0


def roofline_chart(records: list[Record], styles: dict[str, BackendStyle], device_name: str | None,
                   peak_tflops: float | None = None, peak_bandwidth_gbs: float | None = None,
                   roofs: MeasuredRoofs | None = None) -> Figure:
    """One point per measurement; the bandwidth roof (slope) meets each dtype's compute roof at its ridge point."""
    fig = Figure(figsize=(GROUP_FIGSIZE[0], 7.0), dpi=DPI)
    ax = fig.subplots()
    points = roofline_points(records)
    backends = sorted({p[0] for p in points})
    peaks = device_peaks(records, device_name, peak_tflops, peak_bandwidth_gbs, roofs)
    # One unit for the whole chart: GFLOP/s when every point and every compute roof is under 1 TFLOP/s.
    per_unit, unit_name = throughput_unit([p[2] for p in points] + [p.tflops for p in peaks.values() if p.tflops])
    points = [(b, x, y / per_unit, bad) for b, x, y, bad in points]
    _plot_points(ax, points, backends, styles)
    xs = [p[1] for p in points] or [1.0, 100.0]
    ys = [p[2] for p in points] or [1e-3, 1.0]
    ridges = [p.ridge for p in peaks.values() if p.ridge]
    lo, hi = min(xs + ridges) / 3, max(xs + ridges) * 3
    drawn = _compute_roofs(ax, peaks, lo, hi, per_unit) + _bandwidth_roof(ax, peaks, lo, ys, per_unit)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    for axis in (ax.xaxis, ax.yaxis):  # 100 and 0.5, not 10² and 5×10⁻¹
        axis.set_major_formatter(FuncFormatter(plain_number))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved, log)")
    ax.set_ylabel(f"achieved {unit_name} (log)")
    if not points:
        ax.text(0.5, 0.5, "no measurement with work and bytes to place", transform=ax.transAxes, ha="center")
    ax.set_title(_title(device_name or "this device", drawn))
    fig.suptitle("Roofline: how close each measurement runs to the device's roofs", fontsize=14, fontweight="bold")
    rows = _legend(fig, points, backends, styles)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.88, bottom=0.12 + 0.04 * rows)
    return fig
